"""Only the Slurm adapter (megahour.slurm) runs Slurm's command-line tools.

The check reads megahour's Python sources (ast, not text: a comment or docstring that names a command is
not a call) and flags, outside python/megahour/slurm/:

- a list or tuple whose first element is a Slurm command (``["scancel", job_id]``, ``("sinfo", ...)``),
  or a wrapper (``sudo``, ``env``, ``ssh``, ``sh``...) with a Slurm command after it;
- a call to a subprocess runner (subprocess, os.system/exec*/spawn*, asyncio's subprocesses, shlex.split)
  whose command argument names one: a string (a shell line), an f-string's leading text, a list or tuple.

A string given a name first (``SBATCH = "sbatch"``) counts as that string.
"""

from __future__ import annotations

import ast
import os
import shlex
import textwrap
from pathlib import Path

import pytest

import megahour

SLURM_COMMANDS = frozenset(
    {
        "sbatch",
        "squeue",
        "scontrol",
        "sacct",
        "scancel",
        "sinfo",
        "srun",
        "salloc",
        "sacctmgr",
        "sreport",
        "sprio",
        "sshare",
        "strigger",
        "sstat",
        "sattach",
    }
)
# Commands that run another command given later on their line.
WRAPPERS = frozenset(
    {
        "sudo",
        "doas",
        "env",
        "timeout",
        "nice",
        "nohup",
        "setsid",
        "stdbuf",
        "ionice",
        "ssh",
        "sh",
        "bash",
        "exec",
    }
)
_OS_EXEC = {f"os.exec{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
_OS_SPAWN = {
    f"os.spawn{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")
}  # (mode, file, ...)
_SUBPROCESS = ("run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput")
RUNNERS = frozenset(
    {f"subprocess.{name}" for name in _SUBPROCESS}
    | {
        f"{module}.create_subprocess_{kind}"
        for module in ("asyncio", "asyncio.subprocess")
        for kind in ("exec", "shell")
    }
    | {"os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp", "shlex.split"}
    | _OS_EXEC
    | _OS_SPAWN
)
PACKAGE = Path(megahour.__file__).parent
ADAPTER = PACKAGE / "slurm"


def _command_word(word: str) -> str | None:
    name = os.path.basename(word.strip())
    return name if name in SLURM_COMMANDS else None


