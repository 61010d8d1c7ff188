"""The nvidia-smi test double: fixture bytes out, and fail closed on anything else."""

import json
import subprocess
import sys

from tests.conftest import REPO

ROLE_FILES = REPO / "roles" / "nvidia" / "files"
DOUBLE = ROLE_FILES / "nvidia-smi-double"
FIXTURES = ROLE_FILES / "fake-gpu" / "h100-healthy"


def smi(args, fixture_dir):
    return subprocess.run(
        [sys.executable, str(DOUBLE), *args],
        capture_output=True,
        check=False,
        env={"MEGAHOUR_FAKE_GPU_DIR": str(fixture_dir)},
    )


TEMPLATES = REPO / "roles" / "nvidia" / "templates" / "fake-gpu"
RENDER_TASKS = (REPO / "roles" / "nvidia" / "tasks" / "fake_gpu.yml").read_text()


def test_every_mapped_command_prints_its_fixture_byte_exact():
    commands = json.loads((FIXTURES / "commands.json").read_text())
    assert commands, "the fixture set maps no command"
    for args, entry in commands.items():
        if not (FIXTURES / entry["stdout"]).exists():
            # Rendered per node (as many GPUs as declared) by the nvidia role: from a template, or the -q
            # report cut from the real capture by the smi_report_first_gpus filter.
            rendered = (TEMPLATES / f"{entry['stdout']}.j2").exists() or entry["stdout"] in RENDER_TASKS
            assert rendered, f"{entry['stdout']} has no file, template or render task"
            continue
        proc = smi(args.split(" "), FIXTURES)
        assert proc.returncode == entry["rc"]
        assert proc.stdout == (FIXTURES / entry["stdout"]).read_bytes()


def test_fixture_keeps_real_spacing_and_units():
    row0 = (FIXTURES / "query-gpu-8xH100-row0.csv").read_text()
    header, row = row0.splitlines()
    assert "memory.total [MiB], " in header and "power.draw.average [W]" in header
    assert row.startswith("2024/03/15 13:57:59.791, 0, NVIDIA H100 80GB HBM3, 00000000:0A:00.0, 535.161.07, ")


def test_unknown_arguments_fail_instead_of_guessing():
    proc = smi(["-q", "-d", "MEMORY"], FIXTURES)
    assert proc.returncode != 0 and proc.stdout == b""
    assert b"no fixture for arguments '-q -d MEMORY'" in proc.stderr


def test_missing_fixture_directory_looks_like_a_missing_driver(tmp_path):
    proc = smi(["-L"], tmp_path / "absent")
    assert proc.returncode == 9
    assert b"couldn't communicate with the NVIDIA driver" in proc.stderr


def test_swapped_fixture_injects_a_fault(tmp_path):
    (tmp_path / "ecc.csv").write_text("0, 3, Enabled, Enabled\n")
    (tmp_path / "commands.json").write_text(json.dumps({"--probe": {"stdout": "ecc.csv", "rc": 0}}))
    assert smi(["--probe"], tmp_path).stdout == b"0, 3, Enabled, Enabled\n"


def test_gate_query_template_matches_the_gate_fields():
    from megahour.health.checks import GPU_FIELDS

    header = (TEMPLATES / "gate-query-gpu.csv.j2").read_text().splitlines()[0]
    assert len(header.split(", ")) == len(GPU_FIELDS)
    commands = json.loads((FIXTURES / "commands.json").read_text())
    assert commands[f"--query-gpu={','.join(GPU_FIELDS)} --format=csv"]["stdout"] == "gate-query-gpu.csv"


def test_doctor_query_template_answers_the_probe_with_real_cells():
    """The double answers the exact command the doctor's probe runs, with the VirtualClient cells."""
    import re

    from megahour.doctor import facts
    from megahour.doctor.transport import probe_path

    line = next(x for x in probe_path().read_text().splitlines() if x.startswith("section nvidia_smi "))
    args = line.split("nvidia-smi ", 1)[1]
    commands = json.loads((FIXTURES / "commands.json").read_text())
    assert commands[args]["stdout"] == "doctor-query-gpu.csv"
    template = (TEMPLATES / "doctor-query-gpu.csv.j2").read_text()
    header, row = template.splitlines()[0], template.splitlines()[2]
    assert header == "index, name, driver_version, memory.total [MiB]"
    assert args.split("--query-gpu=")[1].split(" ")[0].split(",") == facts.GPU_FIELDS
    real = (FIXTURES / "query-gpu-8xH100-row0.csv").read_text().splitlines()[1].split(", ")
    cells = row.split(", ")[1:]
    assert cells == [real[2], real[4], real[17]]  # name, driver_version, memory.total of the real row
    rendered = header + "\n" + re.sub(r"\{\{ i \}\}", "0", row) + "\n"
    gpus, error = facts.parse_gpus(rendered)
    assert error is None and gpus == [facts.Gpu("0", "NVIDIA H100 80GB HBM3", "535.161.07", 81559)]
