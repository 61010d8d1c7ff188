"""`megahour train submit`: a job file becomes one sbatch call of the training template."""

from __future__ import annotations

import json
import subprocess

import pytest

from megahour.cli import main
from megahour.slurm.client import SlurmClient
from megahour.train.submit import JobFileError, parse_job

JOB = """\
name: wam-tiny
nodes: 2
ranks_per_node: 4
time: "02:00:00"
partition: gpu
manifest: s3://lab/manifests/wam.arrow
env: {NCCL_DEBUG: WARN}
sbatch: [--exclude=gpu-7]
train:
  preset: tiny
  steps: 200
  checkpoint_every: 20
  compile: true
  no_deterministic: false
  camera: [/camera/scene/image, /camera/wrist/image]
"""


def _submit(tmp_path, capsys, text: str, *extra: str) -> tuple[int, str, str]:
    path = tmp_path / "job.yml"
    path.write_text(text)
    code = main(["train", "submit", str(path), "--dry-run", "--json", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_job_file_renders_one_sbatch_call(tmp_path, capsys) -> None:
    code, out, _ = _submit(tmp_path, capsys, JOB, "--template", "/opt/t.sbatch")
    assert code == 0
    argv = json.loads(out)["argv"]
    assert argv == [
        "sbatch", "--parsable", "--job-name=wam-tiny", "--nodes=2", "--ntasks-per-node=4", "--time=02:00:00",
        "--partition=gpu", "--export=ALL,MEGAHOUR_TRAIN_MANIFEST=s3://lab/manifests/wam.arrow,NCCL_DEBUG=WARN",
        "--exclude=gpu-7", "/opt/t.sbatch",
        "--preset", "tiny", "--steps", "200", "--checkpoint-every", "20", "--compile",
        "--camera", "/camera/scene/image", "--camera", "/camera/wrist/image",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: 0\n", "nodes must be a whole number of nodes, 1 or more"),
        ("nodes: 2\nnode_count: 3\n", "unknown key 'node_count'"),
        ("nodes: 2\ntrain: {stepz: 3}\n", "train.stepz is not a `megahour train run` option"),
        ("nodes: 2\ntrain: {manifest: /x}\n", "name the manifest in the top-level manifest: key"),
        ("nodes: 2\ntrain: {log_dir: /x}\n", "train.log_dir is the job template's"),
        ("nodes: 2\ntrain: {compile: 1}\n", "train.compile is a switch: true or false"),
        ("nodes: 2\ntrain: {preset: huge}\n", "a train: value was refused by `megahour train run`"),
        ("nodes: 2\nenv: {A: 'x,y'}\n", "env A's value may not hold a comma"),
        ("nodes: 2\nsbatch: [exclusive]\n", "sbatch must be a list of sbatch options"),
        ("- nodes\n", "expected a mapping of job settings"),
        ("nodes: [2\n", "is not YAML"),
    ],
)
def test_a_bad_job_file_is_one_line_naming_the_key(tmp_path, capsys, text, message) -> None:
    code, _, err = _submit(tmp_path, capsys, text)
    assert code == 1
    assert message in err.strip().splitlines()[-1]


def test_a_missing_template_names_the_role(tmp_path, capsys) -> None:
    path = tmp_path / "job.yml"
    path.write_text("nodes: 1\n")
    assert main(["train", "submit", str(path), "--template", str(tmp_path / "none.sbatch")]) == 1
    assert "deploy the runtime role here, or pass --template" in capsys.readouterr().err


def test_submission_goes_through_the_slurm_adapter() -> None:
    calls = []

    def runner(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "4242;cluster\n", "")

    job = parse_job({"nodes": 1}, "job.yml")
    assert job.name == "megahour-train"
    assert SlurmClient(runner=runner).submit(["sbatch", "--parsable", "--nodes=1", "/t.sbatch"]) == "4242"
    with pytest.raises(ValueError, match="not an `sbatch --parsable` call"):
        SlurmClient(runner=runner).submit(["scancel", "1"])
    assert len(calls) == 1


def test_job_file_errors_are_value_errors() -> None:
    with pytest.raises(JobFileError):
        parse_job({"nodes": True}, "job.yml")
