"""Prometheus textfile-collector output shared by health, sweeper and delivery."""
