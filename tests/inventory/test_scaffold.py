"""`megahour inventory new`: the scaffold's answers, its rendered YAML, and the command (ansible faked)."""

from __future__ import annotations

import builtins
import io
import json
import sys
from dataclasses import replace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megahour.cli import main
from megahour.inventory import source
from megahour.inventory.fabric import FABRIC_TYPES
from megahour.inventory.platforms import supported
from megahour.inventory.profiles import BUILTIN, known_models
from megahour.inventory.scaffold import (
    ALL_VARS,
    COMPUTE_VARS,
    FILES,
    FLAGS,
    HOSTS,
    ScaffoldAnswers,
    answers_errors,
    documents,
    listing,
    render,
    snapshot,
)
from megahour.inventory.validate import validate

GOOD = ScaffoldAnswers(
    name="vendor4",
    gpu_model="b200",
    gpus_per_node=4,
    nodes=4,
    megahour_os="ubuntu-24.04",
    fabric="roce",
    fabric_interface="bond0",
    nvme_devices=("/dev/nvme0n1", "/dev/nvme1n1"),
    under_store="s3://lab-episodes/megahour",
    ansible_user="ubuntu",
)
NEW_ARGS = [
    "inventory",
    "new",
    "vendor4",
    "--gpu",
    "b200",
    "--gpus-per-node",
    "4",
    "--nodes",
    "4",
    "--fabric",
    "roce",
    "--fabric-interface",
    "bond0",
    "--nvme",
    "/dev/nvme0n1",
    "--nvme",
    "/dev/nvme1n1",
    "--os",
    "ubuntu-24.04",
    "--under-store",
    "s3://lab-episodes/megahour",
    "--ansible-user",
    "ubuntu",
]


def parsed(answers: ScaffoldAnswers) -> dict:
    return {name: yaml.safe_load(text) for name, text in render(answers).items()}


# --- render -------------------------------------------------------------------------------------------


def test_the_files_parse_to_the_example_layout():
    files = parsed(GOOD)
    assert set(files) == {HOSTS, ALL_VARS, COMPUTE_VARS} == set(FILES)
    top = files[HOSTS]["all"]["children"]
    assert set(top) == {"cluster", "warehouse", "airflow"}
    cluster = top["cluster"]["children"]
    assert cluster["controller"] == {"hosts": {"head01": None}}
    assert cluster["compute"] == {"hosts": {f"gpu00{i}": None for i in range(1, 5)}}
    assert top["warehouse"] == top["airflow"] == {"hosts": {"head01": None}}
    assert files[ALL_VARS] == {
        "megahour_vendor": "vendor4",
        "megahour_os": "ubuntu-24.04",
        "ansible_user": "ubuntu",
        "ansible_become": True,
        "megahour_shared_root": "/srv/megahour",
        "alluxio_root_ufs": "s3://lab-episodes/megahour",
    }
    assert files[COMPUTE_VARS] == {
        "megahour_gpu": {"model": "b200", "count": 4},
        "megahour_fabric": {"type": "roce", "interface": "bond0"},
        "megahour_nvme_devices": ["/dev/nvme0n1", "/dev/nvme1n1"],
        "megahour_cache_dirs": [
            {"path": "/mnt/nvme0/alluxio", "size": "3TB"},
            {"path": "/mnt/nvme1/alluxio", "size": "3TB"},
        ],
    }


def test_every_file_is_commented_and_points_to_the_docs():
    files = render(GOOD)
    for name, text in files.items():
        assert text.startswith("---\n# "), name
        assert "docs/onboarding.md" in text, name
        assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 4, name
    assert "megahour inventory validate -i inventories/vendor4" in files[HOSTS]
    assert "ansible-playbook -i inventories/vendor4 playbooks/site.yml" in files[HOSTS]
    assert "Gres=gpu:b200:4" in files[COMPUTE_VARS]
    assert "megahour_gpu_profiles" in files[COMPUTE_VARS]
    assert "alluxio_site_config" in files[ALL_VARS]
    assert "-i /tmp/x/vendor4" in render(GOOD, path="/tmp/x/vendor4")[HOSTS]


