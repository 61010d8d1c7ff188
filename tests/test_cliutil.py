"""megahour.cliutil: the pieces every package's cli.py shares."""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys

import pytest

from megahour import cliutil


def test_help_shows_meaningful_defaults_only() -> None:
    parser = cliutil.Parser(prog="x")
    parser.add_argument("--count", type=int, default=2, help="how many")
    parser.add_argument("--name", help="a name")
    parser.add_argument("--flag", action="store_true", help="a flag")
    parser.add_argument("--tag", action="append", default=[], help="tags")
    text = parser.format_help()
    assert "how many (default: 2)" in text
    assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text


def test_subparsers_share_the_formatter() -> None:
    parser = cliutil.Parser(prog="x")
    sub = cliutil.add_group(parser.add_subparsers(dest="command"), "group", help="a group")
    child = cliutil.add_command(sub, "do", lambda a, c: 0, help="do it", exits={0: "done", 1: "failed"})
    child.add_argument("--n", type=int, default=7, help="n")
    assert isinstance(child, cliutil.Parser) and child.formatter_class is cliutil.HelpFormatter
    text = child.format_help()
    assert "n (default: 7)" in text
    assert "exit codes:\n  0   done\n  1   failed\n  2   usage error" in text


def test_exit_codes_wrap_with_a_hanging_indent_and_keep_a_given_2() -> None:
    text = cliutil.exit_codes({0: "ok", 2: "usage error, or the input is unreadable " * 4, 85: "requeue"})
    lines = text.splitlines()
    assert lines[0] == "exit codes:" and lines[1] == "  0   ok"
    assert lines[2].startswith("  2   usage error, or the input") and lines[3].startswith("      ")
    assert all(len(line) <= cliutil.EPILOG_WIDTH for line in lines)
    assert lines[-1] == "  85  requeue"


@pytest.mark.parametrize(
    "exc,expected",
    [
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/y"),
            "/x/y: No such file or directory; check the path",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/etc/z"),
            "/etc/z: Permission denied; check its permissions (ls -l), or run as a user who may use it",
        ),
        (
            IsADirectoryError(errno.EISDIR, "Is a directory", "/tmp"),
            "/tmp: Is a directory; pass a file, not a directory",
        ),
        (OSError(errno.EISDIR, "Is a directory"), "Is a directory; pass a file, not a directory"),
        (
            OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"),
            "/a -> /b: Invalid cross-device link",
        ),
        (OSError("something odd"), "something odd"),
    ],
)
def test_os_errors_name_the_path_and_the_fix(exc, expected) -> None:
    assert cliutil.describe_os_error(exc) == expected


def test_a_console_outside_a_terminal_neither_wraps_nor_cuts(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    console = cliutil.make_console()
    name = "node-" + "x" * 300
    console.print(cliutil.table(("host", "state"), [(name, "[red]up[/]")]))
    console.print("word " * 100)
    text = out.getvalue()
    assert name in text and "[red]up[/]" in text and "…" not in text
    assert ("word " * 100).strip() in text


def test_refuse_directory(tmp_path) -> None:
    with pytest.raises(cliutil.CommandError, match=r"is a directory, not an episode file; pass a file in it"):
        cliutil.refuse_directory(str(tmp_path), "an episode file")
    cliutil.refuse_directory(str(tmp_path / "missing.mcap"), "an episode file")  # the reader says so
    cliutil.refuse_directory("http://host/dir/", "an episode file")


def test_command_error_keeps_its_exit_code(capsys) -> None:
    def fail(_args, _console):
        raise cliutil.CommandError("cannot read [x]", exit_code=2)

    assert cliutil.dispatch(argparse.Namespace(func=fail, json=False)) == 2
    assert capsys.readouterr().err == "error: cannot read [x]\n"


def test_a_broken_pipe_that_is_not_stdout_is_reported(capsys) -> None:
    # A server closing a socket raises BrokenPipeError too; only a closed stdout ends quietly.
    def send(_args, _console):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    assert cliutil.dispatch(argparse.Namespace(func=send, json=False)) == 1
    assert capsys.readouterr().err == "error: Broken pipe\n"


@contextlib.contextmanager
def closed_stdout(monkeypatch):
    """stdout as a pipe whose reader has gone (`megahour ... | head` after head exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        yield
    finally:
        stream.close()  # its descriptor now points at /dev/null: nothing is left to raise


def test_a_closed_stdout_pipe_ends_quietly(monkeypatch, capsys) -> None:
    def talk(_args, _console):
        print("x" * 100_000)
        return 0

    with closed_stdout(monkeypatch):
        assert cliutil.dispatch(argparse.Namespace(func=talk, json=True)) == 1
    assert capsys.readouterr().err == ""


def test_a_closed_stdout_keeps_the_commands_own_failure_code(monkeypatch, capsys) -> None:
    # `megahour run ... | head`: the requeue code Slurm acts on must survive the closed pipe.
    def requeue(_args, _console):
        print("attempt 3 failed")
        return 85

    with closed_stdout(monkeypatch):
        assert cliutil.dispatch(argparse.Namespace(func=requeue, json=True)) == 85
    assert capsys.readouterr().err == ""


def test_a_groups_errors_hold_for_its_commands_unless_one_declares_its_own() -> None:
    def group_errors():
        return (ValueError,)

    def own_errors():
        return (KeyError,)

    parser = cliutil.Parser(prog="megahour")
    sub = parser.add_subparsers(dest="command", required=True)
    group = cliutil.add_group(sub, "g", help="a group", errors=group_errors)
    cliutil.add_command(group, "a", lambda *_: 0, help="inherits", exits={0: "ok"})
    cliutil.add_command(group, "b", lambda *_: 0, help="its own", exits={0: "ok"}, errors=own_errors)
    assert parser.parse_args(["g", "a"]).errors is group_errors
    assert parser.parse_args(["g", "b"]).errors is own_errors
