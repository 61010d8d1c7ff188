"""`megahour backup`: a failed run still reports itself to Prometheus; list and restore find the dumps."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from megahour.backup.plan import file_name
from megahour.cli import main


def test_a_run_whose_tool_is_missing_fails_with_one_line_and_a_zero_ok_metric(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no mariadb-dump to be found
    (tmp_path / "metrics").mkdir()
    argv = ["backup", "run", "--name", "slurm-accounting", "--kind", "mariadb", "--database", "slurm_acct_db"]
    code = main([*argv, "--dir", str(tmp_path / "d"), "--metrics", str(tmp_path / "metrics")])
    assert code == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "mariadb-dump is not installed on this host; "
            "install the database's client tools or run the backup "
            "where the database runs"
        )
    )
    prom = (tmp_path / "metrics" / "megahour_backup_slurm-accounting.prom").read_text()
    assert 'megahour_backup_last_run_ok{kind="mariadb",target="slurm-accounting"} 0' in prom


def test_list_shows_the_dumps_and_restore_says_when_there_is_none(tmp_path, capsys):
    taken = datetime(2026, 12, 6, 2, 30, tzinfo=UTC)
    (tmp_path / file_name("airflow", taken)).write_bytes(b"x")
    assert main(["backup", "list", "--dir", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["target"], d["taken"]) for d in listed] == [("airflow", "2026-12-06T02:30:00Z")]
    code = main(
        [
            "backup",
            "restore",
            "--name",
            "slurm-accounting",
            "--kind",
            "mariadb",
            "--database",
            "x",
            "--dir",
            str(tmp_path),
        ]
    )
    assert code == 1
    assert "no dump of it in" in capsys.readouterr().err
