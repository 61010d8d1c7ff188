"""benchmarks/plots.py on results shaped as each script's ``--json`` output.

The inputs are built from the scripts' own pure parts where they have them (ratios_and_targets,
summarize, ownership_figures, packer_balance) and checked against their own table printers, so a change
to a script's keys shows up here rather than as a broken plot after an hour-long run.
"""

from __future__ import annotations

import json

import pytest
from PIL import Image
from rich.table import Table

from tests.benchmarks import load_script

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


_load = load_script


plots = _load("plots")
episodes = _load("episodes")
manifest = _load("manifest")
delivery = _load("delivery")
muon = _load("muon")
ingest = _load("ingest")


# --- results as each script writes them ------------------------------------------------------------------


def _reads(latency_s: float, fetches: float) -> dict:
    return {
        "samples": 6,
        "fetches_per_sample": fetches,
        "bytes_per_sample": 200_000.0,
        "latency_mean_s": latency_s,
        "latency_p99_s": latency_s * 1.5,
        "decode_mean_s": latency_s / 3,
    }


def _storage(payload: int) -> dict:
    return {
        "video_payload_bytes": payload,
        "file_bytes": payload + 50_000,
        "psnr_db": 38.0,
        "luma_psnr_db": 40.0,
        "ssim": 0.95,
        "psnr_vs_render_db": 33.0,
        "ssim_vs_render": 0.9,
    }


def episodes_results() -> dict:
    layouts = {}
    for i, name in enumerate(episodes.LAYOUTS):
        layouts[name] = {
            pattern: {
                "build_s": 1.0,
                **_storage(1_000_000 * (i + 1)),
                "local": _reads(0.01 * (i + 1), 3.0),
                "remote": _reads(0.06 * (i + 1), 3.0),
            }
            for pattern in episodes.PATTERNS
        }
    variants = {
        variant: {p: {"of": base, "remote": _reads(0.1, 4.0)} for p in episodes.PATTERNS}
        for variant, base in episodes.READER_VARIANTS.items()
    }
    sweep = []
    for gop_s in (0.5, 2.0):
        row = {"gop_s": gop_s, **_storage(int(2e6 / gop_s))}
        for pattern in episodes.PATTERNS:
            row[f"{pattern}_local_latency_mean_s"] = 0.01 * gop_s
            row[f"{pattern}_decode_mean_s"] = 0.005 * gop_s
        sweep.append(row)
    results = {"layouts": layouts, "reader_variants": variants, "gop_sweep": sweep}
    results["ratios"], results["targets"] = episodes.ratios_and_targets(layouts, variants)
    results["config"] = {
        "quick": True, "episodes": 1, "duration_s": 4.5, "samples": 6, "latency_ms": 50.0,
        "crf": episodes.CRF, "cameras": ["scene", "wrist"], "commit": "abc1234", "python": "3.11.2",
        "seconds": 90.0,
    }  # fmt: skip
    episodes.print_tables(results)  # the script's own reader of these keys
    return results


def _load_figures(world: int, mode: str) -> dict:
    slow = 1.0 if mode == "ours" else 20.0
    return {
        "world": world,
        "load_mean_s": 0.004 * slow,
        "load_max_s": 0.005 * slow * world,
        "rss_growth_max_bytes": 30_000_000 // world,
        "heap_growth_max_bytes": 0 if mode == "ours" else 60_000_000,
        "slice_bytes_max": 25_000_000 // world,
        "rows": 400_000,
        "rss_over_slice_max_bytes": 5_000_000,
        "file_bytes": 60_000_000,
    }


