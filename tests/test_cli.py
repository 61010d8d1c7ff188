"""The `megahour` command as a whole: the parser tree every package registers into, and what every command
shares (help, exit codes, --version, one-line errors, pipes)."""

from __future__ import annotations

import argparse
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from megahour import cliutil
from megahour.cli import AREAS, build_parser, main
from tests.conftest import REPO, tool

PACKAGE = REPO / "python" / "megahour"


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for the top-level parser and every group and command below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def leaves():
    return [(path, p) for path, p in walk(build_parser()) if p.get_default("func") is not None]


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# --- the tree --------------------------------------------------------------------------------------------


def test_every_area_registers_its_own_commands_and_the_top_level_only_assembles() -> None:
    owners = {path[0]: p.get_default("func").__module__ for path, p in leaves()}
    assert set(owners.values()) == {f"megahour.{area}.cli" for area in AREAS}
    assert owners["warehouse"] == owners["manifest"] == "megahour.curation.cli"
    assert owners["host"] == owners["cluster"] == "megahour.cluster.cli"
    assert owners["cache"] == "megahour.delivery.cli"
    source = (PACKAGE / "cli.py").read_text()
    assert len(source.splitlines()) < 200
    for path in PACKAGE.glob("*/cli.py"):
        assert len(path.read_text().splitlines()) <= 600, path


