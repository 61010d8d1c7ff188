"""The parsers and gates on real driver and nvidia-smi text collected from public reports.

fixtures/corpus/index.json says, per file, where it came from and what a careful reader sees in it
(``expect``), written down independently of the parser. A parser that finds less than that fails here.
"""

import json
from pathlib import Path

import pytest

from megahour.health import checks, kernel_log, smi
from megahour.health.checks import Expectations
from megahour.health.verdict import Status

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
INDEX = json.loads((CORPUS / "index.json").read_text())
KERNEL = [e for e in INDEX if e["kind"] == "kernel"]
SMI = [e for e in INDEX if e["kind"] == "smi-csv"]
NODE = Expectations(gpu_count=1)


def _lines(name: str) -> list[str]:
    return (CORPUS / name).read_text().splitlines()


def test_the_corpus_is_big_enough_and_every_file_is_listed_with_its_source():
    assert {e["file"] for e in INDEX} == {p.name for p in CORPUS.iterdir()} - {"index.json", "SOURCES.md"}
    assert sum(e["lines"] for e in INDEX) >= 40
    assert all(e["source"].startswith("https://") for e in INDEX)
    for entry in INDEX:
        assert len(_lines(entry["file"])) == entry["lines"], entry["file"]


@pytest.mark.parametrize("entry", KERNEL, ids=lambda e: e["file"])
def test_every_xid_line_becomes_an_event(entry):
    expect = entry["expect"]
    events = kernel_log.parse(_lines(entry["file"]))
    xids = [
        [e.xid, e.pci, int(e.gpu_instance) if e.gpu_instance is not None else None]
        for e in events
        if e.kind == "xid"
    ]
    # Xid 79 and its plain "fallen off the bus" twin count once per GPU, so 79s are compared as lost GPUs.
    assert [x for x in xids if x[0] != 79] == [x for x in expect["xids"] if x[0] != 79]
    lost = {e.pci for e in events if e.xid == kernel_log.FALLEN_OFF_BUS}
    assert set(expect["fallen_off_bus"]) | {x[1] for x in expect["xids"] if x[0] == 79} == lost
    reset = [e for e in events if e.kind == "reset_required"]
    assert len(reset) == expect["reset_required_lines"] + len(expect["reset_required"])
    inits = sorted({e.pci for e in events if e.kind == "init_failed"})
    assert inits == sorted(set(expect.get("rminitadapter_failed", [])))
    loads = [line for line in _lines(entry["file"]) if kernel_log.WATERMARK.search(line)]
    assert len(loads) == expect["driver_loads"]


def test_no_line_naming_an_xid_is_left_unread():
    for entry in KERNEL:
        lines = _lines(entry["file"])
        read = {e.line_number for e in kernel_log.parse(lines) if e.kind == "xid"}
        unread = [n for n, line in enumerate(lines, 1) if "NVRM: Xid (" in line and n not in read]
        assert not unread, (entry["file"], unread)


def _xid(name: str, earlier=None):
    return checks.xid(_lines(name), NODE, earlier_boots=earlier)


@pytest.mark.parametrize(
    ("name", "status", "reason"),
    [
        # A GPU lost during the driver's probe, reported just before the driver's banner.
        ("kernel-nvsentinel155-fallen-off-bus-then-load.log", Status.FAIL, "xid_restart_bm"),
        ("kernel-bumblebee554-gpu-at-fallen-off-bus.log", Status.FAIL, "xid_restart_bm"),
        ("kernel-popos3363-journal-xid79.log", Status.FAIL, "xid_restart_bm"),
        # Xid 45 alone: routine channel teardown, never a drain.
        ("kernel-ogkm1150-xid45-caused-by-previous.log", Status.PASS, "ok"),
        # 31 and its 45s, with a 62 among them: the 62 decides.
        ("kernel-chia301-xid31-62-45.log", Status.FAIL, "xid_reset_gpu"),
        ("kernel-dra982-nv-err-reset-required.log", Status.FAIL, "gpu_reset_required"),
        ("kernel-ogkm789-rminitadapter-gsp.log", Status.FAIL, "gpu_init_failed"),
        # A GPU that failed to initialise, and a DBE with its remap failure on another: both need a reset.
        ("kernel-gpuoperator1146-syslog-xid48-64-rminit.log", Status.FAIL, "gpu_init_failed"),
        ("kernel-vllm40652-xid119-domain0001.log", Status.FAIL, "xid_reset_gpu"),
        ("kernel-ogkm829-journal-xid120.log", Status.FAIL, "xid_reset_gpu"),
        ("kernel-gpud-xid119-gsp-rpc-timeout.log", Status.FAIL, "xid_reset_gpu"),
        ("kernel-akash244-dmesg-T-xid43-31-94.log", Status.WARN, "xid_restart_app"),
        ("kernel-gpud-dmesg-decode-iso-xid13-43.log", Status.WARN, "xid_restart_app"),
        ("kernel-dra904-xid43-gh200.log", Status.PASS, "ok"),  # 43: IGNORE
        ("kernel-ogkm446-talos-xid154-reset-required.log", Status.PASS, "ok"),  # the recovery check's
        ("kernel-nvidiadoc-mig-xid94-example.log", Status.WARN, "xid_restart_app"),
    ],
)
def test_real_logs_get_the_catalogs_verdict(name, status, reason):
    verdict = _xid(name)
    assert (verdict.status, verdict.reason) == (status, reason), verdict


