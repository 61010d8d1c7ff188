"""DCGM diagnostic: real ``dcgmi diag -j`` outputs in, verdicts out; garbage never raises; no DCGM is a skip.

The fixtures in ``fixtures/dcgm/`` are copied byte-exact (SOURCES.md names each one). Tests that need a
shape no citable public capture shows (a failing GPU in 4.x or multi-GPU JSON, a failing 4.x test
summary) change one field of a real capture in the test and say so; nothing here is presented as
output it is not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.health import dcgm, probes
from megahour.health.probes import ProbeError
from megahour.health.verdict import Status, gate_passes

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
FRAGMENT_8GPU = "dcgmi-diag-4x-8gpu-diagnostic-test.fragment.txt"
VC_R2 = "dcgmi-diag-r2-3x-1gpu-pass.virtualclient.json"
VC_R3 = "dcgmi-diag-r3-3x-1gpu-pass.virtualclient.json"
NVVS_8GPU = "nvvs-3.1.0-8gpu-pass.dcgm-unit-test.json.txt"
TABLE_PASS = "dcgmi-diag-r2-4.4.2-1gpu-pass.table.txt"
TABLE_SUMMARY_FAIL = "dcgmi-diag-4.2.3-4gpu-pcie-summary-fail.table.txt"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def wrap_4x(test_object: str) -> str:
    """NVIDIA/DCGM#215 quotes one 4.x test object (8 GPUs); this wrapper is ours, the object is real."""
    body = test_object.strip().rstrip(",")
    return '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [' + body + "]}]}}"


def diagnostic_8gpu() -> dict:
    return json.loads(wrap_4x(read(FRAGMENT_8GPU)))


PASS_CELL = '"status" : "Pass"'


def gpu1_fails() -> str:
    """The wrapped real 8-GPU object, byte for byte, with ONE cell changed from the capture: the
    ``"status"`` of the result with ``"entity_id" : 1`` (GPU 1, which carries real ``info`` lines),
    ``"Pass"`` -> ``"Fail"``. No public 4.x JSON with a failing GPU has an identifiable source."""
    text = wrap_4x(read(FRAGMENT_8GPU))
    cell = text.index(PASS_CELL, text.index('"entity_id" : 1,'))
    changed = text[:cell] + '"status" : "Fail"' + text[cell + len(PASS_CELL) :]
    expected = diagnostic_8gpu()  # the same change made on the decoded capture: nothing else differs
    expected["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][1]["status"] = "Fail"
    assert json.loads(changed) == expected
    return changed


def test_4x_gpu_failure_names_the_test_and_the_gpu():
    # gpu1_fails(): the real 8-GPU capture with GPU 1's status cell changed from "Pass" to "Fail".
    result = dcgm.parse_diag_json(gpu1_fails())
    assert result.errors == ()
    *entries, summary = result.tests
    assert len(entries) == 8
    failing = [e for e in result.tests if e.status == "Fail"]
    assert [(e.category, e.test, e.gpu_id, e.entity, e.entity_id) for e in failing] == [
        ("Hardware", "diagnostic", "1", "GPU", "1")
    ]
    assert "GPU 1 calculated at approximately 859.08 gigaflops" in failing[0].detail
    assert summary.summary and summary.gpu_id is None and summary.status == "Pass"  # as captured

    verdict = dcgm.verdict(result, 226, "")
    assert verdict.status is Status.FAIL
    assert verdict.reason == "dcgm_diag_failed"
    assert verdict.message.startswith("diagnostic failed on GPU 1: Allocated space for 138 output")
    assert verdict.evidence["failed_gpus"] == ["1"]
    assert [(f["test"], f["gpu"], f["where"]) for f in verdict.evidence["failing"]] == [
        ("diagnostic", "1", "GPU 1")
    ]
    assert verdict.evidence["isolate"] is False
    assert verdict.evidence["returncode"] == 226
    assert verdict.evidence["returncode_name"] == "DCGM_ST_NVVS_ERROR"
    assert verdict.evidence["results"] == 8
    assert not gate_passes([verdict])
    # The results decide: the same document with exit status 0 still fails.
    assert dcgm.verdict(result, 0, "").evidence["failed_gpus"] == ["1"]


def test_4x_summary_repeating_a_gpu_failure_is_not_listed_twice():
    # gpu1_fails() (GPU 1's status cell changed to "Fail") plus a second change to the real capture:
    # the test_summary's status "Pass" -> "Fail", so the summary repeats the GPU's failure.
    doc = json.loads(gpu1_fails())
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["test_summary"]["status"] = "Fail"
    result = dcgm.parse_diag_json(json.dumps(doc))
    assert [e.summary for e in result.tests if e.status == "Fail"] == [False, True]
    verdict = dcgm.verdict(result, 226, "")
    assert verdict.status is Status.FAIL
    assert verdict.message.startswith("diagnostic failed on GPU 1")
    assert "more" not in verdict.message
    assert [(f["test"], f["gpu"]) for f in verdict.evidence["failing"]] == [("diagnostic", "1")]


def test_4x_every_gpu_result_is_counted():
    result = dcgm.parse_diag_json(wrap_4x(read(FRAGMENT_8GPU)))
    assert result.errors == ()
    entries = [e for e in result.tests if not e.summary]
    assert [e.gpu_id for e in entries] == [str(gpu) for gpu in range(8)]
    assert {e.status for e in result.tests} == {"Pass"}
    assert "GPU 1 calculated at approximately 859.08 gigaflops" in entries[1].detail
    verdict = dcgm.verdict(result, 0, "")
    assert verdict.status is Status.PASS and verdict.reason == "ok"
    assert verdict.evidence["results"] == 8


@pytest.mark.parametrize("failing", [[6], [7], [2, 5]])
def test_a_failure_on_any_gpu_of_eight_fails_and_is_named(failing):
    # No public 4.x capture shows a multi-GPU failure: the real 8-GPU test object with the status
    # of the listed GPUs changed to "Fail" (GPU 0 still passes, so results[0] alone would pass).
    doc = diagnostic_8gpu()
    results = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]
    for gpu in failing:
        results[gpu]["status"] = "Fail"
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 226, "")
    assert verdict.status is Status.FAIL
    assert verdict.evidence["failed_gpus"] == [str(gpu) for gpu in failing]
    assert f"diagnostic failed on GPU {failing[0]}" in verdict.message
    assert [f["gpu"] for f in verdict.evidence["failing"]] == [str(gpu) for gpu in failing]


