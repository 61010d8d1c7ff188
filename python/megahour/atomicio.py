"""Write files so that readers see either the old content or the new, never half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename.

    Returns True when the file changed, False when it already held ``text``
    (so callers can report idempotent runs honestly).
    """
    path = Path(path)
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
