"""`megahour episodes ...` as people and scripts run it: tables through a pipe, bad paths, closed sets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from megahour.cli import main
from megahour.episodes.layout import READ_PATTERNS, SAMPLE_SPECS


def test_inspect_of_a_directory_is_one_line_naming_it(tmp_path, capsys) -> None:
    assert main(["episodes", "inspect", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path} is a directory, not an episode file; pass a file in it\n"


def test_inspect_of_a_missing_file_is_one_line_naming_it(tmp_path, capsys) -> None:
    assert main(["episodes", "inspect", str(tmp_path / "gone.mcap")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith(f"error: {tmp_path / 'gone.mcap'}")
        and "check the path" in lines[0]
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["episodes", "transcode", "raw.mcap", "out.mcap", "--pattern", "vla_long"],
        ["episodes", "transcode", "raw.mcap", "out.mcap", "--preset", "quick"],
        ["episodes", "bench", "ep.mcap", "--spec", "worldmodel"],
        ["episodes", "simulate", "out.mcap", "--cameras", "3"],
    ],
)
def test_closed_sets_are_refused_by_the_parser(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_help_lists_the_read_patterns_and_sample_specs(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    for command, names in (("transcode", READ_PATTERNS), ("bench", SAMPLE_SPECS)):
        with pytest.raises(SystemExit):
            main(["episodes", command, "--help"])
        assert "{" + ",".join(sorted(names)) + "}" in capsys.readouterr().out


def test_tables_keep_long_topic_names_whole_through_a_pipe() -> None:
    long_topic = "/camera/" + "wrist_mounted_left_" * 6 + "image"
    script = f"""
import sys
import megahour.episodes.bench as bench
topic = {long_topic!r}
bench.describe = lambda path: {{
    "path": path, "bytes": 1, "duration_s": 1.0, "layout": None,
    "topics": {{topic: {{"schema": "foxglove.CompressedVideo", "messages": 3, "rate_hz": 30.0,
                        "group": "cameras", "keyframes": 1}}}},
    "chunks": [{{"group": None, "topics": [topic], "compression": "none", "length": 10}}],
}}
from megahour.cli import main
sys.exit(main(["episodes", "inspect", "x.mcap"]))
"""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(long_topic) == 2  # the topic table and the chunk table
    assert "…" not in proc.stdout and "foxglove.CompressedVideo" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) > 80
