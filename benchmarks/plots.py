#!/usr/bin/env python3
"""PNG plots of the benchmarks' ``--json`` figures, for docs/benchmarks.md.

One function per plot; each reads only its script's JSON dict and writes PNGs into ``out_dir``. The scripts
call them after writing their JSON when given ``--plots DIR``; this CLI redraws them from a stored JSON
without rerunning anything:

    python benchmarks/plots.py episodes benchmarks/results/episodes.json --out docs/images/benchmarks
    python benchmarks/plots.py muon benchmarks/results/muon.json --out docs/images/benchmarks

Groups (one per script): episodes, manifest, delivery, muon, ingest.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib

# Benchmark hosts have no display; Agg renders PNGs without one.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from megahour.atomicio import atomic_writer

DPI = 150
STRATEGIES = ("world", "per_node", "replicated", "fully_sharded")


# --- shared -----------------------------------------------------------------------------------------------


def _missing(script: str, key: str, why: str | None = None) -> ValueError:
    reason = f" ({why})" if why else ""
    return ValueError(f"{script}.py results lack {key!r}{reason}: rerun benchmarks/{script}.py --json PATH")


def _need(results: dict, script: str, *path: str, why: str | None = None):
    """``results[path[0]][path[1]]...``, or a one-line ValueError naming the key and the script to rerun."""
    node = results
    for depth, key in enumerate(path):
        if not isinstance(node, dict) or node.get(key) is None:
            raise _missing(script, ".".join(path[: depth + 1]), why)
        node = node[key]
    return node


def _figure(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (8, 5), **kwargs):
    fig, axes = plt.subplots(nrows, ncols, figsize=size, layout="constrained", squeeze=False, **kwargs)
    # Room at the bottom for the footer, which constrained layout does not place itself.
    fig.get_layout_engine().set(rect=(0, 0.04, 1, 0.96))
    return fig, axes


def _footer(fig, results: dict, script: str) -> None:
    config = results.get("config", {})
    commit = results.get("commit") or config.get("commit") or "unknown"
    quick = results.get("quick", config.get("quick"))
    text = f"benchmarks/{script}.py at commit {commit}" + (", --quick run" if quick else "")
    fig.text(0.01, 0.01, text, fontsize=7, color="0.4", ha="left", va="bottom")


def _save(fig, out_dir: Path, name: str) -> Path:
    path = Path(out_dir) / name
    try:
        with atomic_writer(path) as handle:  # temp file beside it, then os.replace: never half a PNG
            fig.savefig(handle, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    return path


def _bar_label(ax, x: float, y: float, text: str) -> None:
    ax.annotate(text, (x, y), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)


# --- benchmarks/episodes.py -------------------------------------------------------------------------------


def episode_size_latency(results: dict, out_dir: Path) -> list[Path]:
    layouts = _need(results, "episodes", "layouts")
    episodes = _need(results, "episodes", "config", "episodes")
    patterns = sorted({p for by_pattern in layouts.values() for p in by_pattern})
    if not patterns:
        raise _missing("episodes", "layouts", "no layout measured")
    fig, axes = _figure(ncols=len(patterns), size=(5.5 * len(patterns) + 2, 5))
    colors = {name: f"C{i}" for i, name in enumerate(layouts)}
    for ax, pattern in zip(axes[0], patterns, strict=True):
        for name in layouts:
            if pattern not in layouts[name]:
                continue
            size_mb = _need(results, "episodes", "layouts", name, pattern, "file_bytes") / episodes / 1e6
            for mode, marker, face in (("remote", "o", colors[name]), ("local", "s", "none")):
                ms = _need(results, "episodes", "layouts", name, pattern, mode, "latency_mean_s") * 1e3
                ax.scatter(size_mb, ms, marker=marker, s=60, edgecolors=colors[name], facecolors=face)
        ax.set(title=f"{pattern} read pattern", yscale="log")
        ax.set(xlabel="file size per episode (MB)", ylabel="mean sample read latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], marker="o", ls="", color=c, label=n) for n, c in colors.items()]
    latency = results.get("config", {}).get("latency_ms")
    remote = f"remote (+{latency:g} ms a request)" if latency is not None else "remote"
    handles += [
        Line2D([], [], marker="o", ls="", color="0.3", label=remote),
        Line2D([], [], marker="s", ls="", mfc="none", color="0.3", label="local"),
    ]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    fig.suptitle("Episode layouts: file size against sample read latency")
    _footer(fig, results, "episodes")
    return [_save(fig, out_dir, "episodes-size-vs-latency.png")]


def gop_sweep(results: dict, out_dir: Path) -> list[Path]:
    rows = _need(results, "episodes", "gop_sweep")
    if not rows:
        raise _missing("episodes", "gop_sweep", "empty: the layouts run did not include megahour's own")
    episodes = _need(results, "episodes", "config", "episodes")
    rows = sorted(rows, key=lambda r: _need(r, "episodes", "gop_s"))
    gops = [r["gop_s"] for r in rows]
    suffix = "_local_latency_mean_s"
    patterns = sorted(k.removesuffix(suffix) for k in rows[0] if k.endswith(suffix))
    fig, axes = _figure(nrows=2, size=(7, 6.5), sharex=True)
    top, bottom = axes[0][0], axes[1][0]
    payload = [_need(r, "episodes", "video_payload_bytes") / episodes / 1e6 for r in rows]
    top.plot(gops, payload, marker="o", color="C0")
    top.set(ylabel="H.264 payload per episode (MB)", title="size")
    for i, pattern in enumerate(patterns):
        ms = [_need(r, "episodes", f"{pattern}{suffix}") * 1e3 for r in rows]
        marker = "os^D"[i % 4]  # coinciding series stay visible
        bottom.plot(gops, ms, marker=marker, color=f"C{i + 1}", label=f"{pattern} sample")
    bottom.set(xlabel="GOP (s)", ylabel="mean local read latency (ms)", title="sample reads (local)")
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(gops, [f"{g:g}" for g in gops])
    bottom.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    fig.suptitle("GOP sweep of the megahour layout: size against decode work")
    _footer(fig, results, "episodes")
    return [_save(fig, out_dir, "episodes-gop-sweep.png")]


# --- benchmarks/manifest.py -------------------------------------------------------------------------------


def manifest_load(results: dict, out_dir: Path) -> list[Path]:
    labels = {"ours": "ours: memory-mapped slice", "baseline": "baseline: whole file on the heap"}
    fig, axes = _figure()
    ax = axes[0][0]
    worlds: set[int] = set()
    for i, (mode, label) in enumerate(labels.items()):
        rows = sorted(_need(results, "manifest", "load", mode), key=lambda r: _need(r, "manifest", "world"))
        if not rows:
            raise _missing("manifest", f"load.{mode}", "no rank counts measured")
        ranks = [r["world"] for r in rows]
        worlds.update(ranks)
        worst = [_need(r, "manifest", "load_max_s") * 1e3 for r in rows]
        mean = [_need(r, "manifest", "load_mean_s") * 1e3 for r in rows]
        ax.plot(ranks, worst, marker="o", color=f"C{i}", label=f"{label} (slowest rank)")
        ax.plot(ranks, mean, marker=".", ls="--", color=f"C{i}", label=f"{label} (mean)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(worlds), [str(w) for w in sorted(worlds)])
    ax.set(yscale="log", xlabel="ranks loading at once (processes)", ylabel="load time per rank (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    first = results["load"]["ours"][0]
    size = f"{first['rows']:,} rows, {first['file_bytes'] / 1e6:.0f} MB" if "file_bytes" in first else ""
    fig.suptitle(f"Manifest load time by rank count\n{size}".strip())
    _footer(fig, results, "manifest")
    return [_save(fig, out_dir, "manifest-load-by-ranks.png")]


# --- benchmarks/delivery.py -------------------------------------------------------------------------------


def _link_label(link: str, reads: dict) -> str:
    if link != "role_default":
        return re.sub(r"^(\d+)mbit$", r"\1 Mbit/s", link)
    if not reads.get("under_store_remote"):
        return "local disk\n(no remote store)"
    # tc prints the role's cap as e.g. "rate 200Mbit" in the qdisc the script recorded.
    rate = re.search(r"rate (\d+(?:\.\d+)?)([KMG])bit", reads.get("store_qdisc") or "")
    return f"{rate.group(1)} {rate.group(2)}bit/s\n(role's link)" if rate else "role's link"


def _link_order(link: str) -> int:
    # The role's link first, then the caps from the fastest down.
    rate = re.match(r"(\d+)", link)
    return -int(rate.group(1)) if rate else -(10**9)


def delivery_reads(results: dict, out_dir: Path) -> list[Path]:
    why = results.get("reads_skipped")
    reads = _need(results, "delivery", "reads", why=why and f"read figures skipped: {why}")
    warm = _need(results, "delivery", "reads", "warm_read_mb_per_s")
    direct = _need(results, "delivery", "reads", "under_store_read_mb_per_s")
    links = sorted(direct, key=_link_order)
    fig, axes = _figure(size=(8, 5))
    ax = axes[0][0]
    width = 0.38
    passes = reads.get("warm_read", {}).get("passes")
    warm_label = "warm cache (all hits" + (f", median of {passes} passes)" if passes else ")")
    source = "remote under-store (S3 over the link)" if reads.get("under_store_remote") else "under-store"
    for i, link in enumerate(links):
        ax.bar(i - width / 2, warm, width, color="C0", label=warm_label if i == 0 else None)
        ax.bar(
            i + width / 2, direct[link], width, color="C1", label=f"{source}, no cache" if i == 0 else None
        )
        _bar_label(ax, i + width / 2, direct[link], f"cache {warm / direct[link]:.1f}x")
    # The ceiling the warm cache is measured against: the same files read on this machine's disk.
    local = reads.get("local_files_read_mb_per_s")
    if local:
        label = f"the same files on local disk ({local:.0f} MB/s)"
        ax.axhline(local, color="C2", linestyle="--", label=label)
    ax.set_xticks(range(len(links)), [_link_label(link, reads) for link in links])
    ax.set(yscale="log", xlabel="under-store link", ylabel="read throughput on one node (MB/s)")
    # Log axes pick poor limits for two close bars; headroom above is for the legend.
    values = [warm, *direct.values(), *([local] if local else [])]
    ax.set_ylim(min(values) / 3, max(values) * 4)
    ax.set_xlim(-0.75, len(links) - 0.25)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"Warm cache against remote reads by link rate ({reads.get('node', 'gpu-1')})")
    _footer(fig, results, "delivery")
    return [_save(fig, out_dir, "delivery-warm-vs-remote.png")]


_LIMIT_LABELS = {
    "files_cold": "files, page cache cold",
    "files_warm": "files, page cache warm",
    "volume_raw": "cache volume, raw (O_DIRECT)",
}


def delivery_limit(results: dict, out_dir: Path) -> list[Path]:
    """The warm cache against the node's own read limit: MB/s, and MB/s per core kept busy."""
    why = results.get("reads_skipped")
    _need(results, "delivery", "reads", why=why and f"read figures skipped: {why}")
    limit = _need(results, "delivery", "reads", "limit")
    warm = _need(results, "delivery", "reads", "warm_read_mb_per_s")
    warm_per_core = results["reads"].get("warm_read_mb_per_s_per_core")
    target = results["reads"].get("target_warm_over_limit", 0.5)
    rows = [
        (_LIMIT_LABELS[name], limit[name]["mb_per_s"], limit[name].get("mb_per_s_per_core"), "C2")
        for name in _LIMIT_LABELS
        if limit.get(name) and limit[name].get("mb_per_s")
    ]
    if not rows:
        raise _missing("delivery", "reads.limit", "no limit read has a figure (each was skipped or withheld)")
    proxy = results["reads"].get("warm_read_proxy")
    if proxy:  # since the fast path (issue 28): the same passes with every range through a proxy
        rows.append(("warm cache, proxies only", proxy["mb_per_s"], proxy.get("mb_per_s_per_core"), "C1"))
    rows.append(
        ("warm cache, page stores" if proxy else "warm cache (the S3 proxies)", warm, warm_per_core, "C0")
    )
    fig, axes = _figure(ncols=2, size=(12, 4.5))
    for ax, column, xlabel in (
        (axes[0][0], 1, "read throughput on one node (MB/s)"),
        (axes[0][1], 2, "MB/s per CPU core the machine kept busy"),
    ):
        labels = [row[0] for row in rows]
        values = [row[column] or 0.0 for row in rows]
        ax.barh(range(len(rows)), values, color=[row[3] for row in rows])
        for i, value in enumerate(values):
            ax.text(value, i, f" {value:.0f}" if value else " n/a", va="center", fontsize=8)
        ax.set_yticks(range(len(rows)), labels if column == 1 else [""] * len(rows))
        ax.set(xscale="log", xlabel=xlabel)
        ax.set_xlim(max(1.0, min(v for v in values if v) / 3), max(values) * 6)
        ax.grid(True, axis="x", which="both", alpha=0.3)
    cold = limit.get("files_cold") or {}
    if cold.get("mb_per_s"):
        axes[0][0].axvline(
            cold["mb_per_s"] * target, color="C3", linestyle="--", label=f"target: {target:.0%} of cold files"
        )
        axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"The warm cache against the node's own read limit ({results['reads'].get('node', 'gpu-1')})"
    )
    _footer(fig, results, "delivery")
    return [_save(fig, out_dir, "delivery-limit.png")]


