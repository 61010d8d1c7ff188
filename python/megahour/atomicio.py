"""Write files so that readers see either the old content or the new, never half of it.

This module is megahour's only implementation of "temporary file, fsync, rename, fsync the directory"
(tests/test_atomic_writes.py fails when another module writes a final file without it):

- ``atomic_writer(path)``: a context manager yielding a binary file object (``fileno()`` works, so
  ``os.pwrite`` into it does too; ``name`` is the temporary's path, for checks before it is published).
  A clean exit flushes, fsyncs, renames onto ``path`` and fsyncs the directory; an exception removes
  the temporary and leaves the old ``path`` untouched.
- ``atomic_write_bytes`` / ``atomic_write_text``: one call; False when the file already held the data.
- ``publish(src, dst)``: rename an already durable file or directory into place, then fsync the
  directory (a directory built under a hidden name, such as a run's attempt directory).

Modes: a new file gets what a plain ``open(path, "w")`` would give it, 0o666 less the umask (and a
directory's default ACL, if it has one), unless the caller passes ``mode``. The temporary is created
by ``open(..., "x")`` itself, so the kernel applies the umask at creation. Reading the umask instead
would mean ``os.umask()``, which can only be read by setting it, and another thread creating a file
between the two calls would get the wrong mode; ``/proc/self/status`` avoids that race but is
Linux-only and misses default ACLs. Letting ``open`` apply it has neither problem.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

TEMP_SUFFIX = ".tmp"
_TOKEN_BYTES = 6  # 12 hex digits: a name clash among concurrent writers is practically impossible
_CREATE_TRIES = 100


def _prefix(path: Path, temp_prefix: str | None) -> str:
    # Hidden by default: directory listings that skip dot files never see a temporary.
    return f".{path.name}." if temp_prefix is None else temp_prefix


def _create_temp(directory: Path, prefix: str, mode: int | None) -> tuple[BinaryIO, Path]:
    # An explicit mode may be narrower than the umask's: then the file is created owner-only and
    # widened by fchmod, so no other user can open it during the window before the chmod.
    create_mode = 0o666 if mode is None else 0o600

    def opener(name: str, flags: int) -> int:
        return os.open(name, flags, create_mode)

    for _ in range(_CREATE_TRIES):
        tmp = directory / f"{prefix}{secrets.token_hex(_TOKEN_BYTES)}{TEMP_SUFFIX}"
        try:
            # O_CREAT | O_EXCL | O_CLOEXEC; closed by atomic_writer, or below when fchmod fails.
            handle = open(tmp, "xb", opener=opener)  # noqa: SIM115
        except FileExistsError:
            continue
        if mode is not None:
            try:
                os.fchmod(handle.fileno(), mode)
            except BaseException:
                handle.close()
                tmp.unlink(missing_ok=True)
                raise
        return handle, tmp
    raise FileExistsError(f"could not create a temporary file {prefix}*{TEMP_SUFFIX} in {directory}")


@contextmanager
def atomic_writer(
    path: str | os.PathLike[str],
    mode: int | None = None,
    *,
    temp_dir: str | os.PathLike[str] | None = None,
    temp_prefix: str | None = None,
) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces ``path`` (whole, durably) when the ``with`` block ends cleanly.

    ``mode``: the file's permission bits; default 0o666 less the umask. ``temp_dir``: where the
    temporary lives instead of beside ``path`` (it must be on the same filesystem, e.g. a store's
    ``.incoming/`` that readers never list); ``temp_prefix`` names it (default ``.<name>.``), so
    that ``discard_temps`` can find what a killed writer left. The yielded file's ``name`` is the
    temporary's path: it may be read back before the block ends (e.g. to verify a download).

    Only an exception keeps the old file: a ``return`` or ``break`` out of the block publishes what was
    written so far, so leave the block early only by raising.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    directory = path.parent if temp_dir is None else Path(temp_dir)
    directory.mkdir(parents=True, exist_ok=True)
    handle, tmp = _create_temp(directory, _prefix(path, temp_prefix), mode)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _holds(path: Path, data: bytes, mode: int | None) -> bool:
    try:
        st = path.stat()
        if st.st_size != len(data) or (mode is not None and stat.S_IMODE(st.st_mode) != mode):
            return False
        return path.read_bytes() == data
    except FileNotFoundError:
        return False


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> bool:
    """Write ``data`` to ``path`` atomically and durably.

    Returns True when the file changed, False when it already held ``data`` (and had ``mode``, when
    one is given), so callers can report idempotent runs honestly.
    """
    path = Path(path)
    if _holds(path, data, mode):
        return False
    with atomic_writer(path, mode) as handle:
        handle.write(data)
    return True


def atomic_write_text(
    path: str | os.PathLike[str], text: str, mode: int | None = None, encoding: str = "utf-8"
) -> bool:
    """``atomic_write_bytes`` for text: True when the file changed, False when it already held ``text``."""
    return atomic_write_bytes(path, text.encode(encoding), mode)


def publish(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename ``src`` onto ``dst`` and fsync ``dst``'s directory, so the rename survives a crash.

    ``src`` must already be durable (its data fsynced). rename(2) semantics: a file replaces a file;
    a directory replaces only an empty directory and otherwise fails with ENOTEMPTY or EEXIST.
    """
    os.replace(src, dst)
    fsync_dir(Path(dst).parent)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename (or a new entry) inside ``path`` survive a crash.

    A writer that may create files in ``path`` but not list it (``-wx``) cannot open it to fsync: the
    rename has happened by then, so raising would report a failure for a file that is in place. Its
    durability is then the filesystem's own (ext4 and xfs commit a rename within seconds).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard_temps(
    path: str | os.PathLike[str],
    *,
    temp_dir: str | os.PathLike[str] | None = None,
    temp_prefix: str | None = None,
) -> int:
    """Remove what killed ``atomic_writer(path, ...)`` calls with these arguments left; returns how many.

    A writer that is still running loses its temporary and fails when it renames, rather than
    publishing anything; call this where no other writer should be running (under a lock, or before
    a retry of the same work).
    """
    path = Path(path)
    directory = path.parent if temp_dir is None else Path(temp_dir)
    pattern = re.compile(
        re.escape(_prefix(path, temp_prefix)) + f"[0-9a-f]{{{2 * _TOKEN_BYTES}}}" + re.escape(TEMP_SUFFIX)
    )
    removed = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        if pattern.fullmatch(name):
            (directory / name).unlink(missing_ok=True)
            removed += 1
    return removed
