"""megahour: infrastructure and runtime for million-hour robot-learning pre-training."""

# Kept equal to pyproject.toml's version by tests/deploy/test_releases.py.
__version__ = "0.2.0.dev0"
