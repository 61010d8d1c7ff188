"""Wheelhouses built once on the control node, which the runtime and airflow roles install from offline.

A wheelhouse lives in a cache directory under a key, and is built only when that key is missing:

- ``source_key``: megahour from its source (with extras) plus other requirements. The first 16 hex digits
  of the SHA-256 of ``sha256sum``'s lines for pyproject.toml and python/**/{*.py,*.toml,*.yml,*.txt}
  (not under ``__pycache__/`` or ``*.egg-info/``), sorted by path, then the requirements and the extras
  one a line. That is the digest the roles' shell pipeline (``find | sort | xargs sha256sum``) computed,
  so a cache built by an earlier release stays valid; an edit of any of those files changes it.
- ``pins_key``: only the pins of one extra of pyproject.toml (the trainer's torch and its CUDA wheels,
  about 3.5 GB), keyed ``<extra>-<16 hex digits of the SHA-256 of the pins joined by spaces>``, so a
  source edit does not download them again.

A wheelhouse is for the nodes' interpreter, a ``Target`` (CPython ``3.13`` on ``x86_64`` or ``aarch64``,
from the node's facts), whose tag is appended to the key (``<key>-cp313-x86_64``), so nodes of two Pythons
or architectures get a wheelhouse each. (Caches built before targets existed have keys without the tag:
the first run after the upgrade builds each wheelhouse once more; the old ones can be deleted.)

``ensure`` builds into a hidden temporary directory beside the wheelhouse and publishes it with one
rename, as a directory or (``archive``) as one tar with a ``.digest-<key>`` marker inside, which the
airflow role unpacks on its host in one transfer. A reader never sees half a wheelhouse; a killed build
leaves only its temporary behind. It asks the building interpreter for its version and machine first:

- no target, or the target is that interpreter's: ``pip wheel`` of the specs, as before targets existed
  (a dependency without a wheel is compiled on the control node);
- another target (a 3.11 control node, 3.12 or 3.13 nodes): megahour, pure Python, is built alone with
  ``pip wheel --no-deps``, then ``pip download --only-binary=:all:`` fetches every dependency as a binary
  wheel for the target's Python, ABI and manylinux platforms (glibc up to 2.36, Debian 12's). Nothing can
  be compiled for the target here: a dependency with no such wheel fails the build, and needs either a
  control node Python that matches the nodes or a pin of a version with wheels for them. pip evaluates
  dependency markers (``python_version < "3.12"``, ``platform_machine``) against the control node's
  interpreter, not the target, so a dependency only another Python or architecture needs is not fetched.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from megahour.atomicio import atomic_writer, fsync_dir, publish

SOURCE_SUFFIXES = (".py", ".toml", ".yml", ".txt")
EXCLUDED_PARTS = ("/__pycache__/", ".egg-info/")
KEY_DIGITS = 16
MARKER_PREFIX = ".digest-"
_CHUNK = 1 << 20
# What ansible_facts.architecture says on the nodes megahour supports.
ARCHES = ("x86_64", "aarch64")
# The manylinux platforms a cross build accepts: glibc 2.17 (manylinux2014, the oldest most wheels are
# built for) up to 2.36, Debian 12's glibc, the oldest supported image (Ubuntu 24.04 has 2.39, Debian 13
# 2.41), so no wheel needs a newer glibc than a node has. Newest first: the order pip prefers on a node.
MANYLINUX_GLIBC_MINORS = range(36, 16, -1)
_PYTHON_RE = re.compile(r"3\.(?:0|[1-9][0-9]*)")
# One line: implementation, OS, MAJOR.MINOR and machine of the interpreter that builds.
_PROBE = (
    "import platform, sys; "
    "print(sys.implementation.name, sys.platform, '%d.%d' % sys.version_info[:2], platform.machine())"
)


class WheelhouseError(RuntimeError):
    """A wheelhouse could not be keyed or built; the message says what failed."""


@dataclass(frozen=True)
class Target:
    """The interpreter a wheelhouse is for: CPython ``python`` (``"3.13"``) on Linux ``arch`` (``x86_64``)."""

    python: str
    arch: str

    def __post_init__(self) -> None:
        if not isinstance(self.python, str) or not _PYTHON_RE.fullmatch(self.python):
            raise WheelhouseError(
                f"target python {self.python!r} is not a CPython 3 MAJOR.MINOR version: give it as 3.13, "
                "the node's ansible_facts.python.version major.minor"
            )
        if self.arch not in ARCHES:
            raise WheelhouseError(
                f"target arch {self.arch!r} is not one of {', '.join(ARCHES)}: give the node's "
                "ansible_facts.architecture (amd64 is x86_64, arm64 is aarch64)"
            )

    @classmethod
    def parse(cls, python: str | None, arch: str | None) -> Target | None:
        """Both given: the target; neither: None (build for the building interpreter)."""
        if not python and not arch:
            return None
        if not python or not arch:
            raise WheelhouseError(
                f"target python {python!r} and arch {arch!r}: give both (the node's Python and "
                "architecture) or neither"
            )
        return cls(str(python).strip(), str(arch).strip())

    @property
    def abi(self) -> str:
        """``cp313``: the CPython ABI (and interpreter) tag."""
        return "cp" + self.python.replace(".", "")

    @property
    def tag(self) -> str:
        """``cp313-x86_64``: what the wheelhouse's key ends with."""
        return f"{self.abi}-{self.arch}"

    @property
    def platforms(self) -> list[str]:
        """pip's ``--platform`` values: manylinux_2_36 down to manylinux_2_17, and manylinux2014."""
        return [f"manylinux_2_{minor}_{self.arch}" for minor in MANYLINUX_GLIBC_MINORS] + [
            f"manylinux2014_{self.arch}"
        ]


