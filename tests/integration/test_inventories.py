"""The example inventories and validate.yml, through the real ansible tools.

No container is started: validate.yml must fail before any managed host is
contacted, and the hosts in these inventories do not exist.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from megahour.cluster.spec import ClusterSpec
from megahour.inventory.source import load_snapshot
from tests.conftest import REPO, filter_plugins, tool

pytestmark = pytest.mark.integration
EXAMPLES = ["example-baremetal-h100", "example-cloud-h200"]


@pytest.fixture
def local_inventory(tmp_path):
    """inventories/local as `megahour cluster up` would write it, without containers."""
    inv = tmp_path / "local"
    shutil.copytree(REPO / "inventories" / "local" / "group_vars", inv / "group_vars")
    (inv / "hosts.yml").write_text(ClusterSpec().inventory_yaml())
    return inv


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_inventory_graph(run, name):
    proc = run([tool("ansible-inventory"), "-i", f"inventories/{name}", "--graph"])
    assert proc.returncode == 0, proc.stderr
    for group in ("@cluster:", "@controller:", "@compute:"):
        assert group in proc.stdout


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_inventory_passes_validate_play_and_cli(run, name):
    proc = run([tool("ansible-playbook"), "-i", f"inventories/{name}", "playbooks/validate.yml"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Inventory valid: 2 compute node(s)" in proc.stdout
    cli = run([tool("megahour"), "inventory", "validate", "-i", f"inventories/{name}", "--json"])
    assert cli.returncode == 0 and '"ok": true' in cli.stdout


def test_generated_local_inventory_is_valid(run, local_inventory):
    assert run([tool("ansible-inventory"), "-i", str(local_inventory), "--graph"]).returncode == 0
    proc = run([tool("ansible-playbook"), "-i", str(local_inventory), "playbooks/validate.yml"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("cache_on_store", [True, False])
def test_a_local_inventory_with_the_store_resolves_its_settings_without_its_facts(
    run, tmp_path, cache_on_store
):
    """With the store container, the ingest service and (unless local_cache_on_store is false) the cache
    tier reach it by its name: a run limited to the controller, which never gathers the store's facts,
    still resolves every store setting."""
    inv = tmp_path / "local"
    shutil.copytree(REPO / "inventories" / "local" / "group_vars", inv / "group_vars")
    (inv / "hosts.yml").write_text(ClusterSpec(remote_store=True).inventory_yaml())
    names = [
        "airflow_store_environment",
        "alluxio_root_ufs",
        "alluxio_under_store_url",
        "alluxio_site_config",
    ]
    wanted = f"[{', '.join([*names, 'alluxio_store_root'])}]"
    debug = ["-m", "ansible.builtin.debug", "-a", f"msg={{{{ {wanted} | to_json }}}}"]
    extra = [
        "-e",
        f"megahour_secrets_dir={tmp_path / 'secrets'}",
        "-e",
        f"local_cache_on_store={cache_on_store}",
    ]
    proc = run([tool("ansible"), "-i", str(inv), "ctl", *debug, *extra])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    environment, root, under_store, site, store_root = json.loads(
        yaml.safe_load(proc.stdout.split("=>", 1)[1])["msg"]
    )
    secret = (tmp_path / "secrets" / "store_secret_key").read_text().strip()
    assert environment == {
        "AWS_ACCESS_KEY_ID": "megahour-local",
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ENDPOINT_URL": "http://store:8082",
    }
    if cache_on_store:
        assert (root, under_store, store_root) == ("s3://megahour/", "http://store:8082", "")
        assert site["alluxio.underfs.s3.endpoint"] == "http://store:8082"
    else:
        assert (root, under_store, site, store_root) == ("/srv/megahour", "", {}, "s3://megahour")


def _break(tmp_path: Path, edit) -> Path:
    """The bare-metal example with ``edit(cluster_groups, compute_vars, all_vars, top_groups)`` applied."""
    inv = tmp_path / "vendor"
    shutil.copytree(REPO / "inventories" / "example-baremetal-h100", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    files = {name: inv / "group_vars" / f"{name}.yml" for name in ("compute", "all")}
    loaded = {name: yaml.safe_load(path.read_text()) for name, path in files.items()}
    top = hosts["all"]["children"]
    edit(top["cluster"]["children"], loaded["compute"], loaded["all"], top)
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    for name, path in files.items():
        path.write_text(yaml.safe_dump(loaded[name]))
    return inv


def _drop_controller(groups, *_):
    del groups["controller"]


def _empty_compute(groups, *_):
    groups["compute"] = {}


def _unknown_model(_groups, cvars, *_):
    cvars["megahour_gpu"]["model"] = "h900"


def _bad_count(_groups, cvars, *_):
    cvars["megahour_gpu"]["count"] = 6


def _no_interface(_groups, cvars, *_):
    del cvars["megahour_fabric"]["interface"]


def _no_cluster_group(_groups, _cvars, _avars, top):
    top.update(top.pop("cluster")["children"])


def _no_warehouse_group(_groups, _cvars, _avars, top):
    del top["warehouse"]


def _no_airflow_group(_groups, _cvars, _avars, top):
    top["airflow"] = {"hosts": {}}


def _relative_cache_dir(_groups, cvars, *_):
    cvars["megahour_cache_dirs"][0]["path"] = "mnt/nvme0/alluxio"


def _cache_size_unparsable(_groups, cvars, *_):
    cvars["megahour_cache_dirs"][1]["size"] = "3 terabytes"


def _no_under_store(_groups, _cvars, avars, _top):
    del avars["alluxio_root_ufs"]


def _under_store_scheme(_groups, _cvars, avars, _top):
    avars["alluxio_root_ufs"] = "gs://episodes/megahour"


def _shared_root_relative(_groups, _cvars, avars, _top):
    avars["megahour_shared_root"] = "srv/megahour"


def _user_without_become(_groups, _cvars, avars, _top):
    avars["ansible_become"] = False


def _os_unsupported(_groups, _cvars, avars, _top):
    avars["megahour_os"] = "rocky-9"


def _os_python_too_old(_groups, _cvars, avars, _top):
    avars["megahour_os"] = "ubuntu-22.04"


def _python_interpreter_relative(_groups, _cvars, avars, _top):
    avars["ansible_python_interpreter"] = "python3"


def _bad_custom_profile(_groups, cvars, *_):
    cvars["megahour_gpu_profiles"] = {"h100": {"min_driver_branch": "newest"}}


# (edit, variable, the fix's opening words). Every hole validation must catch before a host is touched.
BROKEN = [
    (_drop_controller, "groups.controller", "add a 'controller' group"),
    (_empty_compute, "groups.compute", "add at least one GPU host"),
    (_unknown_model, "megahour_gpu.model", "use one of a100, b200, b300, gb200, h100, h20, h200, l40s"),
    (_bad_count, "megahour_gpu.count", "set megahour_gpu.count to one of 1, 2, 4, 8"),
    (_no_interface, "megahour_fabric.interface", "set megahour_fabric.interface"),
    (_no_cluster_group, "groups.cluster", "make 'controller' and 'compute' children of a 'cluster' group"),
    (_no_warehouse_group, "groups.warehouse", "add 'warehouse: {hosts: {<controller>: }}'"),
    (_no_airflow_group, "groups.airflow", "add 'airflow: {hosts: {<controller>: }}'"),
    (_relative_cache_dir, "megahour_cache_dirs[0].path", "set megahour_cache_dirs to one entry per NVMe"),
    (_cache_size_unparsable, "megahour_cache_dirs[1].size", "set megahour_cache_dirs to one entry per NVMe"),
    (_no_under_store, "alluxio_root_ufs", "set alluxio_root_ufs in group_vars/all.yml"),
    (_under_store_scheme, "alluxio_root_ufs", "set alluxio_root_ufs in group_vars/all.yml"),
    (_shared_root_relative, "megahour_shared_root", "set megahour_shared_root to where every node mounts"),
    (_user_without_become, "ansible_become", "set ansible_become: true beside ansible_user"),
    (_os_unsupported, "megahour_os", "use one of debian-12, debian-13, ubuntu-24.04"),
    (_os_python_too_old, "megahour_os", "ask the vendor for one of debian-12, debian-13, ubuntu-24.04"),
    (
        _python_interpreter_relative,
        "ansible_python_interpreter",
        "remove it (Ansible finds the image's python3)",
    ),
    (_bad_custom_profile, "megahour_gpu_profiles.h100.min_driver_branch", "set the oldest supported driver"),
]
# Problems of every compute host: one line for both (the playbook's messages and the CLI's).
PER_HOST = (
    "megahour_gpu.model",
    "megahour_gpu.count",
    "megahour_fabric.interface",
    "megahour_cache_dirs[0].path",
    "megahour_cache_dirs[1].size",
    "megahour_gpu_profiles.h100.min_driver_branch",
)
# Problems of every host of the cluster (group_vars/all.yml).
EVERY_HOST = ("megahour_shared_root", "ansible_become", "megahour_os", "ansible_python_interpreter")


def _ids(case):
    return case.__name__.lstrip("_") if callable(case) else None


@pytest.mark.parametrize("edit,variable,fix", BROKEN, ids=_ids)
def test_bad_inventory_stops_a_limited_site_yml_before_any_host(run, tmp_path, edit, variable, fix):
    """Under --limit too: validation covers the whole inventory, whatever hosts the run is limited to."""
    inv = _break(tmp_path, edit)
    limit = "head01" if edit is _empty_compute else "gpu002"  # a host the broken inventory still has
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/site.yml", "--limit", limit])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert variable in out and fix in out, out[-3000:]
    # Only the control node ran anything (the hosts of these inventories do not exist): every task was
    # delegated to it, nothing was unreachable, and the run ended in the validate play.
    assert "UNREACHABLE" not in out and "unreachable=0" in out
    assert "PLAY [Base host setup]" not in out
    for line in out.splitlines():
        if line.startswith(("ok: [", "fatal: [", "changed: [")):
            assert "-> localhost]" in line, line
    if variable in PER_HOST:
        assert f"{variable} (2 hosts: gpu[001-002]): " in out


@pytest.mark.parametrize("edit,variable,fix", BROKEN, ids=_ids)
def test_bad_inventory_fails_the_cli_with_one_line_per_problem(run, tmp_path, edit, variable, fix):
    inv = _break(tmp_path, edit)
    proc = run([tool("megahour"), "inventory", "validate", "-i", str(inv)])
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    (line,) = [
        line for line in proc.stdout.splitlines() if line.startswith((f"✗ {variable} ", f"✗ {variable}:"))
    ]
    assert f"Fix: {fix}" in line
    if variable in PER_HOST:
        assert f"{variable} (2 hosts: gpu[001-002]): " in line
    if variable in EVERY_HOST:
        assert f"{variable} (3 hosts: head01,gpu[001-002]): " in line
    report = run([tool("megahour"), "inventory", "validate", "-i", str(inv), "--json"])
    findings = [f for f in json.loads(report.stdout)["findings"] if f["variable"] == variable]
    assert len(findings) == (2 if variable in PER_HOST else 3 if variable in EVERY_HOST else 1)


def test_examples_differ_only_in_group_vars():
    first, second = (REPO / "inventories" / name for name in EXAMPLES)
    assert (first / "hosts.yml").read_text() == (second / "hosts.yml").read_text()
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in second.iterdir())


# --- `megahour inventory new`: a scaffolded inventory through the real ansible tools ---------------------

GPU_PROFILES_FILTER = REPO / "roles" / "slurm_client" / "filter_plugins" / "gpu_profiles.py"
CUSTOM_PROFILE = (
    "megahour_gpu_profiles: {mygpu: {product_names: ['ACME MyGPU*'], counts_per_node: [4], "
    "min_driver_branch: 600}}\n"
)


def _scaffold_args(name: str, directory: Path, gpu: str | None = "b200") -> list[str]:
    args = [tool("megahour"), "inventory", "new", name, "--dir", str(directory)]
    if gpu is not None:
        args += ["--gpu", gpu]
    return [
        *args,
        *("--gpus-per-node", "4", "--nodes", "4", "--fabric", "roce", "--fabric-interface", "bond0"),
        *("--nvme", "/dev/nvme0n1", "--nvme", "/dev/nvme1n1", "--os", "ubuntu-24.04"),
        *("--under-store", "s3://lab-episodes/megahour", "--ansible-user", "ubuntu"),
    ]


def _no_stdin(args: list[str]) -> list[str]:
    """``args`` with stdin from /dev/null: not a terminal, whatever runs the tests."""
    return ["sh", "-c", 'exec "$@" </dev/null', "sh", *args]


def _assert_valid_everywhere(run, inv: Path) -> None:
    cli = run([tool("megahour"), "inventory", "validate", "-i", str(inv)])
    assert cli.returncode == 0, cli.stdout + cli.stderr
    play = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/validate.yml"])
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr
    assert "Inventory valid: 4 compute node(s)" in play.stdout


def _gres_type(host_vars: dict) -> str:
    """What slurm.conf and gres.conf render as the node's GRES type (roles/slurm_client's filter)."""
    gres = filter_plugins(GPU_PROFILES_FILTER)["gpu_gres_type"]
    return gres(host_vars["megahour_gpu"]["model"], host_vars.get("megahour_gpu_profiles") or {})


def test_a_scaffolded_inventory_passes_the_cli_and_the_validate_play(run, tmp_path):
    proc = run(_no_stdin(_scaffold_args("vendor4", tmp_path)))
    inv = tmp_path / "vendor4"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"✓ {inv}: written and valid" in proc.stdout
    _assert_valid_everywhere(run, inv)
    snap = load_snapshot(inv)  # what ansible-inventory resolves
    assert snap["groups"]["compute"] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    for host in snap["groups"]["compute"]:
        hv = snap["hosts"][host]
        assert _gres_type(hv) == "b200"
        assert hv["megahour_gpu"] == {"model": "b200", "count": 4}
        assert hv["megahour_cache_dirs"] == [
            {"path": "/mnt/nvme0/alluxio", "size": "3TB"},
            {"path": "/mnt/nvme1/alluxio", "size": "3TB"},
        ]
        assert hv["megahour_fabric"] == {"type": "roce", "interface": "bond0"}
    assert snap["hosts"]["head01"]["ansible_become"] is True
    assert "Gres=gpu:b200:4" in (inv / "group_vars" / "compute.yml").read_text()


def test_a_scaffolded_inventory_takes_a_custom_gpu_profile_without_code(run, tmp_path):
    assert run(_no_stdin(_scaffold_args("vendor4", tmp_path))).returncode == 0
    inv = tmp_path / "vendor4"
    with (inv / "group_vars" / "all.yml").open("a") as f:
        f.write(CUSTOM_PROFILE)
    compute = inv / "group_vars" / "compute.yml"
    text = compute.read_text()
    assert text.count("  model: b200\n") == 1
    compute.write_text(text.replace("  model: b200\n", "  model: mygpu\n"))
    _assert_valid_everywhere(run, inv)
    hv = load_snapshot(inv)["hosts"]["gpu001"]
    assert hv["megahour_gpu"]["model"] == "mygpu" and _gres_type(hv) == "mygpu"
    # The scaffold itself knows the built-in profiles only, and says which.
    refused = run(_no_stdin(_scaffold_args("vendor5", tmp_path, gpu="mygpu")))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: --gpu: unknown GPU model 'mygpu'. Fix: pass --gpu one of ")
    assert "a100, b200, b300, gb200, h100, h20, h200, l40s, rtx-pro-6000" in line
    assert not (tmp_path / "vendor5").exists()


def test_scaffolding_refuses_an_existing_inventory_and_a_missing_answer(run, tmp_path):
    assert run(_no_stdin(_scaffold_args("vendor4", tmp_path))).returncode == 0
    again = run(_no_stdin(_scaffold_args("vendor4", tmp_path)))
    assert again.returncode == 2 and again.stdout == ""
    (line,) = again.stderr.strip().splitlines()
    assert line.startswith("error: ") and "--force" in line
    missing = run(_no_stdin(_scaffold_args("vendor6", tmp_path, gpu=None)))
    assert missing.returncode == 2
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith("error: missing --gpu") and "not a terminal" in line
    assert not (tmp_path / "vendor6").exists()
