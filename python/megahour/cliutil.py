"""What every package's ``cli.py`` shares: parser shape, output, errors and the dispatcher.

Floor 1: imports nothing from megahour, and rich only inside the functions that print, so building the
whole parser tree (``megahour --help``) costs argparse alone.

An area's ``cli.py`` exposes ``register(subparsers)``; inside it, ``add_group`` makes a command group
(``megahour episodes ...``) and ``add_command`` a command: its function ``func(args, console) -> int``,
its exit codes (the help's epilog) and ``errors``, a function returning the exception types its commands
raise for bad input. ``dispatch`` prints those, ``CommandError`` and any ``OSError`` as one line on
stderr (exit 1, or the ``CommandError``'s code); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text

Command = Callable[[argparse.Namespace, "Console"], int]
ErrorTypes = Callable[[], tuple[type[BaseException], ...]]
Subparsers = argparse._SubParsersAction

USAGE_EXIT = 2
# What exit 1 means for most commands (their help's epilog).
FAILED = "an error: the message names the cause and the fix"
DISTRIBUTION = "megahour"
# Output that is not a terminal (a pipe, a file, the journal) is read by programs and people searching
# it, not at 80 columns: lay it out this wide so no line wraps and no table cell is cut or ellipsized.
UNBOUNDED_WIDTH = 100_000
EPILOG_WIDTH = 80


class CommandError(Exception):
    """A problem the command diagnosed itself (bad input, missing tool): one line, exit ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --- parsers ------------------------------------------------------------------------------------------


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except the ones that say nothing (None, False, an empty list), and
    keeps the line breaks of descriptions and epilogs (the exit-code lists)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with megahour's help formatter; ``add_subparsers`` makes more of the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def distribution_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "(not installed as a distribution; install it with `make venv` or `pip install -e .`)"


