"""Recordings in a landing zone in a bucket, copied into the run's staging folder for the steps that read
them: a recording file once (a retry reuses the copy), with the robot mapping files beside it; a LeRobot
dataset an episode at a time, that is its meta/ and the one data file and video files the episode is in,
not the whole dataset.

Discovery finds the datasets by their meta/info.json under the landing prefix and lists their episodes
from a copy of meta/; each episode is an entry ``s3://BUCKET/PREFIX/<dataset>#episode=<n>`` of the run,
as a folder's are on the shared filesystem (``robotlogs.lerobot.episode_ref``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from megahour.atomicio import atomic_write_text
from megahour.episodes.errors import EpisodeError
from megahour.objectstore import store
from megahour.objectstore.location import Location, parse
from megahour.objectstore.store import ObjectInfo, ObjectMissing

META = "meta"


def fetch_once(info: ObjectInfo, dest: Path) -> None:
    """``dest`` as a copy of the object: fetched unless the copy beside its tag (size and ETag) is of this
    very object, so a retry copies nothing and a re-uploaded object is fetched again."""
    tag = dest.with_name(f".{dest.name}.etag")
    stamp = f"{info.size} {info.etag}"
    if dest.exists() and tag.exists() and tag.read_text() == stamp:
        return
    store.fetch(info.location, dest)
    atomic_write_text(tag, stamp)


def _relative(folder: Location, info: ObjectInfo) -> str:
    return str(PurePosixPath(info.location.key).relative_to(folder.key.rstrip("/")))


def fetch_meta(folder: Location, dest: Path, objects: list[ObjectInfo] | None = None) -> None:
    """The dataset's meta/ files into ``dest``/meta (``objects``: the dataset's listing, when known)."""
    meta = folder.child(META)
    for info in objects if objects is not None else store.list_tree(meta):
        relative = _relative(folder, info)
        if relative.startswith(f"{META}/"):
            fetch_once(info, dest / relative)


def fetch_mappings(recording: Location, stem: str, landed: Path) -> None:
    """The robot mapping files beside a recording (``<stem>.robot.yaml``, ``robot.yaml``) into
    ``landed``; they are small, so fetched every time: a corrected mapping is used on the retry."""
    for name in (f"{stem}.robot.yaml", "robot.yaml"):
        try:
            store.fetch(recording.sibling(name), landed / name)
        except ObjectMissing:
            (landed / name).unlink(missing_ok=True)


def remote_episodes(
    landing: str, skipped: list[str], log: Callable[[str], None] | None = None
) -> list[ObjectInfo]:
    """One entry per episode of each LeRobot dataset directly under the ``landing`` prefix, with the
    dataset's bytes shared out. A dataset megahour cannot list (a format it does not read, an upload in
    progress) is left for a later run and named in ``skipped``. StoreError when the store fails."""
    from megahour.robotlogs import lerobot

    out = []
    for folder in store.list_folders(landing):
        if folder.name.startswith(".") or not store.exists(folder.child(f"{META}/info.json")):
            continue
        objects = store.list_tree(folder)
        with tempfile.TemporaryDirectory(prefix="megahour-dataset-") as scratch:
            try:
                fetch_meta(folder, Path(scratch), objects)
                episodes = lerobot.list_episodes(scratch)
            except (EpisodeError, OSError, ValueError) as exc:
                skipped.append(f"{folder.url}: {str(exc).replace(scratch, folder.url)}")
                continue
        share = sum(info.size for info in objects) // max(1, len(episodes))
        out += [
            ObjectInfo(Location(folder.scheme, folder.bucket, lerobot.episode_ref(folder.key, i)), share)
            for i in episodes
        ]
        if log is not None:
            log(f"discover: {folder.url}: LeRobot dataset, {len(episodes)} episodes")
    return out


def fetch_episode(ref: str, landed: Path) -> str:
    """Episode ``ref`` of a dataset in a bucket as a local episode ref under ``landed``/<dataset>: the
    dataset's meta/, then the files that episode is read from, and the robot mapping files beside the
    dataset. A file of the episode that is
    missing from the bucket stays missing here, so the conversion quarantines the episode for it."""
    from megahour.robotlogs import lerobot

    root, index = lerobot.split_ref(ref) or ("", -1)
    folder = parse(root)
    local = landed / folder.name
    fetch_meta(folder, local)
    for relative in lerobot.episode_files(local, index):
        try:
            fetch_once(store.bucket(folder.bucket).head(folder.child(relative).key), local / relative)
        except ObjectMissing:
            (local / relative).unlink(missing_ok=True)
    fetch_mappings(folder, folder.name, landed)
    return lerobot.episode_ref(local, index)
