"""backup.dump: dumps stream through gzip into the atomic writer and appear only when whole.

The dump and client tools are stood in by small Python programs (the real mariadb-dump, pg_dump, mariadb
and psql run in molecule `cluster`, which restores the dumps into fresh servers)."""

from __future__ import annotations

import gzip
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from megahour.backup import dump as dumps
from megahour.backup.plan import BackupError, Target, file_name

FIXTURES = Path(__file__).parent / "fixtures"
MARIADB = Target("slurm-accounting", "mariadb", "slurm_acct_db")
POSTGRES = Target("airflow", "postgresql", "airflow", run_as="postgres")
WHEN = datetime(2026, 12, 6, 2, 30, tzinfo=UTC)


def tool(script: str):
    """A Popen that runs ``script`` (Python) instead of the argv it is given, which it records."""
    seen: list[list[str]] = []

    def popen(argv, **kwargs):
        seen.append(list(argv))
        return subprocess.Popen([sys.executable, "-c", script], **kwargs)

    popen.seen = seen  # type: ignore[attr-defined]
    return popen


def printing(path: Path, rc: int = 0, stderr: str = "") -> str:
    return (
        "import sys, shutil\n"
        f"shutil.copyfileobj(open({str(path)!r}, 'rb'), sys.stdout.buffer)\n"
        f"sys.stderr.write({stderr!r})\n"
        f"sys.exit({rc})\n"
    )


def test_a_whole_dump_is_published_compressed_and_owner_only(tmp_path):
    source = FIXTURES / "mariadb-dump-10.11.sql"
    popen = tool(printing(source))
    made = dumps.take(MARIADB, tmp_path / "dumps", now=WHEN, popen=popen)
    assert made.path.name == "slurm-accounting-20261206T023000Z.sql.gz"
    assert gzip.decompress(made.path.read_bytes()) == source.read_bytes()
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o600
    assert popen.seen == [
        ["mariadb-dump", "--single-transaction", "--routines", "--triggers", "--databases", "slurm_acct_db"]
    ]
    assert [d.path for d in dumps.list_dumps(tmp_path / "dumps")] == [made.path]


def test_a_postgres_dump_runs_as_postgres(tmp_path):
    popen = tool(printing(FIXTURES / "pg_dump-15.sql"))
    made = dumps.take(POSTGRES, tmp_path, now=WHEN, popen=popen)
    assert made.path.exists()
    assert popen.seen[0][:4] == ["runuser", "-u", "postgres", "--"]
    assert popen.seen[0][4] == "pg_dump"


def test_a_failing_tool_publishes_nothing_and_names_its_message(tmp_path):
    popen = tool(printing(FIXTURES / "mariadb-dump-10.11.sql", rc=2, stderr="Got error: 1045: Access denied"))
    with pytest.raises(
        BackupError, match=r"backup slurm-accounting: mariadb-dump .* exited 2: Got error: 1045"
    ):
        dumps.take(MARIADB, tmp_path, now=WHEN, popen=popen)
    assert list(tmp_path.iterdir()) == []


def test_a_dump_cut_short_publishes_nothing_and_keeps_the_previous(tmp_path):
    whole = FIXTURES / "pg_dump-15.sql"
    previous = dumps.take(POSTGRES, tmp_path, now=WHEN, popen=tool(printing(whole)))
    cut = tmp_path / "cut.sql"
    cut.write_bytes(whole.read_bytes().split(b"-- PostgreSQL database dump complete")[0])
    later = WHEN.replace(day=7)
    with pytest.raises(BackupError, match="ended without its closing comment"):
        dumps.take(POSTGRES, tmp_path / "d", now=later, popen=tool(printing(cut)))
    assert not (tmp_path / "d" / file_name("airflow", later)).exists()
    assert [p.name for p in (tmp_path / "d").iterdir()] == []
    assert previous.path.exists()


