"""backup.plan: names, completeness, retention and the tools' argv (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.backup.plan import (
    BackupError,
    Dump,
    Target,
    dump_command,
    file_name,
    is_complete,
    newest,
    parse_file_name,
    rename_mariadb_database,
    restore_command,
    to_prune,
)

FIXTURES = Path(__file__).parent / "fixtures"
names = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=0))


@given(names, times)
def test_file_names_round_trip(name, taken):
    assert parse_file_name(file_name(name, taken)) == (name, taken)


@pytest.mark.parametrize(
    "name",
    [
        ".airflow-20261206T023000Z.sql.gz.1a2b3c.tmp",  # the atomic writer's temporary
        "airflow-20261206T023000Z.sql",
        "airflow.sql.gz",
        "notes.txt",
    ],
)
def test_other_files_are_not_dumps(name):
    assert parse_file_name(name) is None


@pytest.mark.parametrize(
    ("fixture", "kind"),
    [("mariadb-dump-10.11.sql", "mariadb"), ("pg_dump-15.sql", "postgresql")],
)
def test_the_real_tools_whole_dumps_are_complete_and_any_cut_is_not(fixture, kind):
    data = (FIXTURES / fixture).read_bytes()
    assert is_complete(kind, data)
    # Cut anywhere before the closing comment: never complete.
    marker = data.rindex(
        b"-- Dump completed" if kind == "mariadb" else b"-- PostgreSQL database dump complete"
    )
    for cut in range(0, marker, max(1, marker // 50)):
        assert not is_complete(kind, data[:cut])


def test_one_kind_s_closing_comment_does_not_complete_the_other():
    assert not is_complete("postgresql", (FIXTURES / "mariadb-dump-10.11.sql").read_bytes())
    assert not is_complete("mariadb", (FIXTURES / "pg_dump-15.sql").read_bytes())


def test_targets_refuse_bad_names_and_kinds():
    with pytest.raises(BackupError, match="rename it"):
        Target("Slurm Accounting", "mariadb", "slurm_acct_db")
    with pytest.raises(BackupError, match="kind 'mysql' is not one of mariadb, postgresql"):
        Target("x", "mysql", "db")
    with pytest.raises(BackupError, match="no database named"):
        Target("x", "mariadb", "")


def test_commands_carry_no_password_and_run_as_the_given_account():
    assert dump_command(Target("a", "postgresql", "airflow", "postgres")) == [
        "runuser",
        "-u",
        "postgres",
        "--",
        "pg_dump",
        "--format=plain",
        "--no-password",
        "--dbname=airflow",
    ]
    assert restore_command(Target("a", "mariadb", "slurm_acct_db"), socket="/tmp/m/mysqld.sock") == [
        "mariadb",
        "--batch",
        "--socket=/tmp/m/mysqld.sock",
    ]
    assert restore_command(Target("a", "postgresql", "airflow"), "copy") == [
        "psql",
        "--no-password",
        "--quiet",
        "--set=ON_ERROR_STOP=1",
        "--dbname=copy",
    ]


def dump(target: str, day: int) -> Dump:
    return Dump(target, datetime(2026, 12, day, tzinfo=UTC), Path(f"/d/{target}-{day}"))


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 28)), unique=True), st.integers(1, 5))
def test_pruning_keeps_the_newest_of_each_target(pairs, keep):
    dumps = [dump(t, d) for t, d in pairs]
    doomed = to_prune(dumps, keep)
    kept = [d for d in dumps if d not in doomed]
    for target in ("a", "b"):
        mine = sorted((d for d in dumps if d.target == target), key=lambda d: d.taken, reverse=True)
        assert [d for d in kept if d.target == target] == sorted(mine[:keep], key=dumps.index)
        if mine:
            assert newest(kept, target) == mine[0]


def test_keeping_none_is_refused():
    with pytest.raises(BackupError, match="keep at least 1"):
        to_prune([dump("a", 1)], 0)


def test_a_mariadb_dump_can_be_aimed_at_another_database():
    create = (
        b"CREATE DATABASE /*!32312 IF NOT EXISTS*/ `slurm_acct_db` "
        b"/*!40100 DEFAULT CHARACTER SET latin1 */;\n"
    )
    assert rename_mariadb_database(create, "slurm_acct_db", "copy") == create.replace(
        b"`slurm_acct_db`", b"`copy`"
    )
    assert rename_mariadb_database(b"USE `slurm_acct_db`;\n", "slurm_acct_db", "copy") == b"USE `copy`;\n"
    data = b"INSERT INTO `job_table` VALUES (1,'USE `slurm_acct_db`');\n"
    assert rename_mariadb_database(data, "slurm_acct_db", "copy") == data


def test_dump_dates_are_utc():
    taken = datetime(2026, 12, 6, 3, 30, tzinfo=UTC) + timedelta(hours=0)
    assert file_name("x", taken.astimezone()) == "x-20261206T033000Z.sql.gz"
