import json

from megahour.health import xid_history
from megahour.health.kernel_log import XidEvent

EVENT = XidEvent(94, "0000:0f:00", "Ch 00000008", 1)


def test_a_fault_seen_in_an_earlier_boot_is_remembered(tmp_path):
    path = tmp_path / "xid-history.json"
    xid_history.record(path, {}, "boot-a", [EVENT])
    history = xid_history.load(path)
    assert xid_history.earlier_boots(history, "boot-a") == set()  # same boot: not a recurrence
    assert xid_history.earlier_boots(history, "boot-b") == {("0000:0f:00", 94)}


def test_history_keeps_only_the_last_boots(tmp_path):
    path = tmp_path / "xid-history.json"
    for n in range(8):
        xid_history.record(path, xid_history.load(path), f"boot-{n}", [XidEvent(n, "0000:0f:00", "", 1)])
    kept = json.loads(path.read_text())
    assert list(kept) == [f"boot-{n}" for n in range(3, 8)]


def test_corrupt_history_is_ignored_not_fatal(tmp_path):
    path = tmp_path / "xid-history.json"
    path.write_text("{not json")
    assert xid_history.load(path) == {}
    path.write_text(json.dumps({"b": [["pci", "x"], "junk", ["0000:01:00", 79]]}))
    assert xid_history.load(path) == {"b": [("0000:01:00", 79)]}


def test_boot_id_falls_back_when_unreadable(tmp_path):
    assert xid_history.current_boot_id(tmp_path / "absent") == "unknown"