def test_addresses_count_up_from_the_first_one():
    files = parsed(replace(GOOD, controller_address="10.10.0.10", first_address="10.10.1.1"))
    cluster = files[HOSTS]["all"]["children"]["cluster"]["children"]
    assert cluster["controller"]["hosts"] == {"head01": {"ansible_host": "10.10.0.10"}}
    assert cluster["compute"]["hosts"] == {f"gpu00{i}": {"ansible_host": f"10.10.1.{i}"} for i in range(1, 5)}
    assert (
        "No address" not in render(replace(GOOD, controller_address="h.lab", first_address="10.0.0.1"))[HOSTS]
    )


def test_without_addresses_a_comment_says_to_add_them():
    text = render(GOOD)[HOSTS]
    assert "ansible_host:" not in text.replace("`ansible_host: <address>`", "")
    assert "No address was given: add `ansible_host: <address>`" in text
    assert "No addresses were given: add `ansible_host: <address>`" in text


def test_root_needs_no_become_and_names_grow_past_999():
    answers = replace(GOOD, ansible_user="root", nodes=1000, node_prefix="node", controller="ctl")
    files = parsed(answers)
    assert files[ALL_VARS]["ansible_user"] == "root" and "ansible_become" not in files[ALL_VARS]
    compute = files[HOSTS]["all"]["children"]["cluster"]["children"]["compute"]["hosts"]
    assert list(compute)[:2] == ["node0001", "node0002"] and list(compute)[-1] == "node1000"
    assert answers_errors(answers) == []


def test_a_directory_under_store_and_no_fabric():
    answers = replace(GOOD, under_store="/mnt/episodes", fabric="none", fabric_interface=None)
    files = parsed(answers)
    assert files[COMPUTE_VARS]["megahour_fabric"] == {"type": "none"}
    assert files[ALL_VARS]["alluxio_root_ufs"] == "/mnt/episodes"
    assert "mounted at the same path on every host" in render(answers)[ALL_VARS]
    assert answers_errors(answers) == []


def test_the_snapshot_is_what_ansible_would_build():
    answers = replace(GOOD, first_address="10.0.0.1")
    snap = snapshot(render(answers))
    assert snap["groups"]["cluster"] == ["head01", "gpu001", "gpu002", "gpu003", "gpu004"]
    assert snap["groups"]["compute"] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert snap["groups"]["warehouse"] == snap["groups"]["airflow"] == ["head01"]
    assert "megahour_gpu" not in snap["hosts"]["head01"]
    assert snap["hosts"]["gpu001"]["megahour_gpu"] == {"model": "b200", "count": 4}
    assert snap["hosts"]["gpu001"]["ansible_user"] == "ubuntu"
    # ansible_host is not a variable validation reads, but the listing carries it.
    assert listing(render(answers))["_meta"]["hostvars"]["gpu002"]["ansible_host"] == "10.0.0.2"
    assert validate(snap) == []


@pytest.mark.parametrize(
    "model,count", [(model, count) for model, p in sorted(BUILTIN.items()) for count in p.counts_per_node]
)
def test_every_builtin_model_and_shape_scaffolds_a_valid_inventory(model, count):
    answers = replace(GOOD, gpu_model=model, gpus_per_node=count)
    assert answers_errors(answers) == []
    assert validate(snapshot(render(answers))) == []
    assert f"Gres=gpu:{BUILTIN[model].gres_type}:{count}" in render(answers)[COMPUTE_VARS]