def manifest_results() -> dict:
    ours = {"query_s": 1.0, "write_s": 0.5, "total_s": 1.5, "rows": 400_000, "bytes": 60_000_000,
            "content_sha256": "0" * 64}  # fmt: skip
    results = {
        "build": {
            "ours_embedded": ours,
            "ours_embedded_sampled": {**ours, "rows": 150_000},
            "baseline_walk": {"select_s": 30.0, "total_s": 32.0, "rows": 400_000, "same_rows_as_ours": True},
            "baseline_sqlite": {"select_s": 4.0, "rows": 400_000},
        },
        "load": {mode: [_load_figures(w, mode) for w in (1, 4)] for mode in ("ours", "baseline")},
        "setup": {"generate_embedded_s": 10.0, "copy_to_sqlite_s": 20.0},
    }
    results["ratios"], results["targets"] = manifest.ratios_and_targets(results)
    results["config"] = {
        "quick": True, "rows": 2_000_000, "where": manifest.WHERE, "worlds": [1, 4], "server": False,
        "commit": "abc1234", "python": "3.11.2", "cpus": 2, "seconds": 100.0,
    }  # fmt: skip
    manifest.print_tables(results)
    return results


def _epoch(wait: float) -> dict:
    return {"data_wait_fraction": wait, "samples_per_s": 3.9, "hit_ratio": 1.0, "fallbacks": 0}


def _limit_read(mb_per_s: float, cores: float) -> dict:
    """One read of `megahour cache limit --json`."""
    return {
        "bytes": 40 << 20, "seconds": (40 << 20) / 1e6 / mb_per_s, "mb_per_s": mb_per_s, "cpu_s": 0.1,
        "node_cpu_busy_s": cores * (40 << 20) / 1e6 / mb_per_s, "node_cores_busy": cores,
        "mb_per_s_per_core": mb_per_s / cores, "method": "pread", "withheld": "",
    }  # fmt: skip


def delivery_results() -> dict:
    direct = {"role_default": 22.0, "100mbit": 11.5, "50mbit": 5.9}
    warm = 480.0
    reads = {
        "node": delivery.NODE, "samples": 12, "episodes": 4, "step_time_s": 0.25, "page_size": 1 << 20,
        "pages_per_range": 4, "under_store": "remote: ...", "under_store_remote": True,
        "store_qdisc": "qdisc tbf 8001: root refcnt 2 rate 200Mbit burst 262125b lat 50ms",
        "cold": _epoch(0.4), "warm_up": {"mb_per_s": 30.0, "page_ranges": 40, "fallbacks": 0},
        "warm": _epoch(0.01),
        "warm_read": {"mb_per_s": warm, "page_ranges": 40, "passes": delivery.WARM_PASSES,
                      "pass_mb_per_s": [warm] * delivery.WARM_PASSES, "fallbacks": 0},
        "under_store_read": {link: {"mb_per_s": mbps, "page_ranges": 40} for link, mbps in direct.items()},
        "data_wait_cold": 0.4, "data_wait_warm": 0.01, "warm_hit_ratio": 1.0, "warm_read_mb_per_s": warm,
        "under_store_read_mb_per_s": direct,
        "warm_over_under_store_read": {link: warm / mbps for link, mbps in direct.items()},
        "target_warm_over_remote": 5.0, "target_data_wait_warm": 0.02,
        "local_files_read": {"mb_per_s": 2400.0, "page_ranges": 40}, "local_files_read_mb_per_s": 2400.0,
        "warm_read_mb_per_s_per_core": 120.0, "target_warm_over_limit": 0.5,
        "warm_read_proxy": {"mb_per_s": 210.0, "mb_per_s_per_core": 95.0}, "warm_read_proxy_mb_per_s": 210.0,
        "limit": {
            "objects": 4, "page_ranges": 40, "bytes": 40 << 20, "files_skipped": "",
            "files_cold": _limit_read(900.0, 1.1), "files_warm": _limit_read(4800.0, 2.0),
            "volume_raw": _limit_read(1500.0, 0.9),
        },
    }  # fmt: skip
    return {
        "commit": "abc1234",
        "ownership": delivery.ownership_figures(3000),
        "reads": reads,
        "total_s": 60.0,
    }


def _timed(strategy: str, ms: float, nodes: int) -> dict:
    """One strategy's entry as megahour.train.stepbench writes it."""
    intra, inter = 2_000_000, 0 if strategy == "per_node" else 2_000_000 * (nodes - 1)
    moved = {"intra": intra, "inter": inter, "ingress": 0, "collectives": 24, "total": intra + inter}
    return {"mean_s": ms / 1e3, "p50_s": ms * 0.95 / 1e3, "median_s": ms * 0.95 / 1e3,
            "p99_s": ms * 1.3 / 1e3, "steps": 5, "muon_bytes_per_step": moved}  # fmt: skip