def source_files(source_dir: str | os.PathLike[str]) -> list[str]:
    """The files the source key covers, relative to ``source_dir``, in ``LC_ALL=C sort`` order.

    Regular files only (``find -type f`` skips symbolic links), pyproject.toml and python/**.
    """
    root = Path(source_dir)
    found = []
    if (root / "pyproject.toml").is_file() and not (root / "pyproject.toml").is_symlink():
        found.append("pyproject.toml")
    for dirpath, _dirnames, filenames in os.walk(root / "python"):
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if (
                name.endswith(SOURCE_SUFFIXES)
                and not any(part in rel for part in EXCLUDED_PARTS)
                and path.is_file()
                and not path.is_symlink()
            ):
                found.append(rel)
    return sorted(found, key=os.fsencode)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def source_key(
    source_dir: str | os.PathLike[str], requirements: Sequence[str] = (), extras: Sequence[str] = ()
) -> str:
    """The source wheelhouse's key: changes with megahour's source, the requirements and the extras."""
    root = Path(source_dir)
    files = source_files(root)
    if not files:
        raise WheelhouseError(f"no pyproject.toml or python/ sources under {root}: not megahour's checkout")
    digest = hashlib.sha256()
    for rel in files:
        digest.update(f"{_file_sha256(root / rel)}  {rel}\n".encode())
    lines = [*requirements, *extras]
    # printf '%s\n' with no arguments still prints one empty line.
    digest.update(("".join(f"{line}\n" for line in lines) if lines else "\n").encode())
    return digest.hexdigest()[:KEY_DIGITS]


def extra_pins(source_dir: str | os.PathLike[str], extra: str) -> list[str]:
    """The requirement strings of one optional-dependencies extra in pyproject.toml."""
    pyproject = Path(source_dir) / "pyproject.toml"
    try:
        with pyproject.open("rb") as handle:
            return list(tomllib.load(handle)["project"]["optional-dependencies"][extra])
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise WheelhouseError(f"cannot read the {extra!r} extra's pins from {pyproject}: {exc!r}") from exc


def pins_key(extra: str, pins: Sequence[str]) -> str:
    """The pins wheelhouse's key: changes only with the pins."""
    return f"{extra}-" + hashlib.sha256(" ".join(pins).encode()).hexdigest()[:KEY_DIGITS]


@dataclass(frozen=True)
class Wheelhouse:
    """What one wheelhouse holds and where: ``specs`` are pip wheel's arguments.

    ``source_dir`` and ``extras`` (a source wheelhouse: ``specs[0]`` is megahour from there) let a cross
    build make megahour's wheel first; a pins wheelhouse has neither. ``target`` None: the building
    interpreter's own.
    """

    key: str
    path: Path
    specs: list[str] = field(default_factory=list)
    archive: bool = False
    target: Target | None = None
    source_dir: str | None = None
    extras: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return self.path.is_file() if self.archive else self.path.is_dir()

    @property
    def marker(self) -> str:
        return MARKER_PREFIX + self.key


def plan(
    source_dir: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str],
    *,
    extras: Sequence[str] = (),
    requirements: Sequence[str] = (),
    pins_of_extra: str | None = None,
    archive: bool = False,
    target: Target | None = None,
) -> Wheelhouse:
    """Name the wheelhouse: megahour[extras] plus requirements, or only ``pins_of_extra``'s pins.

    With a ``target`` the key ends with ``-<target.tag>`` (``-cp313-x86_64``): every key of a cache built
    before targets existed changes, so each wheelhouse is built once more after the upgrade.
    """
    source = None
    if pins_of_extra:
        if extras or requirements:
            raise WheelhouseError("a pins wheelhouse holds one extra's pins and nothing else")
        specs = extra_pins(source_dir, pins_of_extra)
        key = pins_key(pins_of_extra, specs)
    else:
        key = source_key(source_dir, requirements, extras)
        source = str(source_dir)
        spec = f"{source_dir}[{','.join(extras)}]" if extras else source
        specs = [spec, *requirements]
    if target is not None:
        key = f"{key}-{target.tag}"
    path = Path(cache_dir) / (f"{key}.tar" if archive else key)
    return Wheelhouse(
        key=key,
        path=path,
        specs=specs,
        archive=archive,
        target=target,
        source_dir=source,
        extras=tuple(extras) if source is not None else (),
    )


