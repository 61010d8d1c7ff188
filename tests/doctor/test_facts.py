"""The probe's output, parsed: real output of the real tools (fixtures/SOURCES.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from megahour.doctor import facts
from megahour.doctor.transport import probe_path

FIXTURES = Path(__file__).parent / "fixtures"
HOST = (FIXTURES / "probe-dev-host-debian12.txt").read_text()


def test_every_section_of_a_real_probe_run_is_parsed():
    f = facts.parse(HOST)
    assert f.unreadable == {}
    assert f.platform == "debian-12" and f.arch == "x86_64" and f.python[:2] == (3, 11)
    assert f.sections["nvidia_smi"].rc == facts.MISSING_COMMAND and f.gpus is None
    assert f.links["eth0"].up and not f.links["ifb0"].up
    assert f.links["lo"].up  # UNKNOWN with UP and LOWER_UP, as loopback and many virtual links report
    assert any(d.path == "/dev/vda" and d.mountpoint == "/" for d in f.block_devices)
    assert f.is_mount_point("/") and f.is_mount_point("/sys/fs/cgroup/pids")
    assert f.mount_of("/srv/megahour/train").target == "/"
    assert f.timesync is None  # timedatectl without systemd as PID 1: no values
    assert f.root_free_kib == 67152356
    assert f.paths == {"/srv/megahour": "missing", "/var/lib/megahour/nvme0": "missing", "/": "dir"}
    assert f.version is None and f.clock > 1.7e9


def test_nvidia_smi_rows_of_a_real_b200_capture():
    text = (FIXTURES / "nvidia-smi-doctor-b200x4.csv").read_text()
    gpus, error = facts.parse_gpus(text)
    assert error is None and len(gpus) == 4
    assert gpus[0] == facts.Gpu("0", "NVIDIA B200", "580.95.05", 183359)


def test_the_probe_runs_here_and_parses():
    """The shipped probe, run with this machine's tools: every section comes back."""
    out = subprocess.run(["sh", str(probe_path()), "/"], capture_output=True, text=True, check=True).stdout
    f = facts.parse(out)
    assert set(f.sections) == {
        "os_release", "arch", "python", "nvidia_smi", "ip_link", "lsblk", "findmnt",
        "timesync", "df", "rdma", "paths", "version", "clock",
    }  # fmt: skip
    assert f.unreadable == {} and f.paths == {"/": "dir"}


def test_a_section_that_does_not_parse_is_named_not_raised():
    broken = HOST.replace('"blockdevices": [', '"blockdevices": [[[', 1)
    f = facts.parse(broken)
    assert f.block_devices is None and "lsblk" in f.unreadable


def test_text_without_markers_is_no_sections():
    assert facts.parse("hello\nworld").sections == {}


@given(st.text(max_size=400))
def test_parse_never_raises(text):
    facts.parse(text)
    facts.parse("@@megahour-doctor ip_link rc=0\n" + text)
    facts.parse("@@megahour-doctor findmnt rc=0\n" + text)
    facts.parse("@@megahour-doctor nvidia_smi rc=0\n" + text)
