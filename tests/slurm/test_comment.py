from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from megahour.slurm.comment import HealthStamp, parse_stamp, stamps_from_show_node

SHOW_NODE = (
    "NodeName=gpu-1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
    "Comment=megahour-health:FAIL:ecc_volatile_uncorrected:1795962620 Extra=(null) "
    "Reason=megahour:x [root@t]\n"
    "NodeName=gpu-2 Arch=x86_64 State=IDLE Comment=(null) Extra=(null)\n"
    "NodeName=gpu-3 State=IDLE Comment=someone-else's-note\n"
)


def test_stamp_round_trip():
    stamp = HealthStamp("PASS", "ok", datetime(2026, 11, 29, 14, 0, tzinfo=UTC))
    assert stamp.render() == "megahour-health:PASS:ok:1795960800"
    assert parse_stamp(stamp.render()) == stamp


def test_only_our_stamps_are_read_from_show_node():
    stamps = stamps_from_show_node(SHOW_NODE)
    assert list(stamps) == ["gpu-1"]
    assert (stamps["gpu-1"].status, stamps["gpu-1"].reason) == ("FAIL", "ecc_volatile_uncorrected")


@given(st.text(max_size=200))
def test_parsing_never_raises(text):
    parse_stamp(text)
    stamps_from_show_node(text)
