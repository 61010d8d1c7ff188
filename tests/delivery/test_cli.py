"""`megahour cache ...`: sample specs are a closed set; the status table keeps worker names whole."""

from __future__ import annotations

import pytest

from megahour.cli import main
from megahour.delivery import status
from megahour.delivery.client import CacheConfig


@pytest.mark.parametrize("command", ["warm", "read"])
def test_spec_is_a_closed_set(command, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["cache", command, "--manifest", "m.arrow", "--spec", "vla_long"])
    assert exc.value.code == 2
    assert "invalid choice: 'vla_long'" in capsys.readouterr().err


def test_status_table_keeps_long_worker_names_whole_outside_a_terminal(monkeypatch, capsys) -> None:
    name = "gpu-" + "rack17-row4-" * 8 + "node1"
    worker = status.WorkerStatus(name, "10.89.0.56:29999", "LOST", 10**9, 10**6, None, None, None)
    monkeypatch.setattr(CacheConfig, "load", classmethod(lambda cls, _path: None))
    monkeypatch.setattr(status, "collect", lambda _config: status.CacheStatus("m:19999", "2.9.6", [worker]))
    assert main(["cache", "status", "--config", "cache.yml"]) == 1  # the worker is not active
    out = capsys.readouterr().out
    assert name in out and "…" not in out and "hit ratio: no reads yet" in out
