"""Every final file megahour writes goes through megahour.atomicio.

A scan of python/megahour/ for the ways a module can create or replace a file by itself: open() in a
writing mode, os.open with O_CREAT/O_WRONLY/O_RDWR/O_TRUNC, Path.write_text/write_bytes/touch,
os.replace/os.rename/Path.rename/Path.replace, shutil's copies and moves, tempfile.mkstemp and
NamedTemporaryFile, and the library writers that take a path (pyarrow's OSFile/memory_map in a
writing mode, output_stream, write_table/write_feather; numpy's save/savez and tofile). Appending
(mode "a", O_APPEND) is a log, not a final file, and os.devnull is no file: neither is reported. What
remains is either migrated to atomicio or listed in ALLOWED with the reason it is not a final file.

Run as a script with a directory argument to scan another copy of the package (e.g. an old commit's).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "megahour"
IMPLEMENTATION = "atomicio.py"

WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC"}
RENAMES = {("os", "replace"), ("os", "rename"), ("os", "renames")}
SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move"}
TEMPFILES = {"mkstemp", "NamedTemporaryFile"}
PATH_WRITES = {"write_text", "write_bytes", "touch"}
PYARROW_FILES = {"OSFile", "memory_map"}  # (path, mode)
PATH_WRITERS = {"output_stream", "tofile"}
# pyarrow.parquet.write_table(table, where), feather.write_feather(df, dest), dataset.write_dataset(data,
# base_dir); an IPC writer's write_table(table) takes one argument and writes to its own sink.
TABLE_WRITERS = {"write_table": "where", "write_feather": "dest", "write_dataset": "base_dir"}
NUMPY_WRITERS = {"save", "savez", "savez_compressed"}
# Modules whose open(name, mode) takes the mode second; any other receiver of .open (a Path) takes it first.
OPEN_MODULES = {"io", "os", "gzip", "bz2", "lzma", "tarfile", "codecs"}


@dataclass(frozen=True)
class Allowed:
    file: str  # relative to python/megahour
    function: str  # the enclosing def (dotted for methods); "<module>" at top level
    pattern: str
    reason: str


ALLOWED = (
    Allowed(
        "delivery/limit.py",
        "read_volume",
        "open mode 'wb'",
        "a scratch file written only to be read back with O_DIRECT by the same call and removed in its "
        "finally; no other reader, and a torn one is never read (its reads check every block's length)",
    ),
    Allowed(
        "curation/fetch.py",
        "node_lock",
        "os.open O_CREAT",
        "the per-node lock file: opened (created if missing) only to flock it; its content is never read",
    ),
    Allowed(
        "cluster/lifecycle.py",
        "_build_node",
        "Path.write_bytes",
        "the CA certificates of a podman build context: a private TemporaryDirectory that only the "
        "`podman build` started after the writes reads, deleted when the build ends; no reader can "
        "see a half-written file and a crash throws the whole directory away, so rename + fsync "
        "would buy nothing",
    ),
    Allowed(
        "cluster/lifecycle.py",
        "_build_node",
        "Path.write_text",
        "the Containerfile of that same temporary build context (see the certificates)",
    ),
)


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    function: str
    pattern: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}: {self.pattern}"


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)
    }


def _open_mode(call: ast.Call, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def _write_mode(mode: ast.expr | None) -> str | None:
    """The pattern for an open() mode that creates or changes a file in place; None for read or append."""
    if mode is None:
        return None
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        if "a" in mode.value:
            return None
        return f"open mode {mode.value!r}" if set(mode.value) & set("wx+") else None
    return "open mode not a constant"


def _check_call(call: ast.Call) -> str | None:
    if call.args and _dotted(call.args[0]) == "os.devnull":
        return None  # writing to /dev/null (silencing a stream) makes no file
    func = call.func
    name = _dotted(func)
    if isinstance(func, ast.Name):
        if func.id == "open":
            return _write_mode(_open_mode(call, 1))
        if func.id in TEMPFILES:
            return f"tempfile.{func.id}"
        return None
    if not isinstance(func, ast.Attribute):
        return None
    receiver = _dotted(func.value)
    if name is not None and tuple(name.rsplit(".", 1)) in RENAMES:
        return name
    if receiver == "os" and func.attr == "open":
        flags = _names(call.args[1]) if len(call.args) > 1 else set()
        if "O_APPEND" in flags and "O_TRUNC" not in flags:
            return None
        written = sorted(flags & WRITE_FLAGS)
        return f"os.open {written[0]}" if written else None
    if func.attr == "fdopen":
        return _write_mode(_open_mode(call, 1))
    if func.attr in PYARROW_FILES:
        pattern = _write_mode(_open_mode(call, 1))
        return f"{func.attr} {pattern}" if pattern else None
    if func.attr in PATH_WRITERS:
        return func.attr
    if func.attr in TABLE_WRITERS:
        target = len(call.args) > 1 or any(k.arg == TABLE_WRITERS[func.attr] for k in call.keywords)
        return func.attr if target else None
    if receiver in ("np", "numpy") and func.attr in NUMPY_WRITERS:
        return f"numpy.{func.attr}"
    if func.attr == "open" and receiver in OPEN_MODULES:
        return _write_mode(_open_mode(call, 1))
    if func.attr == "open":
        # Path.open(mode) or a library's open(file) (PIL's Image.open(buffer)): a positional argument
        # counts as a mode only when it is a string.
        mode = _open_mode(call, 0)
        positional = mode is not None and not any(k.arg == "mode" for k in call.keywords)
        if positional and not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
            return None
        return _write_mode(mode)
    if receiver == "shutil" and func.attr in SHUTIL_WRITES:
        return f"shutil.{func.attr}"
    if receiver == "tempfile" and func.attr in TEMPFILES:
        return f"tempfile.{func.attr}"
    if func.attr in PATH_WRITES:
        return f"Path.{func.attr}"
    # Path.rename(target) / Path.replace(target); str.replace always takes two arguments.
    if func.attr in ("rename", "replace") and len(call.args) == 1 and not call.keywords:
        return f"Path.{func.attr}"
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, file: str) -> None:
        self.file = file
        self.stack: list[str] = []
        self.findings: list[Finding] = []

    def _def(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _def

    def visit_Call(self, node: ast.Call) -> None:
        pattern = _check_call(node)
        if pattern is not None:
            function = ".".join(self.stack) or "<module>"
            self.findings.append(Finding(self.file, node.lineno, function, pattern))
        self.generic_visit(node)


def scan(package: Path = PACKAGE) -> list[Finding]:
    findings: list[Finding] = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative == IMPLEMENTATION:
            continue
        scanner = _Scanner(relative)
        scanner.visit(ast.parse(path.read_text(), filename=str(path)))
        findings.extend(scanner.findings)
    return findings


def _allowed(finding: Finding) -> Allowed | None:
    for entry in ALLOWED:
        if (entry.file, entry.function, entry.pattern) == (finding.file, finding.function, finding.pattern):
            return entry
    return None


def unallowed(package: Path = PACKAGE) -> list[Finding]:
    return [f for f in scan(package) if _allowed(f) is None]


def test_every_final_file_is_written_through_atomicio() -> None:
    bad = unallowed()
    assert not bad, "write these through megahour.atomicio (or list why not in ALLOWED):\n" + "\n".join(
        map(str, bad)
    )


def test_every_allowance_is_still_needed() -> None:
    used = {_allowed(f) for f in scan()}
    stale = [entry for entry in ALLOWED if entry not in used]
    assert not stale, f"ALLOWED entries that match nothing any more (remove them): {stale}"


def _findings_in(source: str) -> list[str]:
    scanner = _Scanner("example.py")
    scanner.visit(ast.parse(source))
    return [f.pattern for f in scanner.findings]


def test_the_scan_sees_each_way_of_writing_a_file() -> None:
    source = """