class VersionAction(argparse.Action):
    """``--version``: the installed distribution's version, read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the installed megahour version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None
    ) -> None:
        print(f"{parser.prog} {distribution_version()}")
        parser.exit()


def exit_codes(codes: Mapping[int, str]) -> str:
    """The epilog listing a command's exit codes; 2 (usage error) is added unless ``codes`` names it."""
    import textwrap

    merged = {USAGE_EXIT: "usage error: a missing or bad argument (argparse prints which)", **codes}
    lines = [
        textwrap.fill(text, width=EPILOG_WIDTH, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
        for code, text in sorted(merged.items())
    ]
    return "exit codes:\n" + "\n".join(lines)


def no_errors() -> tuple[type[BaseException], ...]:
    return ()


def add_group(
    subparsers: Subparsers,
    name: str,
    *,
    help: str,
    errors: ErrorTypes = no_errors,
    description: str | None = None,
) -> Subparsers:
    """``megahour NAME COMMAND ...``: returns the subparsers to add the group's commands to. ``errors``
    holds for every command of the group (a command's own ``errors`` replaces it)."""
    parser = subparsers.add_parser(name, help=help, description=description or help)
    parser.set_defaults(errors=errors)
    return parser.add_subparsers(
        dest="sub",
        required=True,
        metavar="COMMAND",
        title="commands",
        help=f"`megahour {name} COMMAND --help` shows a command's options and exit codes",
    )


def add_command(
    subparsers: Subparsers,
    name: str,
    func: Command,
    *,
    help: str,
    exits: Mapping[int, str],
    errors: ErrorTypes | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """One command: ``func(args, console) -> exit code``; ``exits`` documents the codes it returns.
    ``errors`` defaults to its group's."""
    parser = subparsers.add_parser(name, help=help, description=description or help, epilog=exit_codes(exits))
    parser.set_defaults(func=func)
    if errors is not None:
        parser.set_defaults(errors=errors)
    return parser


def add_json_flag(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=help or "print the result as JSON on stdout (messages and progress go to stderr)",
    )


# --- output -------------------------------------------------------------------------------------------


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def make_console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); outside a terminal it neither wraps nor cuts anything."""
    from rich.console import Console

    if _isatty(sys.stderr if stderr else sys.stdout):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=UNBOUNDED_WIDTH, soft_wrap=True)


def print_json(data: Any, *, indent: int | None = 2) -> None:
    """``data`` as JSON on stdout; ``indent=None`` for one line (reports several nodes send through srun)."""
    print(json.dumps(data, indent=indent, default=str))


def emit(args: argparse.Namespace, console: Console, result: Any, text: str) -> None:
    """The result as JSON with ``--json``, else ``text`` as written (no rich markup in it)."""
    if args.json:
        print_json(result)
    else:
        console.print(text, highlight=False, markup=False)


def styled(text: str, style: str = "") -> Text:
    """``text`` as it is (brackets included: never read as rich markup), in ``style``."""
    from rich.text import Text

    return Text(text, style=style)


def line(*parts: str | tuple[str, str]) -> Text:
    """A line from plain strings and (text, style) pairs, none of it read as markup."""
    from rich.text import Text

    return Text.assemble(*parts)


def table(columns: Sequence[str], rows: Iterable[Sequence[str | Text]], *, title: str | None = None) -> Table:
    """A table whose cells are shown as they are: no markup, and folded rather than ellipsized when a
    terminal is too narrow (outside a terminal nothing is narrowed at all, see ``make_console``)."""
    from rich.table import Table
    from rich.text import Text

    result = Table(title=title)
    for column in columns:
        result.add_column(column, overflow="fold")
    for row in rows:
        result.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in row))
    return result


def progress(console: Console, label: str) -> tuple[Progress, Callable[..., None]]:
    """A rich progress bar driven by ``update(done, total)`` or ``update(stage, done, total)`` callbacks;
    returns (the bar, to use as a context manager, and the callback). Invisible outside a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def update(*args: Any) -> None:
        stage, (done, total) = (args[0], args[1:]) if len(args) == 3 else (label, args)
        if stage not in tasks:
            tasks[stage] = bar.add_task(f"{label} {stage}" if stage != label else label, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update


# --- errors -------------------------------------------------------------------------------------------

_OS_FIXES = {
    errno.ENOENT: "check the path",
    errno.EACCES: "check its permissions (ls -l), or run as a user who may use it",
    errno.EPERM: "check its permissions (ls -l), or run as a user who may use it",
    errno.EISDIR: "pass a file, not a directory",
    errno.ENOTDIR: "a part of that path is a file, not a directory: check the path",
    errno.ENOSPC: "free space on that filesystem, or write somewhere else",
    errno.EROFS: "that filesystem is read-only: write somewhere else",
    errno.EEXIST: "remove it or pick another path",
}


def describe_os_error(exc: OSError) -> str:
    """``PATH: reason; fix`` for a filesystem error (the reason alone when the error names no path)."""
    if exc.strerror is None:
        return str(exc)
    reason = exc.strerror
    fix = _OS_FIXES.get(exc.errno) if exc.errno is not None else None
    if exc.filename is not None:
        where = str(exc.filename) if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        reason = f"{where}: {reason}"
    return f"{reason}; {fix}" if fix else reason


def print_error(message: str, label: str = "error:") -> None:
    """``error: MESSAGE`` on stderr, whatever the output mode: ``--json`` stdout stays parseable."""
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(line((label, "red"), " ", message), highlight=False)


def refuse_directory(path: str, what: str) -> None:
    """Refuse a local ``path`` that is a directory before a reader trips over it: readers that ``pread``
    an opened directory get an EISDIR that names no path. URLs pass through."""
    if "://" not in path and os.path.isdir(path):
        raise CommandError(f"{path} is a directory, not {what}; pass a file in it")


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports POLLERR on its write end)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _silence_stdout() -> None:
    # Whatever is still buffered goes to /dev/null at exit instead of raising BrokenPipeError again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass


def flush_stdout() -> bool:
    """Flush stdout; False (and stdout silenced) when its reader has closed the pipe."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return False
    return True


def dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args`` selected and turn the errors it declares into one line on stderr."""
    console = make_console(stderr=bool(getattr(args, "json", False)))
    try:
        code = args.func(args, console)
        # Output that could not be delivered fails a command that succeeded; a command's own failure
        # code (`megahour run`'s requeue and app-error codes, for one) is kept.
        return code if flush_stdout() or code != 0 else 1
    except BrokenPipeError as exc:
        # `megahour ... --json | head`: the reader has what it wanted. Stop quietly.
        if _stdout_closed():
            _silence_stdout()
            return 1
        print_error(describe_os_error(exc))
        return 1
    except CommandError as exc:
        print_error(str(exc))
        return exc.exit_code
    except Exception as exc:
        declared = getattr(args, "errors", no_errors)()
        if isinstance(exc, declared):
            print_error(str(exc))
            return 1
        if isinstance(exc, OSError):
            print_error(describe_os_error(exc))
            return 1
        raise
