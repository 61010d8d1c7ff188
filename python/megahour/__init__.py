"""megahour: infrastructure and runtime for million-hour robot-learning pre-training."""

__version__ = "0.1.0"
