"""roles/nvidia/filter_plugins/fake_smi.py: the double's -q report is a real capture's first GPUs, no more."""

import pytest
from ansible.errors import AnsibleFilterError

from megahour.nvidia.smi_report import parse
from tests.conftest import REPO, filter_plugins

CAPTURE = (REPO / "roles/nvidia/files/fake-gpu/h100-healthy/smi-q-8xH100.txt").read_text()
first_gpus = filter_plugins(REPO / "roles/nvidia/filter_plugins/fake_smi.py")["smi_report_first_gpus"]


@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_the_first_gpus_of_the_capture_read_as_a_whole_report(count):
    cut = first_gpus(CAPTURE, count)
    report, whole = parse(cut), parse(CAPTURE)
    assert report.gpus == whole.gpus[:count] and report.driver_version == whole.driver_version
    # Every line but the count is the capture's own, in its order.
    assert CAPTURE.startswith(
        cut.replace(
            f"Attached GPUs                             : {count}\n",
            "Attached GPUs                             : 8\n",
        ).rstrip("\n")
    )
    assert cut.endswith("\n") and not cut.endswith("\n\n")


def test_all_eight_is_the_capture_byte_for_byte():
    assert first_gpus(CAPTURE, 8) == CAPTURE


@pytest.mark.parametrize("count", [0, 9])
def test_more_gpus_than_captured_or_none_is_refused(count):
    with pytest.raises(AnsibleFilterError, match="declare at most that many"):
        first_gpus(CAPTURE, count)


def test_a_cut_report_is_refused_as_input():
    with pytest.raises(AnsibleFilterError, match="not a whole"):
        first_gpus(first_gpus(CAPTURE, 2).replace(": 2\n", ": 3\n", 1), 1)
