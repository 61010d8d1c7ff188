"""Sample specs from a YAML file (``layout.parse_spec`` gives the form), for the commands' ``--spec-file``:
a robot with other cameras, or raw topics to read, needs a file, not code."""

from __future__ import annotations

import argparse
from pathlib import Path

from megahour.episodes.errors import LayoutError
from megahour.episodes.layout import SAMPLE_SPECS, SampleSpec, parse_spec, sample_spec


def load(path: str | Path) -> SampleSpec:
    import yaml  # not at import time: `megahour --help` stays light

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LayoutError(f"sample spec file {path}: {exc.strerror}; check the path") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LayoutError(f"sample spec file {path}: not YAML ({exc})") from None
    return parse_spec(data, str(path))


def add_arguments(parser: argparse.ArgumentParser, what: str = "sample spec") -> None:
    """``--spec NAME`` (a built-in spec) or ``--spec-file PATH`` (your own)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--spec", default="vla", choices=sorted(SAMPLE_SPECS), help=f"built-in {what}")
    group.add_argument(
        "--spec-file",
        help=f"your own {what}: a YAML file (names, camera patterns, raw topics; docs/episodes.md)",
    )


def from_args(args: argparse.Namespace) -> SampleSpec:
    return load(args.spec_file) if getattr(args, "spec_file", None) else sample_spec(args.spec)