@st.composite
def good_answers(draw) -> ScaffoldAnswers:
    model = draw(st.sampled_from(known_models()))
    fabric = draw(st.sampled_from(FABRIC_TYPES))
    nodes = draw(st.integers(1, 64))
    devices = draw(st.integers(1, 6))
    return ScaffoldAnswers(
        name=draw(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,15}", fullmatch=True)),
        gpu_model=model,
        gpus_per_node=draw(st.sampled_from(BUILTIN[model].counts_per_node)),
        nodes=nodes,
        megahour_os=draw(st.sampled_from(supported())),
        fabric=fabric,
        fabric_interface=None if fabric == "none" else draw(st.sampled_from(["ib0", "bond0", "ens8f0np0"])),
        nvme_devices=tuple(f"/dev/nvme{k}n1" for k in range(devices)),
        under_store=draw(st.sampled_from(["s3://lab-episodes/megahour", "s3a://eps", "/mnt/episodes"])),
        node_prefix=draw(st.sampled_from(["gpu", "node", "h100-", "a_"])),
        controller=draw(st.sampled_from(["head01", "ctl", "slurm-ctl"])),
        controller_address=draw(st.none() | st.just("10.0.0.10") | st.just("head.lab.example")),
        first_address=draw(st.none() | st.just("10.0.1.1") | st.just("192.168.7.100")),
        cache_size=draw(st.sampled_from(["3TB", "500GB", "7000000MB"])),
        shared_root=draw(st.sampled_from(["/srv/megahour", "/lustre/megahour"])),
        ansible_user=draw(st.sampled_from(["root", "ubuntu", "debian", "svc_deploy"])),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(good_answers())
def test_accepted_answers_render_a_valid_inventory(answers):
    assert answers_errors(answers) == []
    files = render(answers)
    assert {name: yaml.safe_load(text) for name, text in files.items()} == documents(answers)
    snap = snapshot(files)
    assert validate(snap) == []
    assert len(snap["groups"]["compute"]) == answers.nodes


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    name=_TEXT,
    interface=_TEXT,
    user=_TEXT,
    root=_TEXT,
    store=_TEXT,
    size=_TEXT,
    device=_TEXT,
    prefix=_TEXT,
    controller=_TEXT,
    address=_TEXT,
)
def test_any_text_is_quoted_so_it_reads_back_as_written(
    name, interface, user, root, store, size, device, prefix, controller, address
):
    answers = replace(
        GOOD,
        name=name,
        fabric_interface=interface,
        ansible_user=user,
        shared_root=root,
        under_store=store,
        cache_size=size,
        nvme_devices=(device,),
        node_prefix=prefix,
        controller=controller,
        controller_address=address,
        nodes=2,
    )
    # render parses its own output back and fails on any difference; the lines stay YAML lines.
    files = parsed(answers)
    assert files[COMPUTE_VARS]["megahour_fabric"].get("interface", "") == interface
    assert files[ALL_VARS]["alluxio_root_ufs"] == store
    hosts = files[HOSTS]["all"]["children"]["cluster"]["children"]
    assert list(hosts["controller"]["hosts"]) == [controller]
    assert hosts["controller"]["hosts"][controller] == {"ansible_host": address}
    errors = answers_errors(answers)
    assert all(line.split(":", 1)[0] in FLAGS.values() for line in errors), errors


# --- answers_errors -----------------------------------------------------------------------------------

KNOWN = ", ".join(known_models())
BAD = [
    ({"name": "../x"}, "NAME", "use letters, digits"),
    ({"gpu_model": "h900"}, "--gpu", f"pass --gpu one of {KNOWN}; for a GPU without a built-in profile"),
    ({"gpus_per_node": 6}, "--gpus-per-node", "pass --gpus-per-node one of 1, 2, 4, 8"),
    ({"gpu_model": "h20", "gpus_per_node": 4}, "--gpus-per-node", "pass --gpus-per-node 8"),
    ({"gpus_per_node": 0}, "--gpus-per-node", "pass --gpus-per-node one of 1, 2, 4, 8"),
    ({"nodes": 0}, "--nodes", "pass --nodes 1 or more"),
    ({"node_prefix": "gpu node"}, "--node-prefix", "pass --node-prefix of letters"),
    ({"node_prefix": ""}, "--node-prefix", "pass --node-prefix of letters"),
    ({"controller": "head.lab"}, "--controller", "pass --controller a short host name"),
    ({"controller": "gpu002"}, "--controller", "not one of the compute nodes' names"),
    ({"controller_address": "head 01"}, "--controller-address", "an IP address or DNS name"),
    ({"first_address": "10.0.0"}, "--first-address", "an IPv4 address whose last octet leaves room"),
    ({"first_address": "10.0.0.252"}, "--first-address", "an IPv4 address whose last octet leaves room"),
    (
        {"first_address": "10.0.0.1", "controller_address": "10.0.0.3"},
        "--controller-address",
        "an IP address or DNS name",
    ),
    ({"megahour_os": "rocky-9"}, "--os", "pass --os one of debian-12, debian-13, ubuntu-24.04"),
    ({"megahour_os": "ubuntu-22.04"}, "--os", "pass --os one of debian-12, debian-13, ubuntu-24.04"),
    ({"fabric": "token-ring"}, "--fabric", "pass --fabric one of infiniband, roce, ethernet, none"),
    ({"fabric_interface": None}, "--fabric-interface", "pass --fabric-interface with the NIC"),
    ({"fabric_interface": "ib 0"}, "--fabric-interface", "pass --fabric-interface with the NIC"),
    ({"nvme_devices": ()}, "--nvme", "pass --nvme once per NVMe device"),
    ({"nvme_devices": ("/dev/nvme0n1", "nvme1n1")}, "--nvme", "pass --nvme once per NVMe device"),
    ({"nvme_devices": ("/dev/nvme0n1", "/dev/nvme0n1")}, "--nvme", "pass --nvme once per NVMe device"),
    ({"cache_size": "3 TB"}, "--cache-size", "pass --cache-size as a whole number"),
    ({"shared_root": "srv/megahour"}, "--shared-root", "pass --shared-root the absolute directory"),
    ({"under_store": "gs://episodes/x"}, "--under-store", "pass --under-store s3://BUCKET/PREFIX"),
    ({"under_store": "s3://CHANGE-ME/x"}, "--under-store", "pass --under-store s3://BUCKET/PREFIX"),
    ({"under_store": "episodes"}, "--under-store", "pass --under-store s3://BUCKET/PREFIX"),
    ({"under_store": "s3://{{ bucket }}/x"}, "--under-store", "pass --under-store s3://BUCKET/PREFIX"),
    ({"ansible_user": "de bian"}, "--ansible-user", "pass --ansible-user the user"),
]