def test_a_missing_tool_says_what_to_install(tmp_path):
    def popen(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    with pytest.raises(BackupError, match="mariadb-dump is not installed on this host"):
        dumps.take(MARIADB, tmp_path, popen=popen)


def test_prune_keeps_the_newest_per_target(tmp_path):
    for day in (1, 2, 3):
        for target in (MARIADB, POSTGRES):
            (tmp_path / file_name(target.name, WHEN.replace(day=day))).write_bytes(b"x")
    (tmp_path / ".airflow-20261206T023000Z.sql.gz.abc.tmp").write_bytes(b"partial")
    gone = dumps.prune(tmp_path, keep=2)
    assert sorted(d.path.name for d in gone) == [
        "airflow-20261201T023000Z.sql.gz",
        "slurm-accounting-20261201T023000Z.sql.gz",
    ]
    assert len(dumps.list_dumps(tmp_path)) == 4
    # A temporary is never listed (nor pruned as a dump).
    assert (tmp_path / ".airflow-20261206T023000Z.sql.gz.abc.tmp").exists()


def test_restore_streams_the_dump_to_the_client_and_can_rename_a_mariadb_database(tmp_path):
    source = FIXTURES / "mariadb-dump-10.11.sql"
    made = dumps.take(MARIADB, tmp_path, now=WHEN, popen=tool(printing(source)))
    received = tmp_path / "received.sql"
    client = tool(f"import sys, shutil; shutil.copyfileobj(sys.stdin.buffer, open({str(received)!r}, 'wb'))")
    dumps.restore(MARIADB, made.path, database="slurm_acct_db_restored", popen=client)
    text = received.read_text()
    assert "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `slurm_acct_db_restored`" in text
    assert "USE `slurm_acct_db_restored`;" in text
    # Only the dump's comment still names the database it came from.
    statements = [line for line in text.splitlines() if not line.startswith("--")]
    assert not any("`slurm_acct_db`" in line for line in statements)
    assert client.seen == [["mariadb", "--batch"]]


def test_restore_reports_the_client_refusal(tmp_path):
    made = dumps.take(POSTGRES, tmp_path, now=WHEN, popen=tool(printing(FIXTURES / "pg_dump-15.sql")))
    client = tool(
        "import sys; sys.stdin.buffer.read(); "
        "sys.stderr.write('psql: error: database \"airflow\" does not exist'); sys.exit(2)"
    )
    with pytest.raises(BackupError, match=r'exited 2: psql: error: database "airflow" does not exist'):
        dumps.restore(POSTGRES, made.path, socket="/tmp/pg", port=5433, popen=client)
    assert client.seen[0][-2:] == ["--host=/tmp/pg", "--port=5433"]


def test_restore_of_a_missing_or_damaged_dump_says_so(tmp_path):
    with pytest.raises(BackupError, match="does not exist; list the dumps"):
        dumps.restore(MARIADB, tmp_path / "nope.sql.gz", popen=tool("pass"))
    bad = tmp_path / file_name("slurm-accounting", WHEN)
    bad.write_bytes(b"not gzip at all")
    client = tool("import sys; sys.stdin.buffer.read()")
    with pytest.raises(BackupError, match="is not a readable gzip dump"):
        dumps.restore(MARIADB, bad, popen=client)


def test_metrics_name_the_target_and_the_newest_dump(tmp_path):
    made = dumps.take(MARIADB, tmp_path, now=WHEN, popen=tool(printing(FIXTURES / "mariadb-dump-10.11.sql")))
    (tmp_path / "m").mkdir()
    text = dumps.write_metrics(tmp_path / "m", MARIADB, made, 1.5, ok=True).read_text()
    labels = '{kind="mariadb",target="slurm-accounting"}'
    assert f"megahour_backup_last_run_ok{labels} 1" in text
    assert f"megahour_backup_duration_seconds{labels} 1.5" in text
    assert f"megahour_backup_last_success_timestamp_seconds{labels} {int(WHEN.timestamp())}" in text
    failed = dumps.write_metrics(tmp_path / "m", MARIADB, None, 0.2, ok=False).read_text()
    assert f"megahour_backup_last_run_ok{labels} 0" in failed
    assert "last_success" not in failed


def test_only_old_temporaries_of_the_target_are_cleaned(tmp_path):
    import os

    old = tmp_path / ".airflow-20261201T023000Z.sql.gz.abc.tmp"
    young = tmp_path / ".airflow-20261206T023000Z.sql.gz.def.tmp"
    other = tmp_path / ".slurm-accounting-20261201T023000Z.sql.gz.abc.tmp"
    for path in (old, young, other):
        path.write_bytes(b"partial")
    os.utime(old, (0, 0))
    os.utime(other, (0, 0))
    assert dumps.clean_temporaries(tmp_path, ["airflow"]) == 1
    assert not old.exists() and young.exists() and other.exists()


def test_a_tool_that_warns_a_lot_does_not_block_the_dump(tmp_path):
    # More than a pipe holds (64 KiB) on stderr while stdout is still being read.
    source = FIXTURES / "pg_dump-15.sql"
    script = (
        "import sys, shutil\n"
        "sys.stderr.write('pg_dump: warning: ' + 'x' * 200000 + '\\n')\n"
        "sys.stderr.flush()\n"
        f"shutil.copyfileobj(open({str(source)!r}, 'rb'), sys.stdout.buffer)\n"
    )
    made = dumps.take(POSTGRES, tmp_path, now=WHEN, popen=tool(script))
    assert gzip.decompress(made.path.read_bytes()) == source.read_bytes()