Runner = Callable[..., subprocess.CompletedProcess]


def _pip(argv: Sequence[str], run: Runner, hint: str = "") -> None:
    proc = run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip()[-3000:]
        raise WheelhouseError(f"`{' '.join(argv)}` failed with exit code {proc.returncode}: {tail}{hint}")


def _pip_wheel(python: str, specs: Sequence[str], wheel_dir: Path, run: Runner) -> None:
    _pip([python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheel_dir), *specs], run)


def interpreter(python: str, run: Runner = subprocess.run) -> tuple[Target | None, str]:
    """What ``python`` builds for: its Target (None unless CPython on Linux on a known arch), and in words."""
    proc = run([python, "-c", _PROBE], capture_output=True, text=True, check=False)
    fields = (proc.stdout or "").split()
    if proc.returncode != 0 or len(fields) != 4:
        tail = (proc.stderr or proc.stdout or "").strip()[-1000:]
        raise WheelhouseError(
            f"cannot ask {python} for its version and machine (exit code {proc.returncode}): {tail}"
        )
    implementation, system, version, machine = fields
    words = f"{implementation} {version} on {system} {machine}"
    if implementation != "cpython" or not system.startswith("linux"):
        return None, words
    try:
        return Target(version, machine), words
    except WheelhouseError:
        return None, words


def _cross_build(
    wheelhouse: Wheelhouse, target: Target, python: str, own: str, dest: Path, run: Runner
) -> None:
    """Only binary wheels for ``target``, plus megahour's own pure-Python wheel, into ``dest``."""
    hint = (
        f"\nThe wheelhouse is for the nodes' CPython {target.python} on {target.arch} ({target.tag}), not "
        f"for the control node's {python} ({own}), so only binary wheels can go in it: a dependency "
        f"without a binary wheel for {target.tag} needs either a control node Python that matches "
        f"(CPython {target.python} on {target.arch}) or a pin of a version with wheels for it."
    )
    specs = list(wheelhouse.specs)
    if wheelhouse.source_dir is not None:
        # megahour is pure Python: its wheel installs on any target, and goes in as a local file.
        argv = [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest)]
        _pip([*argv, wheelhouse.source_dir], run)
        wheels = sorted(dest.glob("*.whl"))
        if len(wheels) != 1 or not wheels[0].name.endswith("-py3-none-any.whl"):
            raise WheelhouseError(
                f"building {wheelhouse.source_dir} alone gave {[w.name for w in wheels]}, not one "
                f"pure-Python (py3-none-any) wheel that installs on {target.tag}"
            )
        extras = f"[{','.join(wheelhouse.extras)}]" if wheelhouse.extras else ""
        specs[0] = f"{wheels[0]}{extras}"
    platforms = [arg for platform in target.platforms for arg in ("--platform", platform)]
    argv = [
        python, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
        "--python-version", target.python, "--implementation", "cp", "--abi", target.abi,
        *platforms, "--dest", str(dest), *specs,
    ]  # fmt: skip
    _pip(argv, run, hint)


def _fsync_tree(directory: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(directory):
        for name in filenames:
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def ensure(wheelhouse: Wheelhouse, python: str, run: Runner = subprocess.run) -> bool:
    """Build the wheelhouse unless it is there; True when this call built it.

    With ``python`` itself, or (a ``target`` that is not ``python``'s) as a cross build of binary wheels
    only (the module's docstring). The wheels go to ``.<name>.<random>.tmp`` in the cache directory (the
    same filesystem), are made durable and then published by one rename. A wheelhouse another build
    published meanwhile wins.
    """
    if wheelhouse.present:
        return False
    cross = None
    if wheelhouse.target is not None:
        own, words = interpreter(python, run)
        if own != wheelhouse.target:
            cross = words
    cache = wheelhouse.path.parent
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{wheelhouse.path.name}.", suffix=".tmp", dir=cache))
    try:
        tmp.chmod(0o755)  # what mkdir gives it: the tar's "." entry carries this mode to the node
        if cross is None:
            _pip_wheel(python, wheelhouse.specs, tmp, run)
        else:
            _cross_build(wheelhouse, wheelhouse.target, python, cross, tmp, run)
        if wheelhouse.archive:
            with atomic_writer(wheelhouse.path) as handle, tarfile.TarFile(fileobj=handle, mode="w") as tar:
                tar.add(tmp, arcname=".")
                marker = tarfile.TarInfo(f"./{wheelhouse.marker}")  # empty: its name is what counts
                marker.mode, marker.mtime = 0o644, int(time.time())
                tar.addfile(marker, io.BytesIO(b""))
            return True
        _fsync_tree(tmp)
        try:
            publish(tmp, wheelhouse.path)
        except OSError:
            if wheelhouse.present:
                return False
            raise
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