def test_mig_attributed_xids_keep_their_gpu_instance():
    verdict = _xid("kernel-nvidiadoc-mig-xid94-example.log")
    assert (verdict.evidence["xid"], verdict.evidence["pci"], verdict.evidence["gpu_instance"]) == (
        94,
        "0000:01:00",
        "05",
    )


def test_the_recovery_action_check_reads_154_reset_required():
    verdict = checks.recovery_action(_lines("kernel-ogkm446-talos-xid154-reset-required.log"))
    assert verdict.reason == "gpu_recovery_action" and "GPU Reset Required" in verdict.message


def test_application_xids_do_not_escalate_across_reboots_but_hardware_ones_do():
    akash = "kernel-akash244-dmesg-T-xid43-31-94.log"
    earlier = {(e.pci, e.xid) for e in kernel_log.parse(_lines(akash))}
    assert _xid(akash, earlier).reason == "xid_restart_app"
    vllm = "kernel-vllm40652-xid119-domain0001.log"
    assert _xid(vllm, {("0001:6c:00", 119)}).reason == "xid_recurring"


def test_a_driver_reload_clears_xids_but_not_a_lost_gpu():
    lost = _lines("kernel-nvsentinel155-fallen-off-bus-then-load.log")
    reload = [line for line in _lines("kernel-gpud-kmsg-priority-driver-reload.log") if "loading" in line]
    assert reload, "the fixture holds the driver's load banner"
    # A later reload does not bring the GPU back ...
    assert checks.xid(lost + reload, NODE).reason == "xid_restart_bm"
    # ... but an Xid from before it is history.
    reset_gpu = _lines("kernel-vllm40652-xid119-domain0001.log")
    assert checks.xid(reset_gpu + reload, NODE).status is Status.PASS


def _real_row(name: str, fields: list[str]) -> smi.CsvResult:
    """The named columns of a real wide ``--query-gpu`` capture, as the gate's own query would print them."""
    text = (CORPUS / name).read_text()
    header = [c.strip() for c in text.splitlines()[0].split(",")]
    full = smi.parse_query_csv(text, header)
    assert full.errors == [] and full.rows
    return smi.CsvResult(rows=[{f: row[f] for f in fields} for row in full.rows])


def test_a_real_h100_passes_the_gates_and_its_mig_twin_warns_on_memory_repair():
    h100 = Expectations(gpu_count=1, product_name="NVIDIA H100 80GB HBM3")
    gpus = _real_row("smi-exporter-h100-query-gpu-idle.csv", checks.GPU_FIELDS)
    assert checks.gpu_inventory(gpus, h100).status is Status.PASS
    assert checks.ecc(gpus, h100, uptime_s=3600).status is Status.PASS
    remap = _real_row(
        "smi-exporter-h100-query-gpu-idle.csv", ["remapped_rows.pending", "remapped_rows.failure"]
    )
    assert checks.memory_repair(remap).status is Status.PASS
    # MIG enabled: remapped rows and retired pages both read [N/A]. Visible, not a drain.
    mig = "smi-exporter-h100-mig-query-gpu-idle.csv"
    remap = _real_row(mig, ["remapped_rows.pending", "remapped_rows.failure"])
    retired = _real_row(mig, checks.RETIRED_FIELDS)
    verdict = checks.memory_repair(remap, retired)
    assert (verdict.status, verdict.reason) == (Status.WARN, "memory_repair_unavailable")


def test_a_card_without_ecc_fails_the_ecc_gate():
    gpus = _real_row("smi-exporter-rtx2080s-query-gpu-idle.csv", checks.GPU_FIELDS)
    verdict = checks.ecc(gpus, Expectations(gpu_count=1, require_persistence=False))
    assert (verdict.status, verdict.reason) == (Status.FAIL, "ecc_mode_disabled")
    assert checks.ecc(gpus, Expectations(gpu_count=1)).reason == "persistence_mode_off"


@pytest.mark.parametrize("entry", SMI, ids=lambda e: e["file"])
def test_smi_captures_parse_and_unavailable_cells_read_as_none(entry):
    text = (CORPUS / entry["file"]).read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    if entry["expect"]["header"] is None:
        fields = [f"c{i}" for i in range(len(lines[0].split(",")))]
        result = smi.parse_query_csv(text, fields, header=False)
    else:
        fields = [c.strip() for c in lines[0].split(",")]
        result = smi.parse_query_csv(text, fields)
    assert result.errors == [] and len(result.rows) == entry["expect"]["rows"]
    cells = [cell for row in result.rows for cell in row.values()]
    for token in ("[N/A]", "[Not Supported]", "[Unknown Error]", "N/A"):
        for cell in cells:
            if cell == token:
                assert smi.is_unavailable(cell) and smi.as_number(cell) is None and smi.as_flag(cell) is None
    assert all(smi.as_number(c) is not None for c in cells if c.endswith((" MiB", " W", " %", " MHz")))
