"""`megahour robotlogs convert`: a ROS 2 MCAP recording, a ROS 1 bag, an HDF5 episode or a LeRobot dataset
into raw episodes.

mcap-ros2-support, rosbags and h5py (the robotlogs extra) are imported by the readers that use them only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

    from megahour.robotlogs.mapping import RobotMapping

FAILED = "an error: the message names the file, the mapping key or the topic, and the fix"


def errors() -> tuple[type[BaseException], ...]:
    from megahour.curation.errors import CurationError
    from megahour.episodes.errors import EpisodeError
    from megahour.robotlogs.mapping import MappingError

    return (EpisodeError, MappingError, CurationError, ImportError)


def register(subparsers: cliutil.Subparsers) -> None:
    group = cliutil.add_group(
        subparsers,
        "robotlogs",
        help="robot logs (ROS 2 MCAP, ROS 1 bags, HDF5) into raw episodes",
        errors=errors,
    )
    p = cliutil.add_command(
        group,
        "convert",
        _cmd_convert,
        help="convert one recording into megahour's raw episode, with the robot's mapping file",
        exits={
            0: "the raw episode is written (the report lists dropped, mis-ordered and repeated frames)",
            1: FAILED,
        },
    )
    p.add_argument(
        "recording",
        help="the recording: a .mcap (ROS 2), a .bag (ROS 1), an .hdf5/.h5 episode, or a LeRobot dataset's "
        "folder (v3.0: every episode)",
    )
    p.add_argument("output", help="the raw episode to write (.mcap); for a LeRobot dataset, a folder")
    p.add_argument("--mapping", required=True, help="the robot's mapping file (docs/ingest.md)")
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an episode label (robot, embodiment, task, site, operator); wins over the mapping's labels",
    )
    p.add_argument(
        "--episode-id",
        help="the episode id (default: the recording's file name without suffix); for a LeRobot dataset, "
        "the ids' prefix (default: the folder's name), as PREFIX-000042",
    )
    cliutil.add_json_flag(p)
    register_export(group)


def register_export(group) -> None:
    p = cliutil.add_command(
        group,
        "export",
        _cmd_export,
        help="write a manifest's episodes as a LeRobot dataset (format v3.0)",
        exits={0: "the dataset is written", 1: FAILED},
    )
    p.add_argument("--manifest", required=True, help="a local manifest (megahour manifest build or fetch)")
    p.add_argument("output", help="the dataset folder to create (it must not exist)")
    p.add_argument("--robot-type", default="", help="the dataset's robot_type (e.g. so100)")
    p.add_argument("--limit", type=int, help="export the manifest's first N episodes only")
    cliutil.add_json_flag(p)


def _cmd_export(args: argparse.Namespace, console: Console) -> int:
    from megahour.robotlogs.lerobot_export import episodes_of_manifest, export

    episodes = episodes_of_manifest(args.manifest, args.limit)
    bar, update = cliutil.progress(console, "episodes")
    with bar:
        report = export(episodes, Path(args.output), args.robot_type, update)
    cliutil.emit(
        args,
        console,
        report.to_dict(),
        f"wrote LeRobot dataset {report.output}: {report.episodes} episodes, {report.frames} frames at "
        f"{report.fps} fps, cameras {', '.join(report.cameras)}",
    )
    return 0


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise cliutil.CommandError(f"--label {pair!r} is not KEY=VALUE; write e.g. --label robot=arm-07")
        labels[key] = value
    return labels


def _cmd_convert(args: argparse.Namespace, console: Console) -> int:
    from megahour.robotlogs.formats import convert_file
    from megahour.robotlogs.mapping import load_mapping

    mapping = load_mapping(args.mapping)
    if Path(args.recording).is_dir():
        return _convert_dataset(args, console, mapping)
    report = convert_file(
        Path(args.recording), Path(args.output), mapping, _labels(args.label), args.episode_id
    )
    for line in report.warnings + report.problems():
        cliutil.print_error(f"{args.recording}: {line}", "warning:")
    frames = sum(t.messages for t in report.topics if t.topic.startswith("/camera/"))
    cliutil.emit(
        args,
        console,
        report.to_dict(),
        f"wrote {report.output} from {report.format} {args.recording}: {len(report.topics)} topics, "
        f"{frames} camera frames, {report.seconds:.1f} s",
    )
    return 0


def _convert_dataset(args: argparse.Namespace, console: Console, mapping: RobotMapping) -> int:
    from megahour.episodes.errors import EpisodeError
    from megahour.robotlogs import lerobot
    from megahour.robotlogs.formats import convert_dataset

    if not lerobot.is_dataset(args.recording):
        raise EpisodeError(
            args.recording,
            "is a folder without meta/info.json",
            fix="give a recording file, or a LeRobot dataset's folder",
        )
    bar, update = cliutil.progress(console, "episodes")
    with bar:
        reports = convert_dataset(
            Path(args.recording), Path(args.output), mapping, _labels(args.label), args.episode_id, update
        )
    for report in reports:
        for line in report.warnings + report.problems():
            cliutil.print_error(f"{report.source}: {line}", "warning:")
    cliutil.emit(
        args,
        console,
        {"episodes": [r.to_dict() for r in reports]},
        f"wrote {len(reports)} raw episodes into {args.output} from LeRobot dataset {args.recording}",
    )
    return 0
