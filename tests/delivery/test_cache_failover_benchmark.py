"""benchmarks/cache_failover.py's pure parts: the read figures around a kill, and that it measures the
alluxio role's own HA settings (its daemons need the Alluxio distribution and a JDK: run by hand)."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("cache_failover", REPO / "benchmarks" / "cache_failover.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # its dataclasses look their module up there
spec.loader.exec_module(bench)


def test_the_stall_runs_from_the_last_read_before_the_kill_to_the_first_after():
    reads = [
        bench.Read(0.0, 0.1, True),
        bench.Read(0.1, 0.2, True),
        # started before the kill at 1.0, blocked through the failover, completed at 9.5
        bench.Read(0.2, 9.5, True),
        bench.Read(9.5, 9.6, True),
    ]
    figures = bench.read_figures(reads, killed_at=1.0)
    assert figures["read_stall_s"] == 9.3
    assert figures["reads"] == 4
    assert figures["reads_failed"] == 0
    assert figures["read_p50_ms_before"] == 100.0


def test_a_stall_that_begins_a_few_reads_after_the_kill_counts():
    reads = [
        bench.Read(0.0, 0.1, True),
        bench.Read(0.1, 1.2, True),  # in flight at the kill (1.0)
        bench.Read(1.2, 1.3, True),
        bench.Read(1.3, 16.3, True),  # the client needed the master here
        bench.Read(16.3, 16.4, True),
    ]
    assert bench.read_figures(reads, killed_at=1.0)["read_stall_s"] == 15.0


def test_failures_and_wrong_bytes_are_counted_apart_and_no_recovery_is_no_stall():
    reads = [
        bench.Read(0.0, 0.1, True),
        bench.Read(1.5, 1.6, False),
        bench.Read(1.7, 1.8, False, wrong_bytes=True),
    ]
    figures = bench.read_figures(reads, killed_at=1.0)
    assert figures["read_stall_s"] is None
    assert (figures["reads_failed"], figures["reads_wrong_bytes"]) == (1, 1)


def test_three_masters_run_with_the_roles_settings_less_the_addresses():
    settings = bench.role_ha_settings()
    assert settings["alluxio.master.embedded.journal.election.timeout.min"] == "3s"
    assert settings["alluxio.standby.master.web.enabled"] == "false"
    assert not any(key.endswith(".addresses") for key in settings)
