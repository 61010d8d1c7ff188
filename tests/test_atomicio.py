"""megahour.atomicio: the one temp-file + fsync + rename + directory-fsync writer."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megahour import atomicio


@contextlib.contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name not in keep)


_fresh = iter(range(1 << 30))


def fresh_dir(tmp_path: Path) -> Path:
    """A new directory per hypothesis example (tmp_path is shared by all of them)."""
    directory = tmp_path / f"case-{next(_fresh)}"
    directory.mkdir()
    return directory


WRITERS = {
    "text": lambda path, mode=None: atomicio.atomic_write_text(path, "hello\n", mode),
    "bytes": lambda path, mode=None: atomicio.atomic_write_bytes(path, b"\x00hello", mode),
    "stream": lambda path, mode=None: _stream(path, mode),
}


def _stream(path: Path, mode: int | None) -> None:
    with atomicio.atomic_writer(path, mode) as handle:
        handle.write(b"streamed")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mask=st.integers(0, 0o777), kind=st.sampled_from(sorted(WRITERS)), existed=st.booleans())
def test_the_mode_is_what_the_umask_gives(tmp_path, mask, kind, existed) -> None:
    path = fresh_dir(tmp_path) / "out"
    if existed:  # an old file's mode does not carry over either
        path.write_bytes(b"old")
        path.chmod(0o600 if mask & 0o060 == 0 else 0o666)
    with umask(mask):
        WRITERS[kind](path)
    assert mode_of(path) == 0o666 & ~mask


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mask=st.integers(0, 0o777),
    mode=st.sampled_from([0o600, 0o640, 0o644, 0o664, 0o444, 0o755]),
    kind=st.sampled_from(sorted(WRITERS)),
)
def test_a_mode_the_caller_passes_is_exact(tmp_path, mask, mode, kind) -> None:
    path = fresh_dir(tmp_path) / "out"
    with umask(mask):
        WRITERS[kind](path, mode)
    assert mode_of(path) == mode


def test_an_explicit_mode_applies_to_the_temporary_before_any_byte_is_written(tmp_path) -> None:
    # Created 0600 and chmodded at once: nobody can open it while it is wider than the caller asked.
    with umask(0), atomicio.atomic_writer(tmp_path / "secret", 0o600) as handle:
        assert mode_of(Path(handle.name)) == 0o600
        handle.write(b"token")
    assert mode_of(tmp_path / "secret") == 0o600


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_exception_in_the_stream_leaves_the_old_file_and_no_temporary(tmp_path, error) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"old content")
    before = path.stat()
    with pytest.raises(type(error)), atomicio.atomic_writer(path) as handle:
        handle.write(b"new content, half of it")
        handle.flush()
        assert Path(handle.name).exists()
        raise error
    assert path.read_bytes() == b"old content"
    assert path.stat().st_ino == before.st_ino
    assert leftovers(tmp_path, {"data.bin"}) == []


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")

    def refuse(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="cross-device"):
        atomicio.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old" and leftovers(tmp_path, {"data.bin"}) == []


class SyncLog:
    """Records fsync and rename calls, naming each fsynced descriptor by the path it is open on."""

    def __init__(self, monkeypatch) -> None:
        self.events: list[tuple[str, str]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            real_fsync(fd)

        def replace(src, dst) -> None:
            self.events.append(("rename", f"{src} -> {dst}"))
            real_replace(src, dst)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names descriptors through /proc")
@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_the_file_then_the_rename_then_the_directory_are_fsynced(tmp_path, monkeypatch, kind) -> None:
    target = tmp_path / "ckpt" / ".complete"  # a checkpoint's marker: it counts only once durable
    target.parent.mkdir()
    log = SyncLog(monkeypatch)
    WRITERS[kind](target)
    assert [e[0] for e in log.events] == ["fsync", "rename", "fsync"]
    (_, synced_file), (_, rename), (_, synced_dir) = log.events
    temporary = Path(synced_file)
    assert temporary.parent == target.parent and temporary.name.startswith("..complete.")
    assert rename == f"{temporary} -> {target}"
    assert Path(synced_dir) == target.parent


def test_publish_fsyncs_the_directory_and_never_replaces_a_full_directory(tmp_path, monkeypatch) -> None:
    (tmp_path / ".staging").mkdir()
    (tmp_path / ".staging" / "meta.json").write_text("{}")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "meta.json").write_text('{"other": 1}')
    with pytest.raises(OSError) as caught:
        atomicio.publish(tmp_path / ".staging", tmp_path / "taken")
    assert caught.value.errno in (errno.EEXIST, errno.ENOTEMPTY)
    assert (tmp_path / "taken" / "meta.json").read_text() == '{"other": 1}'
    log = SyncLog(monkeypatch)
    atomicio.publish(tmp_path / ".staging", tmp_path / "attempt-1")
    assert log.events[-1] == ("fsync", str(tmp_path))
    assert (tmp_path / "attempt-1" / "meta.json").read_text() == "{}"


def test_the_text_writer_says_when_nothing_changed(tmp_path) -> None:
    path = tmp_path / "sub" / "dir" / "inventory.yml"  # parents are created
    assert atomicio.atomic_write_text(path, "a: 1\n") is True
    inode = path.stat().st_ino
    assert atomicio.atomic_write_text(path, "a: 1\n") is False
    assert path.stat().st_ino == inode  # not rewritten
    assert atomicio.atomic_write_text(path, "a: 2\n") is True
    assert path.read_text() == "a: 2\n" and path.stat().st_ino != inode


def test_the_same_content_with_another_mode_than_asked_is_rewritten(tmp_path) -> None:
    path = tmp_path / "50-megahour.conf"
    path.write_text("[engine]\n")
    path.chmod(0o600)
    assert atomicio.atomic_write_text(path, "[engine]\n", 0o644) is True
    assert mode_of(path) == 0o644
    assert atomicio.atomic_write_text(path, "[engine]\n", 0o644) is False


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.binary(max_size=4096), second=st.binary(max_size=4096))
def test_bytes_round_trip_and_report_changes(tmp_path, first, second) -> None:
    directory = fresh_dir(tmp_path)
    path = directory / "blob"
    assert atomicio.atomic_write_bytes(path, first) is True
    assert path.read_bytes() == first
    assert atomicio.atomic_write_bytes(path, first) is False
    assert atomicio.atomic_write_bytes(path, second) is (second != first)
    assert path.read_bytes() == second
    assert os.listdir(directory) == ["blob"]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_text_round_trips_as_utf8(tmp_path, text) -> None:
    path = fresh_dir(tmp_path) / "t.txt"
    assert atomicio.atomic_write_text(path, text) is True
    assert path.read_bytes() == text.encode("utf-8")
    assert atomicio.atomic_write_text(path, text) is False


def test_the_stream_takes_parallel_pwrites_into_its_descriptor(tmp_path) -> None:
    path = tmp_path / "manifest.arrow"
    parts = [bytes([i]) * 1000 for i in range(16)]
    with atomicio.atomic_writer(path, 0o644) as handle:
        os.ftruncate(handle.fileno(), 16 * 1000)
        threads = [
            threading.Thread(target=os.pwrite, args=(handle.fileno(), part, i * 1000))
            for i, part in enumerate(parts)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        temporary = Path(handle.name)
        assert temporary.read_bytes() == b"".join(parts)  # readable (verifiable) before it is published
        assert not path.exists()
    assert path.read_bytes() == b"".join(parts)
    assert not temporary.exists() and leftovers(tmp_path, {"manifest.arrow"}) == []


def test_a_temporary_directory_elsewhere_and_discarding_what_a_killed_writer_left(tmp_path) -> None:
    incoming, dest = tmp_path / ".incoming", tmp_path / "episodes" / "e1.mcap"
    with atomicio.atomic_writer(dest, temp_dir=incoming, temp_prefix="episodes__e1.mcap.ab12.") as out:
        out.write(b"episode")
        assert Path(out.name).parent == incoming and Path(out.name).name.startswith("episodes__e1.mcap.ab12.")
        assert not dest.exists()
    assert dest.read_bytes() == b"episode" and os.listdir(incoming) == []

    killed = incoming / "episodes__e1.mcap.ab12.0123456789ab.tmp"
    other_object = incoming / "episodes__e2.mcap.ab12.0123456789ab.tmp"
    not_ours = incoming / "episodes__e1.mcap.ab12.notes.tmp"
    for path in (killed, other_object, not_ours):
        path.write_bytes(b"half")
    removed = atomicio.discard_temps(dest, temp_dir=incoming, temp_prefix="episodes__e1.mcap.ab12.")
    assert removed == 1 and not killed.exists() and other_object.exists() and not_ours.exists()


def test_discard_temps_beside_the_file_spares_other_files(tmp_path) -> None:
    path = tmp_path / "m.arrow"
    path.write_bytes(b"published")
    mine = tmp_path / ".m.arrow.00ff00ff00ff.tmp"
    stamp_temp = tmp_path / ".m.arrow.verified.00ff00ff00ff.tmp"  # another file's temporary
    for leftover in (mine, stamp_temp):
        leftover.write_bytes(b"half")
    assert atomicio.discard_temps(path) == 1
    assert sorted(os.listdir(tmp_path)) == [".m.arrow.verified.00ff00ff00ff.tmp", "m.arrow"]
    assert atomicio.discard_temps(tmp_path / "absent-dir" / "x") == 0


def test_a_writer_whose_temporary_was_discarded_publishes_nothing(tmp_path) -> None:
    path = tmp_path / "obj"
    with pytest.raises(FileNotFoundError), atomicio.atomic_writer(path) as handle:
        handle.write(b"a slow writer")
        atomicio.discard_temps(path)  # what a retry of the same work does meanwhile
    assert not path.exists() and os.listdir(tmp_path) == []


def test_a_directory_the_writer_may_not_list_still_gets_the_file(tmp_path, monkeypatch) -> None:
    # Root ignores permission bits, so the refused open of the directory is simulated.
    real_open = os.open

    def no_listing(path, flags, *args):
        if flags & os.O_DIRECTORY:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(atomicio.os, "open", no_listing)
    target = tmp_path / "out.txt"
    assert atomicio.atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"
