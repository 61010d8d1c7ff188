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


def _run_with_stubs(script, tmp_path, job_id="1234"):
    """Run the job script with scontrol and srun replaced by stubs that record their arguments."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "scontrol").write_text("#!/bin/sh\necho node-a; echo node-b\n")
    # srun runs its command as one task would, with the node variables a real step has
    (stubs / "srun").write_text(
        '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nSLURM_NODEID=0 exec "$@"\n'
    )
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "torchrun").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    for f in (stubs / "scontrol", stubs / "srun", venv / "torchrun"):
        f.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{stubs}:{os.environ['PATH']}",
        SLURM_JOB_ID=job_id,
        SLURM_JOB_NODELIST="node-[a-b]",
        SLURM_NNODES="2",
        ARGS_OUT=str(tmp_path / "args"),
    )
    proc = subprocess.run(
        ["bash", str(script), "--steps", "5", "--strategy", "per_node"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "args").read_text().splitlines(), proc.stdout


def test_job_script_launches_torchrun_per_node_with_the_group_gpu_count(render, tmp_path):
    root = tmp_path / "train root"  # a space: paths must be quoted
    script = render(runtime_train_root=str(root), runtime_venv=str(tmp_path / "venv"))
    subprocess.run(["bash", "-n", str(script)], check=True)
    args, out = _run_with_stubs(script, tmp_path)
    assert "--nproc-per-node=4" in args  # the compute group's GPU count, not the controller's
    assert "--master-addr=node-a" in args and "--nnodes=2" in args and "--node-rank=0" in args
    assert "--master-port=29734" in args  # 29500 + job id 1234 mod 1000
    assert args[args.index("--checkpoint-dir") + 1] == f"{root}/1234/checkpoints"
    assert args[-4:] == ["--steps", "5", "--strategy", "per_node"]
    assert (root / "1234").is_dir()
    assert "job 1234 attempt 0 on node-[a-b], head node-a" in out


def test_extra_environment_is_exported_quoted(render, tmp_path):
    script = render(runtime_train_env={"NCCL_DEBUG": "INFO", "MEGAHOUR_NOTE": "two words"})
    text = script.read_text()
    assert "export NCCL_DEBUG=INFO" in text and "export MEGAHOUR_NOTE='two words'" in text