# --- benchmarks/muon.py -----------------------------------------------------------------------------------


def _regime_nodes(name: str) -> int:
    return int(name.split("x")[0])


def _regime_label(name: str, result: dict) -> str:
    same = [
        f"{s} = {r['same_schedule_as']}" for s, r in result["strategies"].items() if r.get("same_schedule_as")
    ]
    return "\n".join([name, *(f"({text})" for text in same)])


def _muon_panel(ax, entry: dict, name: str) -> None:
    regimes = _need(entry, "muon", "regimes")
    order = sorted(regimes, key=_regime_nodes)
    present = {s for r in regimes.values() for s in _need(r, "muon", "strategies")}
    strategies = [s for s in STRATEGIES if s in present] + sorted(present - set(STRATEGIES))
    width = 0.8 / len(strategies)
    labelled: set[str] = set()
    for i, regime in enumerate(order):
        result = regimes[regime]
        picked = _need(result, "muon", "choice", "strategy")
        # As the script counts it: a pick of per_node on one node is world's schedule.
        picked = result["strategies"].get(picked, {}).get("same_schedule_as") or picked
        for j, strategy in enumerate(strategies):
            timed = result["strategies"].get(strategy)
            if timed is None or timed.get("same_schedule_as"):
                continue  # on one node per_node is world's schedule, timed once
            x = i + (j - (len(strategies) - 1) / 2) * width
            mean = _need(timed, "muon", "mean_s") * 1e3
            up = max(0.0, _need(timed, "muon", "p99_s") * 1e3 - mean)
            label = None if strategy in labelled else strategy
            labelled.add(strategy)
            ax.bar(x, mean, width, yerr=[[0], [up]], capsize=2, color=f"C{j}", label=label)
            if picked == strategy:
                ax.plot(x, mean + up, marker="v", color="k", ms=6, ls="")
    ax.set_xticks(range(len(order)), [_regime_label(name, regimes[name]) for name in order])
    link = f", {entry['inter_mbit']:g} Mbit/s links" if "inter_mbit" in entry else ""
    ax.set(title=f"{name}: intra/inter bandwidth {entry.get('ratio', 0):g}x{link}")
    ax.set(xlabel="regime (nodes x ranks per node)", ylabel="optimizer step (ms): mean, whisker p99")
    ax.grid(True, axis="y", alpha=0.3)


