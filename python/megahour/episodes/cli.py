"""`megahour episodes simulate|transcode|inspect|bench|doctor`: the episode container.

av, mcap and pybullet (the episodes and sim extras) are imported by the commands that use them only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

# x264's presets, fastest first.
X264_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
FAILED = "an error: the message names the file and the fix"


def errors() -> tuple[type[BaseException], ...]:
    from megahour.episodes.errors import EpisodeError, LayoutError

    return (EpisodeError, LayoutError, ValueError)


def register(subparsers: cliutil.Subparsers) -> None:
    from megahour.episodes import specfile
    from megahour.episodes.layout import READ_PATTERNS

    eps = cliutil.add_group(
        subparsers, "episodes", help="episode container: simulate, transcode, inspect, bench", errors=errors
    )
    p = cliutil.add_command(
        eps,
        "simulate",
        _cmd_simulate,
        help="render a seeded pybullet episode as a raw per-frame-JPEG MCAP",
        exits={0: "the episode is written", 1: FAILED},
    )
    p.add_argument("output", help="the raw episode file to write (.mcap)")
    p.add_argument("--seed", type=int, default=0, help="fixes the scene and the robot's motion")
    p.add_argument("--duration", type=float, default=10.0, help="episode length, seconds")
    p.add_argument("--cameras", type=int, choices=(2, 4), default=2, help="cameras rendered")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        eps,
        "transcode",
        _cmd_transcode,
        help="raw episode -> H.264, read-pattern GOP, topic-group chunks",
        exits={0: "the tuned episode is written", 1: FAILED},
    )
    p.add_argument("raw", help="the raw episode (per-frame JPEG MCAP)")
    p.add_argument("output", help="the tuned episode file to write (.mcap)")
    p.add_argument(
        "--pattern",
        default="vla",
        choices=sorted(READ_PATTERNS),
        help="read pattern: vla (short GOP) or world_model (long GOP)",
    )
    p.add_argument("--crf", type=int, default=20, help="x264 CRF (lower = better quality, bigger)")
    p.add_argument("--preset", default="medium", choices=X264_PRESETS, help="x264 preset")
    p.add_argument(
        "--cabac",
        action="store_true",
        help="CABAC entropy coding: ~5%% smaller, about twice the decode time (default: CAVLC)",
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        help="topic group name=/a,/b*[@chunk_seconds]; repeat per group (default: cameras/proprio/context)",
    )
    p.add_argument("--require", action="append", default=[], help="fail unless this topic is present")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        eps,
        "inspect",
        _cmd_inspect,
        help="topics, groups, chunks and keyframes of an episode (path or URL)",
        exits={0: "the episode was read", 1: FAILED},
    )
    p.add_argument("episode", help="path or URL (s3://, http://, or another fsspec URL)")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        eps,
        "bench",
        _cmd_bench,
        help="read random samples and report fetches, bytes and latency",
        exits={0: "the samples were read", 1: FAILED},
    )
    p.add_argument("episode", help="path or URL (s3://, http://, or another fsspec URL)")
    specfile.add_arguments(p)
    p.add_argument("--samples", type=int, default=50, help="random samples to read")
    p.add_argument("--seed", type=int, default=0, help="fixes which samples are read")
    p.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="serve the file over local HTTP with this per-request latency",
    )
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        eps,
        "doctor",
        _cmd_doctor,
        help="check codecs and an encode/write/read round trip on this node",
        exits={0: "the episode stack works here", 1: "a problem (each is printed), or an error"},
    )
    cliutil.add_json_flag(
        p, help="print the report as one JSON line (nodes' reports interleave through srun)"
    )


def _cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes import mcapio, sim

    if args.cameras == 4:
        config = sim.SimConfig.four_cameras(seed=args.seed, duration_s=args.duration)
    else:
        config = sim.SimConfig(seed=args.seed, duration_s=args.duration)
    bar, update = cliutil.progress(console, "render")
    with bar:
        recording = sim.simulate(config, progress=update)
    size = mcapio.write_raw(recording, Path(args.output))
    result = {
        "output": args.output,
        "episode_id": recording.episode_id,
        "bytes": size,
        "topics": {t: len(m) for t, m in recording.messages.items()},
    }
    cliutil.emit(
        args,
        console,
        result,
        f"wrote {args.output}: {size} bytes, {sum(result['topics'].values())} messages",
    )
    return 0


def _cmd_transcode(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.layout import DEFAULT_GROUPS
    from megahour.episodes.transcode import TranscodeOptions, parse_groups, transcode

    cliutil.refuse_directory(args.raw, "a raw episode file")
    options = TranscodeOptions(
        pattern=args.pattern,
        groups=parse_groups(args.group) if args.group else DEFAULT_GROUPS,
        crf=args.crf,
        preset=args.preset,
        cabac=args.cabac,
        require_topics=tuple(args.require),
    )
    bar, update = cliutil.progress(console, "transcode")
    with bar:
        report = transcode(Path(args.raw), Path(args.output), options, progress=update)
    for warning in report.warnings:
        cliutil.print_error(f"{args.raw}: {warning}", "warning:")
    cliutil.emit(
        args,
        console,
        report.to_dict(),
        f"wrote {report.output}: {report.output_file_bytes} bytes (raw {report.raw_file_bytes}); "
        f"video payload {report.video_payload_bytes} vs JPEG {report.jpeg_payload_bytes} "
        f"({report.payload_reduction:.1%} smaller), {report.chunks} chunks, {report.seconds:.1f} s",
    )
    return 0


def _cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.bench import describe

    cliutil.refuse_directory(args.episode, "an episode file")
    info = describe(args.episode)
    if args.json:
        cliutil.print_json(info)
        return 0
    layout = info["layout"]
    console.print(
        f"{info['path']}: {info['bytes']} bytes, {info['duration_s']:.2f} s, "
        + (f"layout v{layout['version']} pattern {layout['pattern']}" if layout else "no megahour layout"),
        markup=False,
    )
    rows = [
        (
            topic,
            t["schema"],
            str(t["messages"]),
            str(t["rate_hz"]),
            t["group"] or "-",
            str(t["keyframes"] or "-"),
        )
        for topic, t in info["topics"].items()
    ]
    console.print(cliutil.table(("topic", "schema", "messages", "rate Hz", "group", "keyframes"), rows))
    by_group: dict[str, list[dict]] = {}
    for chunk in info["chunks"]:
        by_group.setdefault(chunk["group"] or ",".join(chunk["topics"]), []).append(chunk)
    rows = [
        (
            name,
            str(len(chunks)),
            str(sum(c["length"] for c in chunks)),
            ",".join(sorted({c["compression"] for c in chunks})),
        )
        for name, chunks in by_group.items()
    ]
    console.print(cliutil.table(("chunks of", "count", "bytes", "compression"), rows))
    return 0


def _cmd_bench(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.bench import bench_location
    from megahour.episodes.httpserve import RangeServer
    from megahour.episodes.specfile import from_args

    cliutil.refuse_directory(args.episode, "an episode file")
    spec = from_args(args)
    bar, update = cliutil.progress(console, f"read {spec.name} samples")
    with bar:
        if args.latency_ms is not None:
            path = Path(args.episode).resolve()
            with RangeServer(path.parent, latency_s=args.latency_ms / 1000) as server:
                figures = bench_location(server.url(path), spec, args.samples, args.seed, update)
        else:
            figures = bench_location(args.episode, spec, args.samples, args.seed, update)
    result = {"episode": args.episode, "spec": spec.name, "latency_ms": args.latency_ms, **figures.to_dict()}
    cliutil.emit(
        args,
        console,
        result,
        f"{args.samples} {spec.name} samples: {figures.fetches_per_sample:.2f} fetches and "
        f"{figures.bytes_per_sample / 1024:.0f} KiB per sample, latency mean "
        f"{figures.latency_mean_s * 1000:.1f} ms, p99 {figures.latency_p99_s * 1000:.1f} ms",
    )
    return 0


def _cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.doctor import run_doctor

    report = run_doctor()
    if args.json:
        # One line: several nodes' reports arrive interleaved by line through srun.
        cliutil.print_json(report.to_dict(), indent=None)
    elif report.ok:
        console.print(
            f"episodes OK: libx264/h264 present, {report.payload_reduction:.0%} smaller than JPEG, "
            f"{report.fetches_per_sample:g} fetches per sample ({report.groups_per_sample} groups), "
            f"{report.psnr_db:.1f} dB",
            markup=False,
        )
    else:
        for problem in report.problems:
            console.print(cliutil.line(("problem:", "red"), f" {problem}"), highlight=False)
    return 0 if report.ok else 1