def _regime(nodes: int, ms: dict[str, float], pick: str) -> dict:
    strategies = {s: _timed(s, t, nodes) for s, t in ms.items()}
    predictions = {
        s: {"seconds": t / 1e3, "comm_seconds": 0.0, "compute_seconds": 0.0} for s, t in ms.items()
    }
    choice = {"strategy": pick, "nodes": nodes, "gpus_per_node": 2, "reason": "", "links": {},
              "predictions": predictions}  # fmt: skip
    result = {"choice": choice, "node_bulk_bytes_per_s": 2e9, "strategies": strategies}
    if nodes == 1:  # as run_regime fills it in: one schedule, timed once
        result["strategies"]["per_node"] = {**result["strategies"]["world"], "same_schedule_as": "world"}
    return result


def muon_results() -> dict:
    one = _regime(1, {"world": 20.0, "replicated": 30.0, "fully_sharded": 25.0}, "world")
    series = {}
    for ratio, slow in ((18.0, 1.0), (180.0, 4.0)):
        multi = {
            "world": 40.0 * slow, "per_node": 35.0, "replicated": 60.0, "fully_sharded": 45.0 * slow,
        }  # fmt: skip
        regimes = {
            "1x2": one,
            "2x2": {**_regime(2, multi, "per_node"), "inter_mbit": 888.0 / slow},
            "4x2": {**_regime(4, multi, "per_node"), "inter_mbit": 888.0 / slow},
        }
        series[f"ratio{ratio:g}"] = {"ratio": ratio, "inter_mbit": 888.0 / slow, "regimes": regimes}
    figures: dict = {"intra_mb_per_s": 2000.0}
    for name, entry in series.items():
        muon.summarize(name, entry["regimes"], figures, Table())
        figures[f"{name}_inter_mbit"] = entry["inter_mbit"]
    return {
        "benchmark": "muon", "commit": "abc1234", "quick": True, "steps": 5, "matrices": 24, "size": 384,
        "gpus_per_node": 2, "seconds": 100.0, "figures": figures, "series": series,
    }  # fmt: skip


def ingest_results() -> dict:
    good_s, mono_s, pair_s, dag_s = 480.0, 120.0, 70.0, 80.0
    per_hour_mono, per_hour_dag = good_s / mono_s, good_s / dag_s  # hours / (wall / 3600)
    cluster = {
        "episodes": 160, "rendered_episodes": 16, "replicas": 10, "episode_seconds_good": good_s,
        "monolithic": {"wall_s": mono_s, "registered": 150, "quarantined": 1},
        "dag": {"wall_s": dag_s, "state": "success", "jitter_s": 0.0, "airflow_cpu_s": {"scheduler": 9.0},
                "airflow_cpu_share_of_one_core": 0.1, "registered": 150, "quarantined": 1},
        "episode_hours_per_hour_monolithic": per_hour_mono,
        "episode_hours_per_hour_dag": per_hour_dag,
        "dag_over_monolithic": per_hour_dag / per_hour_mono,
        "target_dag_over_monolithic": 1.7,
        "monolithic_pair": {"wall_s": pair_s, "half_wall_s": [pair_s, 66.0], "registered": 150,
                            "quarantined": 1},
        "ceiling_two_workers_over_monolithic": mono_s / pair_s,
        "dag_over_ceiling": pair_s / dag_s,
    }  # fmt: skip
    return {
        "commit": "abc1234",
        "binpack": ingest.packer_balance(300, (2, 8)),
        "cluster": cluster,
        "total_s": 900.0,
    }


# --- the plots ------------------------------------------------------------------------------------------

CASES = {
    "episode_size_latency": episodes_results,
    "gop_sweep": episodes_results,
    "manifest_load": manifest_results,
    "delivery_reads": delivery_results,
    "delivery_limit": delivery_results,
    "muon_steps": muon_results,
    "ingest_throughput": ingest_results,
}
SCRIPTS = {
    "episode_size_latency": "episodes",
    "gop_sweep": "episodes",
    "manifest_load": "manifest",
    "delivery_reads": "delivery",
    "delivery_limit": "delivery",
    "muon_steps": "muon",
    "ingest_throughput": "ingest",
}