def muon_steps(results: dict, out_dir: Path) -> list[Path]:
    series = _need(results, "muon", "series")
    names = sorted(series, key=lambda n: series[n].get("ratio", 0))
    if not names:
        raise _missing("muon", "series", "no series measured")
    fig, axes = _figure(ncols=len(names), size=(5.5 * len(names) + 1.5, 5))
    for ax, name in zip(axes[0], names, strict=True):
        _muon_panel(ax, series[name], name)
    # One legend for every panel: a strategy may be timed in some regimes only.
    by_label = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    rank = {s: i for i, s in enumerate(STRATEGIES)}
    handles = [by_label[label] for label in sorted(by_label, key=lambda s: (rank.get(s, len(rank)), s))]
    handles.append(Line2D([], [], marker="v", color="k", ls="", label="selector's pick"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    shape = (
        f"{results.get('matrices', '?')} matrices of {results.get('size', '?')}x{results.get('size', '?')}"
    )
    fig.suptitle(f"Muon step time by sharding strategy and regime ({shape})")
    _footer(fig, results, "muon")
    return [_save(fig, out_dir, "muon-step-time.png")]


# --- benchmarks/ingest.py ---------------------------------------------------------------------------------


def ingest_throughput(results: dict, out_dir: Path) -> list[Path]:
    cluster = _need(results, "ingest", "cluster")
    if cluster.get("skipped"):
        raise _missing("ingest", "cluster", f"cluster part skipped: {cluster['skipped']}")
    mono = _need(results, "ingest", "cluster", "episode_hours_per_hour_monolithic")
    dag_state = cluster.get("dag", {}).get("state")
    dag = _need(results, "ingest", "cluster", "episode_hours_per_hour_dag", why=f"DAG run {dag_state}")
    # The pair's rate is not stored; it is the same episode-seconds over the slower half's wall time.
    good_s = _need(results, "ingest", "cluster", "episode_seconds_good")
    pair = good_s / _need(results, "ingest", "cluster", "monolithic_pair", "wall_s")
    bars = {
        "monolithic job\n(one process)": mono,
        "two monolithic processes\n(ceiling, no orchestration)": pair,
        "Airflow DAG\n(Slurm steps)": dag,
    }
    fig, axes = _figure(size=(8, 5))
    ax = axes[0][0]
    for i, rate in enumerate(bars.values()):
        ax.bar(i, rate, 0.6, color=f"C{i}")
        _bar_label(ax, i, rate, f"{rate:.3g} ({rate / mono:.2f}x)")
    target = cluster.get("target_dag_over_monolithic")
    ax.set_ylim(top=max(*bars.values(), (target or 0) * mono) * 1.15)  # room for the labels
    if target:
        ax.axhline(target * mono, ls="--", color="0.4", label=f"target: DAG {target:g}x monolithic")
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(bars)), list(bars))
    ax.set(ylabel="episode-hours ingested per wall-clock hour")
    ax.grid(True, axis="y", alpha=0.3)
    episodes = cluster.get("episodes", "?")
    fig.suptitle(f"Ingest throughput: {episodes} episodes, {good_s:.0f} s of good episodes")
    _footer(fig, results, "ingest")
    return [_save(fig, out_dir, "ingest-throughput.png")]


