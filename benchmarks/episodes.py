#!/usr/bin/env python3
"""Episode layouts side by side: storage, quality and sample reads, local and over emulated object storage.

On the same seeded pybullet episodes it builds five layouts and measures each one in the same run:
  jpeg_per_topic   (a) the raw recording: per-frame JPEG, per-topic zstd chunks (the baseline)
  h264_per_topic   (b) the same chunking with H.264 video
  hflow            (c) HFlow's canonical writer and its reader
  lerobot          (d) LeRobot-v3 style: one MP4 per camera plus Parquet for state
  megahour         (e) ours: read-pattern GOP, topic-group sections, one ranged read per group

Every layout is built twice, once per read pattern (``vla``: short GOP, ``world_model``: long GOP), and is
read with that pattern's sample spec. Reads run locally and through a local HTTP range server that adds a
fixed latency to every request (object-storage round trips; the kernel has no netem). A GOP sweep of ours
shows the size/decode trade-off. Ratios and targets print at the end; ``--json`` keeps every figure.

    python benchmarks/episodes.py --quick --json benchmarks/results/episodes.json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_commit, write_json
from episode_baselines import HFlowLayout, LeRobotLayout
from megahour.episodes import mcapio, quality, sim
from megahour.episodes.bench import decode_all_frames, percentile, valid_times
from megahour.episodes.bench import video_payload_bytes as mcap_video_bytes
from megahour.episodes.httpserve import RangeServer
from megahour.episodes.layout import READ_PATTERNS, SampleSpec, sample_spec
from megahour.episodes.model import Recording, Sample
from megahour.episodes.reader import EpisodeReader
from megahour.episodes.transcode import TranscodeOptions, rechunk_per_topic, transcode

PATTERNS = ("vla", "world_model")
LAYOUTS = ("megahour", "jpeg_per_topic", "h264_per_topic", "hflow", "lerobot")
# Same files as the layout named, read another way: the layout's effect apart from the reader's.
READER_VARIANTS = {"megahour_sequential": "megahour", "jpeg_per_topic_parallel": "jpeg_per_topic"}
CRF = TranscodeOptions().crf  # the product default, for every H.264 layout
console = Console(stderr=True)


class McapLayout:
    """(a), (b) and (e): MCAP files read by megahour's EpisodeReader.

    ``parallel_fetches``/``decode_threads`` of 1 read the way the stock MCAP SeekingReader does: one
    chunk after another on one thread. Ours reads a sample's group ranges concurrently and decodes
    cameras on two threads; the ``*_parallel``/``*_sequential`` variants swap the reader to separate
    what the layout buys from what the reader buys.
    """

    def __init__(self, name: str, chunking: str | None, parallel_fetches: int = 1, decode_threads: int = 1):
        self.name = name
        self.chunking = chunking  # None: the raw recording itself
        self.parallel_fetches = parallel_fetches
        self.decode_threads = decode_threads

    def build(
        self,
        recording: Recording,
        raw_path: Path,
        out_dir: Path,
        *,
        pattern: str,
        gop_s: float,
        crf: int,
        tuned: Path | None = None,
    ) -> list[Path]:
        if self.chunking is None:
            return [raw_path]
        out = out_dir / f"{recording.episode_id}.mcap"
        if self.chunking == "per_topic" and tuned is not None:
            rechunk_per_topic(tuned, out)  # the same H.264 frames as ours: only the chunking differs
        else:
            transcode(
                raw_path, out, TranscodeOptions(pattern=pattern, crf=crf, chunking=self.chunking, gop_s=gop_s)
            )
        return [out]

    def video_payload_bytes(self, files: list[Path]) -> int:
        return mcap_video_bytes(files[0])

    def decode_all_frames(self, files: list[Path], topic: str) -> np.ndarray:
        return decode_all_frames(files[0], topic)

    def open(self, locations: list[str]) -> EpisodeReader:
        return EpisodeReader(
            locations[0], max_parallel_fetches=self.parallel_fetches, decode_threads=self.decode_threads
        )

    def read_sample(self, handle: EpisodeReader, spec: SampleSpec, t_ns: int) -> Sample:
        return handle.read_sample(spec, t_ns)

    def close(self, handle: EpisodeReader) -> None:
        handle.close()


def make_layout(name: str):
    return {
        "jpeg_per_topic": lambda: McapLayout(name, None),
        "h264_per_topic": lambda: McapLayout(name, "per_topic"),
        "megahour": lambda: McapLayout(name, "grouped", parallel_fetches=4, decode_threads=2),
        # Reader swaps, read from the files above (no storage figures of their own).
        "jpeg_per_topic_parallel": lambda: McapLayout(name, None, parallel_fetches=4, decode_threads=2),
        "megahour_sequential": lambda: McapLayout(name, "grouped"),
        "hflow": HFlowLayout,
        "lerobot": LeRobotLayout,
    }[name]()


@dataclass
class Episode:
    recording: Recording
    raw_path: Path
    sources: dict[str, np.ndarray]  # rendered frames (with sensor noise), before JPEG
    recorded: dict[str, np.ndarray]  # the JPEG frames as recorded, decoded: what transcoding starts from


def build_layout(
    layout, episode: Episode, out_dir: Path, pattern: str, gop_s: float, tuned: Path | None = None
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    gop_frames = max(1, round(gop_s * 30.0))
    if isinstance(layout, McapLayout):
        return layout.build(
            episode.recording, episode.raw_path, out_dir, pattern=pattern, gop_s=gop_s, crf=CRF, tuned=tuned
        )
    return layout.build(episode.recording, episode.raw_path, out_dir, gop_frames=gop_frames, crf=CRF)


def storage_figures(
    layout, built: list[tuple[Episode, list[Path]]], ssim_every: int, psnr_every: int = 1
) -> dict:
    """Sizes and quality. ``psnr_db`` (RGB), ``luma_psnr_db`` (BT.601 luma, the Y the JPEG stores) and
    ``ssim`` compare with the recorded frames (the decoded JPEGs, the transcoder's input);
    ``*_vs_render`` with the noisy rendered frames before JPEG. SSIM is averaged
    over every ``ssim_every``-th frame (it costs ~20 ms a frame), PSNR over every ``psnr_every``-th.
    """
    payload = sum(layout.video_payload_bytes(files) for _, files in built)
    file_bytes = sum(f.stat().st_size for _, files in built for f in files)
    scores: dict[str, list[float]] = {
        "psnr_db": [],
        "luma_psnr_db": [],
        "ssim": [],
        "psnr_vs_render_db": [],
        "ssim_vs_render": [],
    }
    for episode, files in built:
        for topic, render in episode.sources.items():
            decoded = layout.decode_all_frames(files, topic)
            recorded = episode.recorded[topic]
            scores["luma_psnr_db"].append(
                float(
                    np.mean(
                        [
                            quality.luma_psnr(r, d)
                            for r, d in zip(recorded[::psnr_every], decoded[::psnr_every], strict=True)
                        ]
                    )
                )
            )
            for suffix, reference in (("", recorded), ("_vs_render", render)):
                scores[f"psnr{suffix}_db" if suffix else "psnr_db"].append(
                    float(
                        np.mean(
                            [
                                quality.psnr(r, d)
                                for r, d in zip(reference[::psnr_every], decoded[::psnr_every], strict=True)
                            ]
                        )
                    )
                )
                scores[f"ssim{suffix}"].append(
                    float(
                        np.mean(
                            [
                                quality.ssim(r, d)
                                for r, d in zip(reference[::ssim_every], decoded[::ssim_every], strict=True)
                            ]
                        )
                    )
                )
    figures = {"video_payload_bytes": payload, "file_bytes": file_bytes}
    figures.update(
        {
            key: float(np.mean([v for v in values if np.isfinite(v)] or [float("inf")]))
            for key, values in scores.items()
        }
    )
    return figures


def read_figures(
    layout, built: list[tuple[Episode, list[Path]]], spec: SampleSpec, samples: int, locate, seed: int
) -> dict:
    """Read ``samples`` seeded samples spread over the episodes; the same times for every layout."""
    handles = [layout.open([locate(f) for f in files]) for _, files in built]
    latencies, fetches, nbytes, decode = [], [], [], []
    try:
        rates = {t: 30.0 for w in spec.frames for t in w.topics}
        reach = spec.reach_ns(rates)
        # Bounds are the first and last message (the simulator's end_ns is exclusive).
        per_episode = [
            valid_times(
                min(m[0].log_time for m in ep.recording.messages.values() if m),
                max(m[-1].log_time for m in ep.recording.messages.values() if m),
                reach,
                samples,
                seed + i,
            )
            for i, (ep, _) in enumerate(built)
        ]
        for k in range(samples):
            i = k % len(built)
            t = per_episode[i][k]
            began = time.perf_counter()
            sample = layout.read_sample(handles[i], spec, t)
            latencies.append(time.perf_counter() - began)
            fetches.append(sample.stats.fetches)
            nbytes.append(sample.stats.bytes)
            decode.append(sample.stats.decode_s)
    finally:
        for handle in handles:
            layout.close(handle)
    return {
        "samples": samples,
        "fetches_per_sample": float(np.mean(fetches)),
        "bytes_per_sample": float(np.mean(nbytes)),
        "latency_mean_s": float(np.mean(latencies)),
        "latency_p99_s": percentile(latencies, 0.99),
        "decode_mean_s": float(np.mean(decode)),
    }


def simulate_episodes(count: int, duration_s: float, workdir: Path) -> list[Episode]:
    episodes = []
    for seed in range(count):
        began = time.perf_counter()
        config = sim.SimConfig(seed=seed, duration_s=duration_s)
        recording, frames = sim.simulate_with_frames(config)
        raw = workdir / "raw" / f"{recording.episode_id}.mcap"
        mcapio.write_raw(recording, raw)
        recorded = {topic: decode_all_frames(raw, topic) for topic in frames}
        episodes.append(Episode(recording, raw, frames, recorded))
        console.print(
            f"  simulated {recording.episode_id}: {duration_s:.0f} s in {time.perf_counter() - began:.1f} s"
        )
    return episodes


def groups_touched(spec: SampleSpec) -> int:
    from megahour.episodes.layout import DEFAULT_GROUPS

    return len({g.name for g in DEFAULT_GROUPS for t in spec.topics() if g.matches(t)})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 short episode, fewer samples (< 2 min)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--plots", type=Path, help="also draw its PNG plots into this directory (benchmarks/plots.py)"
    )
    parser.add_argument("--episodes", type=int, help="simulated episodes (default 2; quick 1)")
    parser.add_argument("--duration", type=float, help="seconds per episode (default 12; quick 4.5)")
    parser.add_argument(
        "--samples", type=int, help="samples per layout, pattern and mode (default 30; quick 6)"
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=50.0,
        help="per-request latency of the remote reads (object storage: tens of ms median for small GETs)",
    )
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated subset of layouts")
    parser.add_argument("--workdir", type=Path, help="keep the built files here (default: a temporary dir)")
    args = parser.parse_args()
    episodes_n = args.episodes or (1 if args.quick else 2)
    duration = args.duration or (4.5 if args.quick else 12.0)
    samples = args.samples or (6 if args.quick else 30)
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        parser.error(f"unknown layouts {unknown}; choose from {', '.join(LAYOUTS)}")
    sweep = (0.5, 2.0) if args.quick else (0.25, 0.5, 1.0, 2.0, 4.0)
    ssim_every = 15 if args.quick else 10
    psnr_every = 5 if args.quick else 2
    os.environ.setdefault("HFLOW_FFMPEG", __import__("imageio_ffmpeg").get_ffmpeg_exe())

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="megahour-episodes-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        console.print(f"[bold]simulating {episodes_n} episode(s) of {duration:.0f} s[/]")
        episodes = simulate_episodes(episodes_n, duration, workdir)
        results: dict = {"layouts": {}, "reader_variants": {}, "gop_sweep": []}
        built_files: dict[tuple[str, str], list] = {}
        with RangeServer(workdir, latency_s=args.latency_ms / 1000) as server:
            for name in layouts:
                layout = make_layout(name)
                results["layouts"][name] = {}
                for pattern in PATTERNS:
                    gop_s = READ_PATTERNS[pattern].gop_s
                    tuned = built_files.get(("megahour", pattern))
                    t0 = time.perf_counter()
                    built = [
                        (
                            ep,
                            build_layout(
                                layout,
                                ep,
                                workdir / name / pattern,
                                pattern,
                                gop_s,
                                tuned=tuned[i][1][0] if tuned else None,
                            ),
                        )
                        for i, ep in enumerate(episodes)
                    ]
                    built_files[(name, pattern)] = built
                    build_s = time.perf_counter() - t0
                    spec = sample_spec(pattern)
                    figures = {"build_s": build_s, **storage_figures(layout, built, ssim_every, psnr_every)}
                    figures["local"] = read_figures(layout, built, spec, samples, str, 1)
                    figures["remote"] = read_figures(layout, built, spec, samples, server.url, 1)
                    results["layouts"][name][pattern] = figures
                    console.print(
                        f"  {name:15s} {pattern:12s} payload {figures['video_payload_bytes'] / 1e6:7.2f} MB "
                        f"PSNR {figures['psnr_db']:5.1f} dB (luma {figures['luma_psnr_db']:5.1f})  "
                        f"remote {figures['remote']['latency_mean_s'] * 1e3:6.1f} ms "
                        f"({figures['remote']['fetches_per_sample']:.2f} fetches)"
                    )
            for variant, base in READER_VARIANTS.items():
                if base not in layouts:
                    continue
                layout = make_layout(variant)
                results["reader_variants"][variant] = {}
                for pattern in PATTERNS:
                    built = built_files[(base, pattern)]
                    reads = read_figures(layout, built, sample_spec(pattern), samples, server.url, 1)
                    results["reader_variants"][variant][pattern] = {"of": base, "remote": reads}
                    console.print(
                        f"  {variant:24s} {pattern:12s} remote {reads['latency_mean_s'] * 1e3:6.1f} ms"
                    )
            if "megahour" in layouts:
                ours = make_layout("megahour")
                presets = {READ_PATTERNS[p].gop_s: p for p in PATTERNS}
                for gop_s in sweep:
                    if gop_s in presets:  # already built and measured as a preset
                        pattern = presets[gop_s]
                        built = built_files[("megahour", pattern)]
                        measured = results["layouts"]["megahour"][pattern]
                        row = {
                            "gop_s": gop_s,
                            **{k: v for k, v in measured.items() if not isinstance(v, dict)},
                        }
                    else:
                        built = [
                            (ep, build_layout(ours, ep, workdir / "sweep" / f"gop{gop_s}", "vla", gop_s))
                            for ep in episodes
                        ]
                        row = {"gop_s": gop_s, **storage_figures(ours, built, ssim_every * 3, psnr_every)}
                    for pattern in PATTERNS:
                        reads = read_figures(ours, built, sample_spec(pattern), samples, str, 2)
                        row[f"{pattern}_local_latency_mean_s"] = reads["latency_mean_s"]
                        row[f"{pattern}_decode_mean_s"] = reads["decode_mean_s"]
                    results["gop_sweep"].append(row)
                    console.print(
                        f"  GOP {gop_s:4.2f} s: payload {row['video_payload_bytes'] / 1e6:.2f} MB, "
                        f"VLA {row['vla_local_latency_mean_s'] * 1e3:.1f} ms, "
                        f"world model {row['world_model_local_latency_mean_s'] * 1e3:.1f} ms"
                    )
    results["ratios"], results["targets"] = ratios_and_targets(results["layouts"], results["reader_variants"])
    results["config"] = {
        "quick": args.quick,
        "episodes": episodes_n,
        "duration_s": duration,
        "samples": samples,
        "latency_ms": args.latency_ms,
        "crf": CRF,
        "cameras": [c.name for c in sim.SimConfig().cameras],
        "commit": git_commit(),
        "python": platform.python_version(),
        "seconds": time.perf_counter() - began,
    }
    print_tables(results)
    write_json(args.json, results, console)
    if args.plots:
        from plots import draw_for_script  # matplotlib only when plots are asked for

        return draw_for_script("episodes", results, args.plots, console)
    return 0


def ratios_and_targets(layouts: dict, variants: dict) -> tuple[dict, dict]:
    ratios: dict = {}
    targets: dict = {}

    def get(name: str, pattern: str, *keys: str) -> float | None:
        node = layouts.get(name, {}).get(pattern)
        for key in keys:
            if node is None:
                return None
            node = node.get(key)
        return node

    for pattern in PATTERNS:
        jpeg = get("jpeg_per_topic", pattern, "video_payload_bytes")
        ours = get("megahour", pattern, "video_payload_bytes")
        if jpeg and ours:
            ratios[f"payload_reduction_vs_jpeg_{pattern}"] = 1 - ours / jpeg
            targets[f"payload_70pct_smaller_{pattern}"] = {
                "value": 1 - ours / jpeg,
                "target": 0.70,
                "met": 1 - ours / jpeg >= 0.70 and get("megahour", pattern, "psnr_db") >= 35.0,
                "psnr_db": get("megahour", pattern, "psnr_db"),
                "luma_psnr_db": get("megahour", pattern, "luma_psnr_db"),
            }
        for mode in ("local", "remote"):
            base = get("jpeg_per_topic", pattern, mode, "latency_mean_s")
            mine = get("megahour", pattern, mode, "latency_mean_s")
            hflow = get("hflow", pattern, mode, "latency_mean_s")
            if base and mine:
                ratios[f"read_speedup_vs_jpeg_{pattern}_{mode}"] = base / mine
            if hflow and mine:
                ratios[f"read_speedup_vs_hflow_{pattern}_{mode}"] = hflow / mine
        base = get("jpeg_per_topic", pattern, "remote", "latency_mean_s")
        mine = get("megahour", pattern, "remote", "latency_mean_s")
        # The reader swaps: how much of the speedup is the layout (both sequential) and how much the reader.
        seq = variants.get("megahour_sequential", {}).get(pattern, {}).get("remote", {}).get("latency_mean_s")
        par = (
            variants.get("jpeg_per_topic_parallel", {})
            .get(pattern, {})
            .get("remote", {})
            .get("latency_mean_s")
        )
        if base and seq:
            ratios[f"read_speedup_vs_jpeg_{pattern}_remote_both_sequential"] = base / seq
        if par and mine:
            ratios[f"read_speedup_vs_jpeg_{pattern}_remote_both_parallel"] = par / mine
        if base and mine:
            targets[f"read_3x_faster_remote_{pattern}"] = {
                "value": base / mine,
                "target": 3.0,
                "met": base / mine >= 3.0,
            }
        fetches = get("megahour", pattern, "remote", "fetches_per_sample")
        if fetches is not None:
            want = groups_touched(sample_spec(pattern))
            targets[f"fetches_equal_groups_{pattern}"] = {
                "value": fetches,
                "target": want,
                "met": fetches == want,
            }
        hflow_bytes = get("hflow", pattern, "file_bytes")
        ours_bytes = get("megahour", pattern, "file_bytes")
        if hflow_bytes and ours_bytes:
            ratios[f"file_bytes_vs_hflow_{pattern}"] = ours_bytes / hflow_bytes
            targets[f"no_larger_than_hflow_{pattern}"] = {
                "value": ours_bytes / hflow_bytes,
                "target": 1.0,
                "met": ours_bytes <= hflow_bytes,
                "psnr_db_ours": get("megahour", pattern, "psnr_db"),
                "psnr_db_hflow": get("hflow", pattern, "psnr_db"),
            }
        for mode in ("local", "remote"):
            ratio = ratios.get(f"read_speedup_vs_hflow_{pattern}_{mode}")
            if ratio is not None:
                targets[f"faster_than_hflow_{pattern}_{mode}"] = {
                    "value": ratio,
                    "target": 1.0,
                    "met": ratio > 1.0,
                }
    return ratios, targets


def print_tables(results: dict) -> None:
    out = Console()
    for pattern in PATTERNS:
        table = Table(title=f"{pattern} pattern (GOP {READ_PATTERNS[pattern].gop_s} s)")
        for column in (
            "layout",
            "video MB",
            "file MB",
            "PSNR dB rec RGB/luma/render",
            "SSIM rec",
            "local ms mean/p99",
            "remote ms mean/p99",
            "fetches",
            "KiB/sample",
            "decode ms",
        ):
            table.add_column(column, justify="right")
        for name, by_pattern in results["layouts"].items():
            f = by_pattern.get(pattern)
            if not f:
                continue
            table.add_row(
                name,
                f"{f['video_payload_bytes'] / 1e6:.2f}",
                f"{f['file_bytes'] / 1e6:.2f}",
                f"{f['psnr_db']:.1f}/{f['luma_psnr_db']:.1f}/{f['psnr_vs_render_db']:.1f}",
                f"{f['ssim']:.3f}",
                f"{f['local']['latency_mean_s'] * 1e3:.1f}/{f['local']['latency_p99_s'] * 1e3:.1f}",
                f"{f['remote']['latency_mean_s'] * 1e3:.1f}/{f['remote']['latency_p99_s'] * 1e3:.1f}",
                f"{f['remote']['fetches_per_sample']:.2f}",
                f"{f['remote']['bytes_per_sample'] / 1024:.0f}",
                f"{f['remote']['decode_mean_s'] * 1e3:.1f}",
            )
        out.print(table)
    if results["gop_sweep"]:
        table = Table(title="GOP sweep (megahour layout)")
        for column in ("GOP s", "video MB", "PSNR dB", "VLA local ms", "world-model local ms"):
            table.add_column(column, justify="right")
        for row in results["gop_sweep"]:
            table.add_row(
                f"{row['gop_s']:.2f}",
                f"{row['video_payload_bytes'] / 1e6:.2f}",
                f"{row['psnr_db']:.1f}",
                f"{row['vla_local_latency_mean_s'] * 1e3:.1f}",
                f"{row['world_model_local_latency_mean_s'] * 1e3:.1f}",
            )
        out.print(table)
    if results["reader_variants"]:
        table = Table(title="reader swaps (remote): same files, other reader")
        for column in ("reader", "of layout", "pattern", "ms mean/p99", "fetches"):
            table.add_column(column)
        for variant, by_pattern in results["reader_variants"].items():
            for pattern, f in by_pattern.items():
                r = f["remote"]
                table.add_row(
                    variant,
                    f["of"],
                    pattern,
                    f"{r['latency_mean_s'] * 1e3:.1f}/{r['latency_p99_s'] * 1e3:.1f}",
                    f"{r['fetches_per_sample']:.2f}",
                )
        out.print(table)
    table = Table(title="targets")
    for column in ("target", "value", "wanted", "met"):
        table.add_column(column)
    for name, t in results["targets"].items():
        table.add_row(name, f"{t['value']:.3f}", str(t["target"]), "yes" if t["met"] else "NO")
    out.print(table)
    for name, value in sorted(results["ratios"].items()):
        out.print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    sys.exit(main())