def test_4x_test_summary_failure_with_every_gpu_passing_fails():
    # NVIDIA/DCGM#253 (the table fixture) shows pcie "Fail" above four "GPUx: Pass" lines: the error
    # has no entity, so only the test summary carries it. Its JSON is not public, so the real 8-GPU
    # object gets a failing summary with that table's warning text.
    doc = diagnostic_8gpu()
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    test["test_summary"] = {
        "status": "Fail",
        "warnings": [{"warning": "There was an internal error during the test: 'A child process (152)"}],
    }
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 226, "")
    assert verdict.status is Status.FAIL
    assert verdict.message.startswith("diagnostic failed on test summary: There was an internal error")
    assert verdict.evidence["failed_gpus"] == []


def test_3x_gpu_ids_results_with_info_pass():
    for name, count in ((VC_R2, 11), (VC_R3, 16)):
        result = dcgm.parse_diag_json(read(name))
        assert result.errors == ()
        assert len(result.tests) == count
        deployment = [e for e in result.tests if e.category == "Deployment"]
        assert deployment and all(e.gpu_id is None for e in deployment)  # no id in those results
        assert all(e.gpu_id == "0" for e in result.tests if e.category != "Deployment")
        verdict = dcgm.verdict(result, 0, "")
        assert verdict.status is Status.PASS
    eud = next(e for e in dcgm.parse_diag_json(read(VC_R3)).tests if e.test == "EUD Test")
    assert eud.status == "Skip"
    assert "1 skipped" in dcgm.verdict(dcgm.parse_diag_json(read(VC_R3)), 0, "").message
    pcie = next(e for e in dcgm.parse_diag_json(read(VC_R2)).tests if e.test == "PCIe")
    assert "GPU to Host bandwidth" in pcie.detail


def test_nvvs_output_nulls_numbers_comma_lists_and_a_preamble():
    result = dcgm.parse_diag_json(read(NVVS_8GPU))
    assert result.errors == ()
    assert result.version == "3.1.0"
    assert result.notes == ("WARNING: THIS SHOULD NOT HAPPEN",)
    assert len(result.tests) == 17  # 9 deployment tests (null holes skipped) + 8 per-GPU results
    assert {e.status for e in result.tests} == {"Pass"}  # "PASS" normalised
    assert result.tests[0].gpu_id == "0,1,2,3,4,5,6,7"
    assert [e.gpu_id for e in result.tests if e.test == "software"] == [str(gpu) for gpu in range(8)]
    assert dcgm.verdict(result, 0, "").status is Status.PASS