def _assert_png(path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(path) as image:
        width, height = image.size
        assert 800 <= width <= 4000 and 500 <= height <= 3000
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 20  # not blank


@pytest.mark.parametrize("plot", sorted(CASES))
def test_each_plot_writes_a_png_from_its_scripts_json(plot, tmp_path):
    # Through JSON, as the CLI reads it back: sorted keys, lists for tuples.
    results = json.loads(json.dumps(CASES[plot](), sort_keys=True))
    paths = getattr(plots, plot)(results, tmp_path / "images")
    assert len(paths) == 1
    _assert_png(paths[0])
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == [paths[0].name]  # no temporaries


@pytest.mark.parametrize("plot", sorted(CASES))
def test_a_missing_key_names_it_and_the_script_to_rerun(plot, tmp_path):
    with pytest.raises(ValueError, match=rf"rerun benchmarks/{SCRIPTS[plot]}\.py") as caught:
        getattr(plots, plot)({"commit": "abc1234"}, tmp_path)
    assert "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir())


def test_a_missing_nested_key_is_named(tmp_path):
    results = muon_results()
    del results["series"]["ratio18"]["regimes"]["2x2"]["strategies"]["world"]["p99_s"]
    with pytest.raises(ValueError, match=r"'p99_s'.*benchmarks/muon\.py"):
        plots.muon_steps(results, tmp_path)


@pytest.mark.parametrize(
    ("plot", "build", "why"),
    [
        ("delivery_reads", lambda: {"commit": "x", "reads_skipped": "the local cluster is not up"}, "not up"),
        (
            "ingest_throughput",
            lambda: {"commit": "x", "cluster": {"skipped": "--no-cluster"}},
            "--no-cluster",
        ),
        ("gop_sweep", lambda: {**episodes_results(), "gop_sweep": []}, "megahour's own"),
    ],
)
def test_a_skipped_part_says_why(plot, build, why, tmp_path):
    with pytest.raises(ValueError, match=why):
        getattr(plots, plot)(build(), tmp_path)


def test_a_failed_dag_run_is_reported_not_drawn(tmp_path):
    results = ingest_results()
    results["cluster"]["dag"]["state"] = "failed"
    results["cluster"]["episode_hours_per_hour_dag"] = None
    with pytest.raises(ValueError, match="DAG run failed"):
        plots.ingest_throughput(results, tmp_path)


def test_a_group_draws_all_its_plots_and_replaces_old_ones(tmp_path):
    (tmp_path / "episodes-gop-sweep.png").write_bytes(b"old")
    paths = plots.draw("episodes", episodes_results(), tmp_path)
    assert [p.name for p in paths] == ["episodes-size-vs-latency.png", "episodes-gop-sweep.png"]
    for path in paths:
        _assert_png(path)


def test_the_scripts_hook_reports_what_it_could_not_draw(tmp_path):
    console = _Console()
    assert plots.draw_for_script("muon", muon_results(), tmp_path, console) == 0
    assert (tmp_path / "muon-step-time.png").exists()
    assert (
        plots.draw_for_script("ingest", {"commit": "x", "cluster": {"skipped": "no"}}, tmp_path, console) == 1
    )
    assert "plots not drawn" in console.lines[-1]


def test_the_cli_redraws_from_a_stored_json(tmp_path, capsys):
    stored = tmp_path / "manifest.json"
    stored.write_text(json.dumps(manifest_results(), indent=2, sort_keys=True))
    assert plots.main(["manifest", str(stored), "--out", str(tmp_path / "out")]) == 0
    _assert_png(tmp_path / "out" / "manifest-load-by-ranks.png")
    stored.write_text(json.dumps({"commit": "x"}))
    assert plots.main(["manifest", str(stored), "--out", str(tmp_path / "out")]) == 1
    assert "benchmarks/manifest.py" in capsys.readouterr().err


class _Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str) -> None:
        self.lines.append(text)