# --- entry points -----------------------------------------------------------------------------------------

GROUPS: dict[str, tuple[Callable[[dict, Path], list[Path]], ...]] = {
    "episodes": (episode_size_latency, gop_sweep),
    "manifest": (manifest_load,),
    "delivery": (delivery_reads, delivery_limit),
    "muon": (muon_steps,),
    "ingest": (ingest_throughput,),
}


def draw(group: str, results: dict, out_dir: Path) -> list[Path]:
    """Every plot of one script's results; ValueError when a figure they need is missing."""
    return [path for plot in GROUPS[group] for path in plot(results, Path(out_dir))]


def draw_for_script(group: str, results: dict, out_dir: Path, console) -> int:
    """``--plots`` in the scripts: the exit status, after saying what was drawn or why not."""
    # Round-tripped through JSON, so the plots are those the CLI would draw from the --json file.
    results = json.loads(json.dumps(results, sort_keys=True))
    try:
        paths = draw(group, results, out_dir)
    except ValueError as exc:
        console.print(f"[red]plots not drawn:[/] {exc}")
        return 1
    for path in paths:
        console.print(f"plot written to {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("group", choices=sorted(GROUPS), help="the benchmark script whose JSON this is")
    parser.add_argument("results", type=Path, help="that script's --json output")
    parser.add_argument("--out", type=Path, default=Path("docs/images/benchmarks"), help="PNG directory")
    args = parser.parse_args(argv)
    try:
        paths = draw(args.group, json.loads(args.results.read_text()), args.out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
