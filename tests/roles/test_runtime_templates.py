"""The runtime role's sbatch template, rendered by ansible-playbook here and run with stub commands."""

import os
import subprocess

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_runtime.yml"


@pytest.fixture
def render(run_playbook, tmp_path):
    inventory = {
        "all": {
            "hosts": {
                "ctl": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                },
                "gpu-1": {"megahour_gpu": {"count": 4}},
            },
            "children": {"compute": {"hosts": {"gpu-1": {}}}},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))

    def _render(**extra):
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        run_playbook(PLAYBOOK, tmp_path / "hosts.yml", {"out": str(out), **extra})
        return out / "megahour-train.sbatch"

    return _render


MEGAHOUR_STUB = r"""#!/bin/bash
# `megahour run [options] -- cmd...` runs cmd; other commands record their arguments and environment.
if [[ $1 == run ]]; then
  printf '%s\n' "$@" > "$OUT/run-args"
  while [[ $1 != -- ]]; do shift; done
  shift
  exec "$@"
fi
printf '%s\n' "$@" > "$OUT/$1-args"
env > "$OUT/$1-env"
"""


def _run_with_stubs(script, tmp_path, job_id="1234", extra_env=None):
    """Run the job script with scontrol, srun and megahour replaced by stubs that record what they got."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "scontrol").write_text("#!/bin/sh\necho node-a; echo node-b\n")
    # srun runs its command as the first task would, with the variables a real step gives it
    (stubs / "srun").write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@" >> "$OUT/srun-calls"\n'
        'while [[ "$1" == --* ]]; do shift; done\n'
        'SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=4 exec "$@"\n'
    )
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "megahour").write_text(MEGAHOUR_STUB)
    for f in (stubs / "scontrol", stubs / "srun", venv / "megahour"):
        f.chmod(0o755)
    out = tmp_path / "recorded"
    out.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        PATH=f"{stubs}:{os.environ['PATH']}",
        SLURM_JOB_ID=job_id,
        SLURM_JOB_NODELIST="node-[a-b]",
        SLURM_NNODES="2",
        SLURM_NTASKS_PER_NODE="2",
        OUT=str(out),
        **(extra_env or {}),
    )
    proc = subprocess.run(
        ["bash", str(script), "--steps", "5", "--strategy", "per_node"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def _env(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_job_script_runs_each_rank_under_megahour_run(render, tmp_path):
    root = tmp_path / "train root"  # a space: paths must be quoted
    script = render(runtime_train_root=str(root), runtime_venv=str(tmp_path / "venv"))
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert (
        "#SBATCH --ntasks-per-node=4" in script.read_text()
    )  # the compute group's GPUs, not the controller's
    out, stdout = _run_with_stubs(script, tmp_path)
    wrapper = (out / "run-args").read_text().splitlines()
    assert wrapper[: wrapper.index("--")] == [
        "run", "--requeue-if-unfit", "--max-restarts", "3", "--requeue-exit", "85",
        "--checkpoint-dir", f"{root}/1234/checkpoints",
    ]  # fmt: skip
    assert (
        "--kill-on-bad-exit=1" in wrapper and "--ntasks-per-node=2" in wrapper
    )  # sbatch's, not the template's
    args = (out / "train-args").read_text().splitlines()
    assert args[:2] == ["train", "run"] and args[-4:] == ["--steps", "5", "--strategy", "per_node"]
    assert args[args.index("--checkpoint-dir") + 1] == f"{root}/1234/checkpoints"
    assert args[args.index("--log-dir") + 1] == f"{root}/1234/logs"
    assert "--manifest" not in args  # no MEGAHOUR_TRAIN_MANIFEST, no fetch
    rank = _env(out / "train-env")
    assert (rank["RANK"], rank["WORLD_SIZE"], rank["LOCAL_RANK"], rank["LOCAL_WORLD_SIZE"]) == (
        "0",
        "4",
        "0",
        "2",
    )
    assert rank["MASTER_ADDR"] == "node-a"
    assert rank["MASTER_PORT"] == str(29500 + (1234 % 100) * 10)  # restart 0
    assert rank["MEGAHOUR_TRACE_ROOT"] == f"{root}/1234/traces"
    assert (root / "1234").is_dir()
    assert "job 1234 attempt 0 on node-[a-b] (ranks a node: 2), head node-a" in stdout


def test_a_restarted_step_meets_on_another_port(render, tmp_path):
    script = render(runtime_venv=str(tmp_path / "venv"), runtime_train_root=str(tmp_path / "root"))
    out, _ = _run_with_stubs(script, tmp_path, extra_env={"MEGAHOUR_RUN_RESTART": "2"})
    assert _env(out / "train-env")["MEGAHOUR_RUN_RESTART"] == "2"
    assert _env(out / "train-env")["MASTER_PORT"] == str(29500 + 340 + 2)


def test_the_manifest_is_fetched_once_a_node_and_the_fabric_environment_sourced(render, tmp_path):
    fabric = tmp_path / "fabric.env"
    fabric.write_text("NCCL_IB_HCA=mlx5_0,mlx5_1\nNCCL_SOCKET_IFNAME='ib0'\n")
    script = render(
        runtime_venv=str(tmp_path / "venv"),
        runtime_train_root=str(tmp_path / "root"),
        runtime_train_fabric_env=str(fabric),
        runtime_train_scratch=str(tmp_path / "scratch"),
    )
    out, _ = _run_with_stubs(script, tmp_path, extra_env={"MEGAHOUR_TRAIN_MANIFEST": "s3://lab/m.arrow"})
    local = f"{tmp_path}/scratch/1234/manifest.arrow"
    assert (out / "manifest-args").read_text().splitlines() == [
        "manifest",
        "fetch",
        "s3://lab/m.arrow",
        local,
    ]
    first_srun = (out / "srun-calls").read_text().splitlines()[:3]
    assert first_srun[:2] == ["--ntasks-per-node=1", "--kill-on-bad-exit=1"]  # once a node, before the ranks
    args = (out / "train-args").read_text().splitlines()
    assert args[args.index("--manifest") + 1] == local
    rank = _env(out / "train-env")
    assert rank["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and rank["NCCL_SOCKET_IFNAME"] == "ib0"


def test_extra_environment_is_exported_quoted(render, tmp_path):
    script = render(runtime_train_env={"NCCL_DEBUG": "INFO", "MEGAHOUR_NOTE": "two words"})
    text = script.read_text()
    assert "export NCCL_DEBUG=INFO" in text and "export MEGAHOUR_NOTE='two words'" in text


def test_rank_0_writes_its_metrics_where_node_exporter_reads_when_the_user_may(render, tmp_path):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    script = render(runtime_venv=str(tmp_path / "venv"), runtime_train_textfile_dir=str(textfile))
    out, _ = _run_with_stubs(script, tmp_path)
    assert _env(out / "train-env")["MEGAHOUR_TRAIN_TEXTFILE_DIR"] == str(textfile)
    # one the job's user may not write (here: missing) is left out, not failed on
    textfile.rmdir()
    out, _ = _run_with_stubs(script, tmp_path)
    assert "MEGAHOUR_TRAIN_TEXTFILE_DIR" not in _env(out / "train-env")
    # the job's own choice wins
    textfile.mkdir()
    out, _ = _run_with_stubs(script, tmp_path, extra_env={"MEGAHOUR_TRAIN_TEXTFILE_DIR": "/elsewhere"})
    assert _env(out / "train-env")["MEGAHOUR_TRAIN_TEXTFILE_DIR"] == "/elsewhere"
