from __future__ import annotations

import json
import sys

from megahour.cli import main


def test_select_prints_the_choice_as_json(capsys) -> None:
    assert (
        main(["train", "select", "--nodes", "16", "--gpus-per-node", "8", "--shapes", "llama8b", "--json"])
        == 0
    )
    choice = json.loads(capsys.readouterr().out)
    assert choice["strategy"] == "world" and choice["nodes"] == 16
    assert choice["predictions"]["per_node"]["bytes"]["inter"] == 0


def test_select_reads_a_link_model(tmp_path, capsys) -> None:
    links = tmp_path / "links.json"
    links.write_text(
        json.dumps(
            {
                "node_alpha_s": 1e-5,
                "node_bytes_per_s": 3.6e11,
                "world_alpha_s": 2e-3,
                "world_bytes_per_s": 5e9,
                "ns_flops_per_s": 4e14,
            }
        )
    )
    argv = [
        "train",
        "select",
        "--nodes",
        "8",
        "--gpus-per-node",
        "8",
        "--shapes",
        "llama8b",
        "--links",
        str(links),
    ]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"] == "per_node"


def test_bad_input_is_a_clear_error(capsys) -> None:
    assert main(["train", "select", "--nodes", "0", "--gpus-per-node", "8"]) == 1
    assert "at least 1 node" in capsys.readouterr().err
    assert main(["train", "selfcheck", "--layouts", "2by2"]) == 1
    assert "NODESxGPUS" in capsys.readouterr().err


def test_a_missing_torch_names_the_train_extra(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    for argv in (["select", "--nodes", "1", "--gpus-per-node", "1"], ["run"], ["selfcheck"]):
        assert main(["train", *argv]) == 1
        assert capsys.readouterr().err == (
            "error: `megahour train` needs torch: install megahour's train extra "
            "(pip install 'megahour[train]'; on a cluster, deploy with runtime_train: true)\n"
        )


def test_the_cli_choices_match_the_trainer_and_the_model() -> None:
    """`megahour train run --help` spells the choices without importing torch; they must not drift."""
    from megahour.train import cli
    from megahour.train.model import PRESETS
    from megahour.train.trainer import STRATEGIES

    assert STRATEGIES == cli.STRATEGIES
    assert tuple(PRESETS) == cli.PRESETS


def test_run_refuses_a_strategy_the_data_parallel_mode_cannot_run(capsys) -> None:
    assert main(["train", "run", "--data-parallel", "hsdp", "--strategy", "world", "--steps", "0"]) == 1
    assert "Muon must be fully_sharded" in capsys.readouterr().err


def test_the_cli_modes_and_devices_match_the_runtime() -> None:
    from megahour.train import cli
    from megahour.train.device import DEVICES
    from megahour.train.parallel import DataParallel

    assert tuple(m.value for m in DataParallel) == cli.DATA_PARALLEL
    assert DEVICES == cli.DEVICES