def test_3x_failure_on_the_sixth_gpu_fails():
    # The real NVVS 8-GPU output with GPU 5's "software" result changed to FAIL.
    text = read(NVVS_8GPU)
    doc = json.loads(text[text.index("{") :])
    custom = doc["DCGM GPU Diagnostic"]["test_categories"][1]
    custom["tests"][0]["results"][5]["status"] = "FAIL"
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 226, "")
    assert verdict.status is Status.FAIL
    assert verdict.evidence["failed_gpus"] == ["5"]
    assert verdict.message == "software failed on GPU 5"


@pytest.mark.parametrize("name", [TABLE_PASS, TABLE_SUMMARY_FAIL])
def test_a_text_table_is_never_a_pass(name):
    # dcgmi without -j: the real tables read UNKNOWN, so a passing table cannot pass the gate unread.
    result = dcgm.parse_diag_json(read(name))
    assert result.tests == ()
    assert "Successfully ran diagnostic for group." in result.notes
    for returncode in (0, 226):
        verdict = dcgm.verdict(result, returncode, "")
        assert verdict.status is Status.UNKNOWN
        assert verdict.reason == "dcgm_diag_unparseable"


def test_truncated_output_is_unknown_not_a_pass():
    text = gpu1_fails()  # a failing document cut short must not pass either
    for cut in (len(text) // 2, len(text) - 3):
        verdict = dcgm.verdict(dcgm.parse_diag_json(text[:cut]), 0, "")
        assert verdict.status is Status.UNKNOWN and verdict.reason == "dcgm_diag_unparseable"
    # --iterations output cut inside its second run: the first, complete, run alone must not pass.
    run = read(VC_R3).strip()
    both = '{"iterations": [' + run + ",\n" + run + '], "Overall Result": "Pass"}'
    assert len(dcgm.parse_diag_json(both).tests) == 32
    assert dcgm.verdict(dcgm.parse_diag_json(both), 0, "").status is Status.PASS
    cut = dcgm.parse_diag_json(both[: len(both) - 400])
    assert cut.errors == ("the diagnostic JSON is truncated",)
    assert dcgm.verdict(cut, 0, "").status is Status.UNKNOWN


def test_exit_205_isolate_fails_even_when_no_result_reads_fail():
    verdict = dcgm.verdict(dcgm.parse_diag_json(read(VC_R3)), 205, "")
    assert verdict.status is Status.FAIL
    assert verdict.reason == "dcgm_diag_failed"
    assert verdict.evidence["isolate"] is True
    # gpu1_fails(): the real 8-GPU capture with GPU 1's status cell changed to "Fail".
    with_failure = dcgm.verdict(dcgm.parse_diag_json(gpu1_fails()), 205, "")
    assert with_failure.status is Status.FAIL and with_failure.reason == "dcgm_diag_failed"
    assert with_failure.evidence["isolate"] is True
    assert with_failure.evidence["returncode_name"] == "DCGM_ST_NVVS_ISOLATE_ERROR"
    assert with_failure.evidence["failed_gpus"] == ["1"]
    assert with_failure.message.startswith("diagnostic failed on GPU 1")


def test_exit_226_with_nothing_failing_is_a_warning():
    verdict = dcgm.verdict(dcgm.parse_diag_json(read(VC_R3)), 226, "")
    assert verdict.status is Status.WARN
    assert verdict.reason == "dcgm_diag_warning"
    assert "226 (DCGM_ST_NVVS_ERROR)" in verdict.message


def test_a_warn_status_is_a_warning():
    # dcgmi -j prints a DCGM warning as "Fail"; "Warn" comes from NVVS-level JSON. The real 8-GPU
    # object with GPU 3's status changed to "Warn".
    doc = diagnostic_8gpu()
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][3]["status"] = "Warn"
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 0, "")
    assert verdict.status is Status.WARN and verdict.reason == "dcgm_diag_warning"
    assert "GPU 3" in verdict.message
    assert gate_passes([verdict])


def test_an_unknown_status_word_is_not_a_pass():
    doc = diagnostic_8gpu()
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][4]["status"] = "Inconclusive"
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 0, "")
    assert verdict.status is Status.UNKNOWN and verdict.reason == "dcgm_diag_unparseable"
    assert "Inconclusive" in verdict.message