def test_nothing_in_the_package_imports_the_top_level_cli() -> None:
    pattern = re.compile(r"from megahour import cli\b|import megahour\.cli\b|from megahour\.cli import")
    offenders = [
        str(path.relative_to(REPO))
        for root in ("python", "library", "module_utils", "benchmarks")
        for path in (REPO / root).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert offenders == []


def test_every_argument_and_command_has_help() -> None:
    missing = []
    for path, parser in walk(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, cliutil.VersionAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{' '.join(path)} {action.option_strings or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{' '.join(path)} {c.dest}" for c in action._choices_actions if not c.help]
    assert missing == []


def test_defaults_are_shown_by_the_formatter_not_written_into_help(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps help at the terminal's width
    checked = 0
    for path, parser in walk(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
                continue
            assert f"(default: {action.default})" in text, (path, action.dest)
            assert "default" not in action.help, f"hand-written default in {' '.join(path)} {action.dest}"
            checked += 1
    assert checked > 50


def test_closed_sets_are_choices() -> None:
    from megahour.episodes.layout import READ_PATTERNS, SAMPLE_SPECS
    from megahour.health import suites
    from megahour.ingest.steps import STEPS

    tree = dict(walk(build_parser()))

    def choices(path: str, dest: str):
        (action,) = (a for a in tree[tuple(path.split())]._actions if a.dest == dest)
        return list(action.choices)

    assert choices("episodes transcode", "pattern") == sorted(READ_PATTERNS)
    for path in ("episodes bench", "cache warm", "cache read"):
        assert choices(path, "spec") == sorted(SAMPLE_SPECS)
    assert choices("ingest step", "step") == list(STEPS)
    assert choices("health check", "suite") == list(suites.SUITES)
    with pytest.raises(SystemExit) as exc:
        main(["episodes", "transcode", "a.mcap", "b.mcap", "--pattern", "vla_long"])
    assert exc.value.code == 2


def test_every_command_lists_its_exit_codes() -> None:
    for path, parser in leaves():
        epilog = parser.epilog or ""
        assert epilog.startswith("exit codes:"), path
        codes = re.findall(r"^  (\d+) ", epilog, re.MULTILINE)
        assert "0" in codes and "2" in codes, (path, epilog)
    tree = dict(leaves())
    assert re.search(r"^  3 +summary only", tree[("ingest", "step")].epilog, re.MULTILINE)
    assert {"85", "86", "130"} <= set(re.findall(r"^  (\d+) ", tree[("run",)].epilog, re.MULTILINE))


def test_help_builds_without_heavy_or_optional_imports() -> None:
    probe = (
        "import sys; from megahour.cli import build_parser; build_parser().format_help(); "
        "print(sorted(m for m in ('torch', 'av', 'mcap', 'pyarrow', 'numpy', 'airflow', 'chdb', 'pybullet', "
        "'rich', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- shared behaviour ------------------------------------------------------------------------------------


def test_version_comes_from_the_installed_distribution(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"megahour {version('megahour')}\n"
    proc = subprocess.run([tool("megahour"), "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"megahour {version('megahour')}"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["warehouse", "upsert", "{missing}"], "No such file or directory; check the path"),
        (["warehouse", "upsert", "{dir}"], "Is a directory; pass a file, not a directory"),
        (["episodes", "inspect", "{dir}"], "is a directory, not an episode file; pass a file in it"),
        (["episodes", "transcode", "{dir}", "{out}"], "is a directory, not a raw episode file"),
        (["episodes", "bench", "{dir}"], "is a directory, not an episode file"),
        (["manifest", "inspect", "{dir}"], "is a directory, not a manifest file"),
        (["manifest", "slice", "{missing}", "--rank", "0", "--world-size", "1"], "no manifest at"),
        (["cache", "status", "--config", "{dir}"], "Is a directory; pass a file, not a directory"),
        (["cache", "status", "--config", "{missing}"], "does not exist"),
        (["health", "check", "--config", "{missing}"], "is missing"),
        (["ingest", "plan", "--config", "{dir}"], "Is a directory; pass a file, not a directory"),
        (
            ["train", "select", "--nodes", "1", "--gpus-per-node", "1", "--links", "{missing}"],
            "check the path",
        ),
    ],
)
def test_unreadable_paths_are_one_line_naming_the_path_and_the_fix(argv, needle, tmp_path, capsys) -> None:
    paths = {"missing": tmp_path / "nope.txt", "dir": tmp_path / "adir", "out": tmp_path / "out.mcap"}
    paths["dir"].mkdir()
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    assert main(argv) == 1
    err = one_line_error(capsys.readouterr().err)
    assert needle in err
    assert any(str(p) in err for p in paths.values())


def test_permission_denied_is_one_line_naming_the_path(tmp_path, capsys, monkeypatch) -> None:
    # Tests may run as root, which no mode bits stop: raise what open() raises for anyone else.
    records = tmp_path / "records.jsonl"
    records.write_text("{}\n")

    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr("builtins.open", denied)
    assert main(["warehouse", "upsert", str(records)]) == 1
    err = one_line_error(capsys.readouterr().err)
    assert f"{records}: Permission denied; check its permissions" in err


def test_error_text_is_never_read_as_markup(tmp_path, capsys) -> None:
    bad = tmp_path / "[bold]x[red].jsonl"
    bad.write_text("[/dev/nvme0n1, /dev/nvme1n1]\n")
    assert main(["warehouse", "upsert", str(bad)]) == 1
    err = one_line_error(capsys.readouterr().err)
    assert f"{bad}:1: not JSON" in err


def test_json_into_a_reader_that_closes_early_ends_quietly(tmp_path) -> None:
    inventory = REPO / "inventories" / "example-baremetal-h100"
    for argv in (["inventory", "validate", "-i", str(inventory), "--json"], ["--help"]):
        proc = subprocess.Popen(
            [tool("megahour"), *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        proc.stdout.close()  # the reader is gone before megahour writes a byte
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    shell = subprocess.run(
        f"{tool('megahour')} inventory validate -i {inventory} --json | head -c 1",
        shell=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shell.stdout == "{" and shell.stderr == ""


def test_one_line_error_for_every_command_that_declares_it(capsys) -> None:
    # Any declared error type of the command's area: one line, exit 1.
    parser = build_parser()
    args = parser.parse_args(["manifest", "inspect", "x"])

    def boom(_args, _console):
        raise ValueError("a bad value\u2014with [brackets]")

    args.func = boom
    assert cliutil.dispatch(args) == 1
    assert one_line_error(capsys.readouterr().err) == "error: a bad value\u2014with [brackets]"
    args = parser.parse_args(["sweep"])  # sweep declares no ValueError: a bug keeps its traceback
    args.func = boom
    with pytest.raises(ValueError):
        cliutil.dispatch(args)


# `megahour GROUP [COMMAND] ...` on one line of a playbook, role, scenario, benchmark or the Makefile; the
# options that follow it, up to the end of the command (a quote, backquote, pipe, `;`, `&&` or `--`).
INVOCATION = re.compile(r"\bmegahour[\"']?\s+([a-z][a-z-]*)(?:\s+([a-z][a-z_-]*))?([^\n]*)")
INVOCATION_END = re.compile(r"[\"'`|;]|&&|\s--(\s|$)")
INVOKERS = (
    "molecule/**/*.yml",
    "playbooks/*.yml",
    "roles/**/*.yml",
    "roles/**/*.j2",
    "benchmarks/*.py",
    "Makefile",
)


def invocations() -> list[tuple[str, int, list[str], list[str]]]:
    """(file, line, command path, --options) of every `megahour ...` the repository's automation runs."""
    found = []
    for pattern in INVOKERS:
        for path in sorted(REPO.glob(pattern)):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for match in INVOCATION.finditer(line):
                    group, command, rest = match.groups()
                    rest = INVOCATION_END.split(rest, maxsplit=1)[0]
                    options = re.findall(r"(?:^|\s)(--[a-z][a-z-]*)", rest)
                    words = [group] + ([command] if command else [])
                    found.append((str(path.relative_to(REPO)), number, words, options))
    return found


def test_every_option_the_repository_passes_exists() -> None:
    """Scenarios, playbooks, role templates, benchmarks and the Makefile call these commands: a renamed
    command or option must fail here, not in a converge."""
    commands = {path: p for path, p in walk(build_parser())}
    found = invocations()
    assert len(found) > 30, found  # the scan still finds the repository's calls
    problems = []
    for where, number, words, options in found:
        path = tuple(words) if tuple(words) in commands else tuple(words[:1])
        parser = commands.get(path)
        if parser is None or parser.get_default("func") is None:
            if options:  # a call with options whose command no longer exists
                problems.append(f"{where}:{number}: `megahour {' '.join(words)}` is not a command")
            continue  # prose ("the megahour cache tier", "`megahour warehouse|manifest` read")
        problems += [
            f"{where}:{number}: `megahour {' '.join(path)}` has no option {option}"
            for option in options
            if option not in parser._option_string_actions
        ]
    assert problems == []


def test_the_option_scan_sees_a_renamed_option(tmp_path) -> None:
    line = "      ansible.builtin.command: megahour cache read --manifest m --spec vla --prefech 2 --json"
    [match] = INVOCATION.finditer(line)
    group, command, rest = match.groups()
    parser = dict(walk(build_parser()))[(group, command)]
    options = re.findall(r"(?:^|\s)(--[a-z][a-z-]*)", INVOCATION_END.split(rest, maxsplit=1)[0])
    assert [o for o in options if o not in parser._option_string_actions] == ["--prefech"]


def test_invocations_with_their_values_still_parse() -> None:
    # A sample of what molecule, playbooks, roles and benchmarks pass, values included (choices, types).
    parser = build_parser()
    for argv in (
        "episodes doctor --json",
        "warehouse init --json",
        "warehouse upsert /tmp/r.jsonl --json",
        "warehouse count --json",
        "manifest build /tmp/m.arrow --world-size 2 --where x --json",
        "manifest fetch /tmp/m.arrow /var/tmp/m.arrow --json",
        "manifest slice /var/tmp/m.arrow --rank 0 --world-size 2 --epoch 1 --json",
        "manifest verify /tmp/m.arrow --json",
        "ingest landing /tmp/l --count 20 --corrupt 1 --seconds 1 --seed 100 --json",
        "ingest monolithic --json --run-dir /tmp/r --params {}",
        "ingest step transcode --run-dir /tmp/r --batch 3",
        "cache read --manifest m --spec vla_short --prefetch 2 --json",
        "cache status --json",
        "cache warm --manifest m --spec vla --parallel 4 --json",
        "cluster up --nodes 2 --gpus-per-node 2 --remote-store",
        "cluster status",
        "cluster down",
        "cluster image",
        "host prereqs --install",
        "health prolog",
        "health epilog",
        "health healthcheck",
        "sweep --history /h.json --metrics /m.prom --dwell-seconds 600 --max-resumes 2 "
        "--drained-alert-seconds 3600 --health-max-age-seconds 600 --reservation-grace-seconds 1800",
        "run --trace-root /var/lib/megahour/traces -- python3 -c pass",
        "train run --checkpoint-dir /c --log-dir /l --steps 60 --checkpoint-every 10 --strategy auto --json",
        "inventory validate -i inventories/example-baremetal-h100 --json",
    ):
        parser.parse_args(argv.split())


def test_main_is_the_console_script() -> None:
    assert Path(tool("megahour")).exists()
    proc = subprocess.run([tool("megahour"), "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    for command in ("host", "cluster", "inventory", "health", "run", "sweep", "episodes", "warehouse"):
        assert f"\n    {command}" in proc.stdout
