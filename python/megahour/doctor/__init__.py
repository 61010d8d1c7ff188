"""`megahour doctor`: what a deploy needs, read from the hosts before (and after) it runs.

A read-only probe (``probe.sh``, POSIX sh, so a host without Python still answers) runs on every host
through Ansible; ``facts`` parses its sections, ``checks`` compares them with the inventory and the GPU
profiles, and ``cli`` prints one line per blocker with its fix.
"""