# The failure document is HelperDisplayFailureMessage's shape in dcgmi/Diag.cpp (NVIDIA/DCGM); the
# message follows that function's format string. Not a capture.
RUNTIME_ERROR = json.dumps(
    {
        "DCGM Diagnostic": {
            "runtime_error": "Error: Unable to complete diagnostic. Return: (-39) : "
            "A diag instance is already running, cannot run a new diag until the current one finishes\n",
            "version": "4.5.0",
        }
    },
    indent="\t",
)


@pytest.mark.parametrize(
    ("returncode", "status", "reason"),
    [
        (217, Status.WARN, "dcgm_diag_busy"),  # -39 DCGM_ST_DIAG_ALREADY_RUNNING
        (202, Status.WARN, "dcgm_diag_busy"),  # -54 DCGM_ST_PAUSED
        (245, Status.UNKNOWN, "dcgm_diag_error"),  # -11 DCGM_ST_TIMEOUT
        (203, Status.UNKNOWN, "dcgm_diag_error"),  # -53 DCGM_ST_NVVS_KILLED
        (0, Status.UNKNOWN, "dcgm_diag_error"),  # a failure document is never a pass
    ],
)
def test_a_diagnostic_that_did_not_complete(returncode, status, reason):
    result = dcgm.parse_diag_json(RUNTIME_ERROR)
    assert result.tests == () and "already running" in (result.runtime_error or "")
    verdict = dcgm.verdict(result, returncode, "")
    assert (verdict.status, verdict.reason) == (status, reason)


def test_exit_codes_without_output():
    empty = dcgm.parse_diag_json("")
    assert dcgm.verdict(empty, 0, "").reason == "dcgm_diag_unparseable"
    killed = dcgm.verdict(empty, -9, "")
    assert (killed.status, killed.reason) == (Status.UNKNOWN, "dcgm_diag_error")
    assert "killed by signal 9" in killed.message
    no_nvvs = dcgm.verdict(empty, 204, "")  # -52 DCGM_ST_NVVS_BINARY_NOT_FOUND
    assert (no_nvvs.status, no_nvvs.reason) == (Status.WARN, "dcgm_absent")
    assert dcgm.verdict(empty, 235, "").reason == "dcgm_unreachable"  # -21 connection not valid


# dcgmi's words when no host engine answers, from dcgmi/Command.cpp and dcgmi/Diag.cpp's format
# strings and errorString(DCGM_ST_CONNECTION_NOT_VALID); not captures.
WITH_HOST = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)
NO_EMBEDDED = "Error: Unable to start an embedded host engine. DCGM initialization error.\n"


@pytest.mark.parametrize(("stdout", "returncode"), [(WITH_HOST, 235), (NO_EMBEDDED, 249)])
def test_no_host_engine_is_a_visible_skip(stdout, returncode):
    verdict = dcgm.verdict(dcgm.parse_diag_json(stdout), returncode, "")
    assert (verdict.status, verdict.reason) == (Status.WARN, "dcgm_unreachable")
    assert verdict.message.startswith("DCGM diagnostic skipped")
    assert verdict.evidence["skipped"] is True
    assert gate_passes([verdict])  # visible, never a drain


def test_absent_verdict_is_a_warning_skip():
    verdict = dcgm.absent_verdict("dcgmi is not installed")
    assert (verdict.check, verdict.status, verdict.reason) == ("dcgm_diag", Status.WARN, "dcgm_absent")
    assert gate_passes([verdict])


