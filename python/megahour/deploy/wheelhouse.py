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

``ensure`` runs ``pip wheel`` into a hidden temporary directory beside the wheelhouse and publishes it
with one rename, as a directory or (``archive``) as one tar with a ``.digest-<key>`` marker inside, which
the airflow role unpacks on its host in one transfer. A reader never sees half a wheelhouse; a killed
build leaves only its temporary behind.
"""

from __future__ import annotations

import hashlib
import io
import os
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


class WheelhouseError(RuntimeError):
    """A wheelhouse could not be keyed or built; the message says what failed."""


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
    """What one wheelhouse holds and where: ``specs`` are pip wheel's arguments."""

    key: str
    path: Path
    specs: list[str] = field(default_factory=list)
    archive: bool = False

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
) -> Wheelhouse:
    """Name the wheelhouse: megahour[extras] plus requirements, or only ``pins_of_extra``'s pins."""
    if pins_of_extra:
        if extras or requirements:
            raise WheelhouseError("a pins wheelhouse holds one extra's pins and nothing else")
        specs = extra_pins(source_dir, pins_of_extra)
        key = pins_key(pins_of_extra, specs)
    else:
        key = source_key(source_dir, requirements, extras)
        spec = f"{source_dir}[{','.join(extras)}]" if extras else str(source_dir)
        specs = [spec, *requirements]
    path = Path(cache_dir) / (f"{key}.tar" if archive else key)
    return Wheelhouse(key=key, path=path, specs=specs, archive=archive)


Runner = Callable[..., subprocess.CompletedProcess]


def _pip_wheel(python: str, specs: Sequence[str], wheel_dir: Path, run: Runner) -> None:
    argv = [python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheel_dir), *specs]
    proc = run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip()[-3000:]
        raise WheelhouseError(f"`{' '.join(argv)}` failed with exit code {proc.returncode}: {tail}")


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

    The wheels go to ``.<name>.<random>.tmp`` in the cache directory (the same filesystem), are made
    durable and then published by one rename. A wheelhouse another build published meanwhile wins.
    """
    if wheelhouse.present:
        return False
    cache = wheelhouse.path.parent
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{wheelhouse.path.name}.", suffix=".tmp", dir=cache))
    try:
        tmp.chmod(0o755)  # what mkdir gives it: the tar's "." entry carries this mode to the node
        _pip_wheel(python, wheelhouse.specs, tmp, run)
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