@pytest.mark.parametrize("change,flag,fix", BAD, ids=lambda v: json.dumps(v) if isinstance(v, dict) else None)
def test_each_bad_answer_is_one_line_naming_its_flag_and_the_fix(change, flag, fix):
    (line,) = answers_errors(replace(GOOD, **change))
    assert line.startswith(f"{flag}: "), line
    assert fix in line.split(". Fix: ", 1)[1], line


def test_bad_answers_are_listed_in_flag_order():
    errors = answers_errors(replace(GOOD, under_store="gs://x", gpu_model="h900", nodes=-1))
    assert [e.split(":", 1)[0] for e in errors] == ["--gpu", "--nodes", "--under-store"]


def test_the_unknown_model_error_lists_the_known_ones():
    (line,) = answers_errors(replace(GOOD, gpu_model="mygpu"))
    assert line.startswith("--gpu: unknown GPU model 'mygpu'. Fix: pass --gpu one of a100, b200, ")
    assert "megahour_gpu_profiles" in line


# --- the command (ansible-inventory faked: tests/integration runs the real one) ------------------------


@pytest.fixture
def fake_ansible(monkeypatch):
    """load_snapshot builds the snapshot from the written files, the way the scaffold models Ansible."""

    def load(path):
        return snapshot({name: (path / name).read_text() for name in FILES})

    monkeypatch.setattr(source, "load_snapshot", load)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_new_writes_validates_and_prints_the_next_steps(tmp_path, capsys, fake_ansible):
    assert main([*NEW_ARGS, "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    inv = tmp_path / "vendor4"
    assert f"✓ {inv}: written and valid" in out
    assert f"megahour inventory validate -i {inv}" in out
    assert f"megahour doctor -i {inv}" in out
    assert f"ansible-playbook -i {inv} playbooks/site.yml" in out
    assert {name: (inv / name).read_text() for name in FILES} == render(GOOD, path=str(inv))
    assert not [p.name for p in inv.rglob(".*")]  # no temporaries left


def test_new_json(tmp_path, capsys, fake_ansible):
    assert main([*NEW_ARGS, "--dir", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    inv = tmp_path / "vendor4"
    assert report == {
        "path": str(inv),
        "files": [str(inv / name) for name in FILES],
        "valid": True,
        "findings": [],
    }


def test_an_existing_inventory_needs_force(tmp_path, capsys, fake_ansible):
    assert main([*NEW_ARGS, "--dir", str(tmp_path)]) == 0
    (tmp_path / "vendor4" / "hosts.yml").write_text("edited\n")
    capsys.readouterr()
    assert main([*NEW_ARGS, "--dir", str(tmp_path)]) == 2
    assert "--force" in one_error_line(capsys.readouterr().err)
    assert (tmp_path / "vendor4" / "hosts.yml").read_text() == "edited\n"
    assert main([*NEW_ARGS, "--dir", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "vendor4" / "hosts.yml").read_text() != "edited\n"


def test_findings_after_writing_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(source, "load_snapshot", lambda _path: {"groups": {}, "hosts": {"x": {}}})
    assert main([*NEW_ARGS, "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "✗ groups.controller: " in out and "written, with the findings above" in out
    assert (tmp_path / "vendor4" / "hosts.yml").exists()


def test_an_unreadable_result_exits_2(tmp_path, capsys, monkeypatch):
    def fail(_path):
        raise source.InventoryError("ansible-inventory is not installed")

    monkeypatch.setattr(source, "load_snapshot", fail)
    assert main([*NEW_ARGS, "--dir", str(tmp_path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "was written, but ansible-inventory is not installed" in line


def test_bad_answers_are_refused_before_anything_is_written(tmp_path, capsys, fake_ansible):
    args = [*NEW_ARGS, "--dir", str(tmp_path)]
    args[args.index("b200")] = "mygpu"
    assert main(args) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: --gpu: unknown GPU model 'mygpu'. Fix: pass --gpu one of a100, b200,")
    assert not (tmp_path / "vendor4").exists()
    args = [*NEW_ARGS, "--dir", str(tmp_path), "--cache-size", "lots", "--shared-root", "rel"]
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":", 2)[1].strip() for line in lines] == ["--cache-size", "--shared-root"]


def test_missing_answers_without_a_terminal_are_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    args = [a for a in NEW_ARGS if a not in ("--gpu", "b200")]
    assert main([*args, "--dir", str(tmp_path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: missing --gpu: pass it (stdin is not a terminal")
    with pytest.raises(SystemExit) as exc:  # a closed set is argparse's choices
        main(["inventory", "new", "x", "--dir", str(tmp_path), "--fabric", "ib"])
    assert exc.value.code == 2 and "--fabric: invalid choice: 'ib'" in capsys.readouterr().err
    assert main(["inventory", "new", "x", "--dir", str(tmp_path), "--fabric", "roce"]) == 2
    line = one_error_line(capsys.readouterr().err)
    for flag in (
        "--gpu",
        "--gpus-per-node",
        "--nodes",
        "--os",
        "--fabric-interface",
        "--nvme",
        "--under-store",
    ):
        assert flag in line
    assert not (tmp_path / "x").exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_missing_answers_are_asked_in_a_terminal(tmp_path, capsys, monkeypatch, fake_ansible):
    replies = iter(
        ["h900", "b200", "", "x", "2", "debian-12", "infiniband", "ib0", "/dev/nvme0n1 /dev/nvme1n1"]
    )
    questions: list[str] = []
    monkeypatch.setattr(sys, "stdin", _Terminal())

    def ask(prompt=""):
        questions.append(capsys.readouterr().err)
        return next(replies)

    monkeypatch.setattr(builtins, "input", ask)
    args = ["inventory", "new", "v", "--dir", str(tmp_path), "--under-store", "/mnt/eps"]
    assert main(args) == 0
    assert questions[0].startswith(f"GPU model (megahour_gpu.model) [{KNOWN}]: ")
    assert "'h900' is not one of" in questions[1]
    assert questions[2] == "GPUs per node [1, 2, 4, 8] (8): "  # an empty answer takes the default
    assert "'x' is not a whole number" in questions[4]
    assert "[debian-12, debian-13, ubuntu-24.04]" in questions[5]
    assert "[infiniband, roce, ethernet, none]" in questions[6]
    compute = yaml.safe_load((tmp_path / "v" / COMPUTE_VARS).read_text())
    assert compute["megahour_gpu"] == {"model": "b200", "count": 8}
    assert compute["megahour_fabric"] == {"type": "infiniband", "interface": "ib0"}
    assert compute["megahour_nvme_devices"] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert yaml.safe_load((tmp_path / "v" / ALL_VARS).read_text())["megahour_os"] == "debian-12"


def test_no_answer_in_a_terminal_refuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Terminal())

    def eof(prompt=""):
        raise EOFError

    monkeypatch.setattr(builtins, "input", eof)
    assert main(["inventory", "new", "v", "--dir", str(tmp_path)]) == 2
    assert "no answer for --gpu" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "v").exists()


@pytest.mark.integration
@pytest.mark.parametrize(
    "answers",
    [
        GOOD,
        replace(GOOD, ansible_user="root", fabric="none", fabric_interface=None, first_address="10.0.0.1"),
        replace(GOOD, nodes=1, controller_address="head.lab", under_store="/mnt/eps", node_prefix="n-"),
    ],
)
def test_the_scaffolds_snapshot_is_the_one_ansible_inventory_gives(tmp_path, answers):
    for name, text in render(answers).items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert source.load_snapshot(tmp_path) == snapshot(render(answers))