def fake_runner(returncode: int, stdout: str, stderr: str = ""):
    calls: list[tuple[list[str], float]] = []

    def runner(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        calls.append((cmd, timeout))
        return returncode, stdout, stderr

    return runner, calls


def test_run_passes_the_command_and_budget_and_judges_the_output():
    # gpu1_fails(): the real 8-GPU capture with GPU 1's status cell changed to "Fail".
    runner, calls = fake_runner(226, gpu1_fails())
    verdict = dcgm.run(90.0, runner)
    assert calls == [(["dcgmi", "diag", "-r", "1", "-j"], 90.0)]
    assert verdict.status is Status.FAIL and verdict.evidence["failed_gpus"] == ["1"]
    assert verdict.evidence["returncode"] == 226
    runner, _ = fake_runner(0, read(VC_R3))
    assert dcgm.run(90.0, runner).status is Status.PASS


def test_run_without_dcgmi_is_absent():
    # probes.run_any itself, on a binary that does not exist: the path a node without DCGM takes.
    def runner(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        return probes.run_any(["/nonexistent/megahour-test/dcgmi", *cmd[1:]], timeout)

    verdict = dcgm.run(5.0, runner)
    assert (verdict.status, verdict.reason) == (Status.WARN, "dcgm_absent")
    assert gate_passes([verdict])


def test_run_timeout_is_unknown():
    # probes.run_any itself, on a command that outlives its budget.
    def runner(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        return probes.run_any(["sleep", "5"], timeout)

    verdict = dcgm.run(0.2, runner)
    assert (verdict.status, verdict.reason) == (Status.UNKNOWN, "probe_timeout")
    assert not gate_passes([verdict])


def test_run_unreachable_and_other_runner_errors():
    runner, _ = fake_runner(235, WITH_HOST)
    assert dcgm.run(30.0, runner).reason == "dcgm_unreachable"

    def denied(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        raise PermissionError(13, "Permission denied", cmd[0])

    refused = dcgm.run(30.0, denied)
    assert (refused.status, refused.reason) == (Status.UNKNOWN, "dcgm_diag_error")

    def other(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        raise ProbeError("gpu_query_failed", "something else")

    assert dcgm.run(30.0, other).status is Status.UNKNOWN


def test_verdicts_serialise():
    for verdict in (
        dcgm.verdict(dcgm.parse_diag_json(gpu1_fails()), 226, ""),  # GPU 1's status changed to Fail
        dcgm.verdict(dcgm.parse_diag_json(read(VC_R3)), 0, ""),
        dcgm.absent_verdict("no dcgmi"),
    ):
        assert json.loads(json.dumps(verdict.to_dict()))["check"] == "dcgm_diag"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(
    ["DCGM Diagnostic", "DCGM GPU Diagnostic", "test_categories", "category", "tests", "name", "results",
     "status", "gpu_id", "gpu_ids", "entity_group", "entity_id", "warnings", "info", "test_summary",
     "runtime_error", "iterations", "Overall Result", "version"]
)  # fmt: skip
SHAPED = st.recursive(
    st.none() | st.integers() | st.sampled_from(["Pass", "Fail", "Warn", "Skip", "Not Run", "", "GPU"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=40,
)


@given(text=st.text(max_size=400), returncode=st.integers(-64, 300))
def test_parser_and_verdict_never_raise_on_text(text, returncode):
    result = dcgm.parse_diag_json(text)
    assert dcgm.verdict(result, returncode, text).status in set(Status)


@given(value=JSON | SHAPED, prefix=st.sampled_from(["", "Successfully ran diagnostic for group.\n", "{"]))
def test_parser_never_raises_on_json_of_any_shape(value, prefix):
    for doc in (value, {"DCGM Diagnostic": value}, {"DCGM GPU Diagnostic": {"test_categories": value}}):
        result = dcgm.parse_diag_json(prefix + json.dumps(doc))
        verdict = dcgm.verdict(result, 0, "")
        if not result.tests:
            assert verdict.status is not Status.PASS  # nothing read is never a pass


def test_parser_survives_deep_nesting_and_odd_input():
    for text in ("[" * 100_000, "{" * 100_000, '{"DCGM Diagnostic": ' * 5000, "\x00\ufffd", "{}" * 1000):
        assert dcgm.verdict(dcgm.parse_diag_json(text), 0, "").status is Status.UNKNOWN
    assert dcgm.parse_diag_json(None).errors  # type: ignore[arg-type]
    odd_ids = [{"gpu_id": gpu, "status": "Fail"} for gpu in ("\u00b2", "9" * 5000, "10", "2", None)]
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [{"category": "c", "tests": [{"name": "t", "results": odd_ids}]}]
        }
    }
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 226, "")
    assert verdict.evidence["failed_gpus"][:2] == ["2", "10"]


@settings(max_examples=60)
@given(statuses=st.lists(st.sampled_from(["Pass", "Fail", "Skip", "Warn"]), min_size=1, max_size=16))
def test_every_result_entry_decides(statuses):
    # The real 8-GPU object's result list, grown or shrunk to len(statuses) GPUs with those statuses.
    doc = diagnostic_8gpu()
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    template = test["results"][-1]
    test["results"] = [dict(template, entity_id=gpu, status=status) for gpu, status in enumerate(statuses)]
    verdict = dcgm.verdict(dcgm.parse_diag_json(json.dumps(doc)), 0, "")
    expected = Status.FAIL if "Fail" in statuses else Status.WARN if "Warn" in statuses else Status.PASS
    assert verdict.status is expected
    if expected is Status.FAIL:
        assert verdict.evidence["failed_gpus"] == [str(g) for g, s in enumerate(statuses) if s == "Fail"]
    assert verdict.evidence["results"] == len(statuses)