import os, shutil, tempfile
from pathlib import Path
from tempfile import mkstemp
def f(p, q, mode):
    open(p, "w"); open(p, "wb"); open(p, mode="x"); open(p, "r+b"); open(p, mode)
    Path(p).open("w"); p.open(mode="wb"); os.fdopen(3, "wb"); io.open(p, "w")
    os.open(p, os.O_WRONLY | os.O_CREAT, 0o644); os.open(p, os.O_RDWR)
    p.write_text("x"); p.write_bytes(b"x"); p.touch()
    os.replace(p, q); os.rename(p, q); p.rename(q); p.replace(q)
    shutil.copy(p, q); shutil.copyfile(p, q); shutil.move(p, q)
    tempfile.mkstemp(); mkstemp(); tempfile.NamedTemporaryFile()
    pa.OSFile(p, "wb"); pa.memory_map(p, "r+"); pa.output_stream(p); pq.write_table(t, p); np.save(p, a)
"""
    assert _findings_in(source) == [
        "open mode 'w'",
        "open mode 'wb'",
        "open mode 'x'",
        "open mode 'r+b'",
        "open mode not a constant",
        "open mode 'w'",
        "open mode 'wb'",
        "open mode 'wb'",
        "open mode 'w'",
        "os.open O_CREAT",
        "os.open O_RDWR",
        "Path.write_text",
        "Path.write_bytes",
        "Path.touch",
        "os.replace",
        "os.rename",
        "Path.rename",
        "Path.replace",
        "shutil.copy",
        "shutil.copyfile",
        "shutil.move",
        "tempfile.mkstemp",
        "tempfile.mkstemp",
        "tempfile.NamedTemporaryFile",
        "OSFile open mode 'wb'",
        "memory_map open mode 'r+'",
        "output_stream",
        "write_table",
        "numpy.save",
    ]


def test_reads_appends_and_string_replaces_are_not_writes() -> None:
    source = """
import os
def f(p, s):
    open(p); open(p, "rb"); open(p, "a", buffering=1); p.open("a"); Path(p).open()
    os.open(p, os.O_RDONLY); os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    s.replace("a", "b"); when.replace(tzinfo=None); Image.open(io.BytesIO(b)); p.read_text()
    pa.memory_map(p, "r"); pa.OSFile(p); writer.write_table(t)
    os.open(os.devnull, os.O_WRONLY); open(os.devnull, "w")
"""
    assert _findings_in(source) == []


if __name__ == "__main__":
    found = unallowed(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
    print("\n".join(map(str, found)) or "no final-file writes outside atomicio")
    sys.exit(1 if found else 0)