def _shell_line(line: str) -> str | None:
    """The Slurm command a shell line runs: its first word, or any word after a wrapper."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    if not words:
        return None
    if os.path.basename(words[0]) in WRAPPERS:
        return next(filter(None, map(_command_word, words[1:])), None)
    return _command_word(words[0])


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.found: list[tuple[int, str]] = []
        self.aliases: dict[str, str] = {}
        self.strings: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.aliases[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Assign) and _is_str(node.value):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.strings[target.id] = node.value.value

    def _text(self, node: ast.AST) -> str | None:
        """A string the expression certainly starts with, if any."""
        if _is_str(node):
            return node.value
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.JoinedStr):
            head = []
            for part in node.values:
                if not _is_str(part):
                    break
                head.append(part.value)
            return "".join(head) or None
        return None

    def _argv(self, node: ast.AST) -> str | None:
        """The Slurm command an argument list runs (its first element, or after a wrapper)."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._argv(node.left)
        if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
            return None
        words = [self._text(element) for element in node.elts]
        if words[0] is not None and os.path.basename(words[0].strip()) in WRAPPERS:
            return next((_command_word(word) for word in words[1:] if word and _command_word(word)), None)
        return _command_word(words[0]) if words[0] is not None else None

    def _dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def visit_List(self, node: ast.List | ast.Tuple) -> None:
        command = self._argv(node)
        if command:
            self.found.append((node.lineno, f"argument list running {command}"))
        self.generic_visit(node)

    visit_Tuple = visit_List

    def visit_Call(self, node: ast.Call) -> None:
        runner = self._dotted(node.func)
        if runner in RUNNERS:
            position = 1 if runner in _OS_SPAWN else 0
            args = node.args[position : position + 1] + [kw.value for kw in node.keywords if kw.arg == "args"]
            for arg in args:
                text = self._text(arg)
                command = _shell_line(text) if text is not None else None
                if command:  # a list argument is reported by visit_List
                    self.found.append((node.lineno, f"{runner} running {command}"))
        self.generic_visit(node)


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def slurm_calls(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: what`` for every place the source runs a Slurm command."""
    tree = ast.parse(source, filename)
    checker = _Checker(tree)
    checker.visit(tree)
    return [f"{filename}:{line}: {what}" for line, what in sorted(checker.found)]


def package_sources(inside_adapter: bool) -> list[Path]:
    paths = sorted(PACKAGE.rglob("*.py"))
    return [path for path in paths if path.is_relative_to(ADAPTER) == inside_adapter]


def test_no_module_outside_the_adapter_runs_a_slurm_command() -> None:
    sources = package_sources(inside_adapter=False)
    assert len(sources) > 20  # the whole package, not an empty glob
    found = [
        call
        for path in sources
        for call in slurm_calls(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    ]
    assert found == [], "run Slurm commands through megahour.slurm (client / async_client):\n" + "\n".join(
        found
    )


def test_the_check_sees_the_adapters_own_commands() -> None:
    """The same check over megahour/slurm finds its calls, so a silent scanner cannot pass the test above."""
    found = " ".join(
        call for path in package_sources(True) for call in slurm_calls(path.read_text(), path.name)
    )
    for command in ("sbatch", "squeue", "scontrol", "sacct", "scancel", "sinfo"):
        assert f"running {command}" in found


# What the old ingest operator did, as it did it (before the adapter took its Slurm calls).
OLD_OPERATOR = """
import asyncio, subprocess


def squeue_by_name_args(name):
    return ["squeue", "--noheader", "--name", name, "--format", "%i|%T"]


def _run(argv, timeout=60.0):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


async def on_kill(self):
    argv = ["scancel", self.job_id] if self.job_id else ["scancel", "--name", self.job_name or ""]
    await _run_async(["scontrol", "show", "job", "--oneliner", self.job_id])
"""


def test_the_old_operator_would_have_failed() -> None:
    found = slurm_calls(OLD_OPERATOR)
    assert [line.split(": ", 1)[1] for line in found] == [
        "argument list running squeue",
        "argument list running scancel",
        "argument list running scancel",
        "argument list running scontrol",
    ]


@pytest.mark.parametrize(
    "source",
    [
        'subprocess.run(["sbatch", "--parsable", "--wrap", cmd])',
        'subprocess.check_output(("/usr/bin/squeue", "-h"))',
        'subprocess.run("squeue -u alice | wc -l", shell=True)',
        'subprocess.Popen(args=f"scancel {job_id}", shell=True)',
        'os.system(f"scontrol requeue {job_id}")',
        'os.execvp("srun", ["srun", "hostname"])',
        'os.spawnlp(os.P_WAIT, "salloc", "salloc", "-N1")',
        'await asyncio.create_subprocess_shell("sacct -j 5")',
        'await asyncio.create_subprocess_exec(SACCT, "-j", "5")',
        'run(argv=["sudo", "-u", "slurm", "sacctmgr", "show", "user"])',
        'run(["ssh", host, "sinfo"])',
        'argv = ["sreport", "cluster"] + extra',
        "from subprocess import check_call as cc\ncc('sprio -l', shell=True)",
        "import subprocess as sp\nsp.run('sshare', shell=True)",
        'shlex.split("strigger --get")',
        'Popen(("sstat", "-j", "5"))',
        'cmd = ("sattach", "5.0")',
    ],
)
def test_these_are_flagged(source: str) -> None:
    header = "import asyncio, os, shlex, subprocess\nfrom subprocess import Popen, run\nSACCT = 'sacct'\n"
    assert slurm_calls(header + textwrap.dedent(source)), source


@pytest.mark.parametrize(
    "source",
    [
        '"""Submits with sbatch, then polls `scontrol show job` and sacct; cancels with scancel."""',
        "# one scontrol/sinfo pair per sweep\nx = 1",
        'log.warning(f"squeue exited {rc}: {err}")',
        'raise RuntimeError("sbatch printed no job id")',
        'warnings.extend(f"sinfo line not understood: {line!r}" for line in skipped)',
        'subprocess.run(["megahour", "ingest", "step", "plan"])',
        'subprocess.run(["echo", "sbatch"])',
        'os.system("ls /etc/slurm")',
        'argv = ["--name", "squeue"]',
        'client.live_jobs("mh-ingest.x")',
        'TOOLS = {"squeue": 1}',
    ],
)
def test_these_are_not(source: str) -> None:
    assert slurm_calls("import os, subprocess\n" + source) == [], source
