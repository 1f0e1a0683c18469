"""Several roles in one multi-process launch train one per process (train.parallel), on 2 CPU processes over gloo.

A rank's roles train as a one-process run of those roles would: the same rows, the same seed, no gradient sync. So
each adapter of a 2-process launch of `--roles asi,cae` must hold exactly the weights of the same role trained in one
process: LoRA init, batch order and every step are drawn from the seed alone (train.sft.with_new_lora), and one
torch thread per process makes the CPU arithmetic repeat bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_train import build_role_datasets

from distill.adapters.adapters import read_metadata
from train.config import ConfigError
from train.config_load import config_from_dict
from train.parallel import child_environment, roles_of_rank, trains_roles_in_parallel
from train.preflight import check_launch

REPO = Path(__file__).resolve().parents[1]
ADAPTER_FILE = "adapter_model.safetensors"


def _flags(model: str, datasets: Path, out: Path) -> dict:
    return dict(
        model_name_or_path=model, dataset_name=str(datasets), output_dir=str(out), roles="asi,cae", max_steps=3,
        per_device_train_batch_size=2, learning_rate=5e-3, logging_steps=1, use_cpu=True, lora_r=4, lora_alpha=8,
        num_threads=1, card_example=False, save_steps=0, report_to="none",
    )  # fmt: skip


def _launch(config: str, flags: dict, cwd: Path, num_processes: int = 2) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file configs/accelerate/<config> --num_processes K --no_python trace-distill
    train <flags>`, as the README writes it."""
    argv = [x for key, value in flags.items() for x in (f"--{key}", str(value))]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / "configs/accelerate" / config),
        "--num_processes", str(num_processes), "--no_python", str(Path(sys.executable).parent / "trace-distill"),
        "train", *argv,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, tiny_dialogues) -> Path:
    return build_role_datasets(tmp_path_factory.mktemp("datasets"), tiny_dialogues)


def test_ranks_take_every_role_once():
    roles = ["asi", "cae", "srp", "ers"]
    assert [roles_of_rank(roles, r, 2) for r in range(2)] == [["asi", "srp"], ["cae", "ers"]]
    assert [roles_of_rank(roles, r, 5) for r in range(5)] == [["asi"], ["cae"], ["srp"], ["ers"], []]


def test_only_a_launch_of_several_roles_trains_them_in_parallel(datasets, tmp_path):
    two = config_from_dict({"roles": "asi,cae", "use_cpu": True}, source="test")
    one = config_from_dict({"roles": "asi", "use_cpu": True}, source="test")
    assert trains_roles_in_parallel(two, {"WORLD_SIZE": "2"})
    assert not trains_roles_in_parallel(one, {"WORLD_SIZE": "2"})  # one role: data parallel, as before
    assert not trains_roles_in_parallel(two, {}) and not trains_roles_in_parallel(two, {"WORLD_SIZE": "1"})
    launched = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
    child = child_environment(two, {**launched, "PATH": "/bin", "ACCELERATE_MIXED_PRECISION": "no"})
    assert child == {"PATH": "/bin", "ACCELERATE_MIXED_PRECISION": "no"}  # no trace of the launch's process group


@pytest.mark.parametrize("variable", ["ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"])
def test_a_sharded_launch_of_several_roles_is_one_line(variable):
    cfg = config_from_dict({"roles": "asi,cae", "use_cpu": True}, source="test.yaml")
    engine = "FSDP" if "FSDP" in variable else "DeepSpeed"
    with pytest.raises(
        ConfigError, match=rf"^test.yaml: field 'roles': {engine} shards one role over the processes"
    ) as err:
        check_launch(cfg, environ={variable: "true", "WORLD_SIZE": "2"})
    assert "\n" not in str(err.value) and "--roles asi" in str(err.value)


@pytest.mark.slow
def test_two_processes_train_two_roles_at_once_as_one_process_trains_each(datasets, tmp_path, tiny_model_dir):
    from train.sft import train_roles

    (tmp_path / "work").mkdir()
    run = _launch("cpu-ddp.yaml", _flags(tiny_model_dir, datasets, tmp_path / "parallel"), tmp_path / "work")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rank 0 of 2: asi (2 roles over 2 processes" in run.stdout
    assert "rank 1 of 2: cae (2 roles over 2 processes" in run.stdout
    one_process = train_roles(config_from_dict(_flags(tiny_model_dir, datasets, tmp_path / "serial"), source="test"))
    for meta in one_process:
        role = meta["role"]
        parallel = read_metadata(tmp_path / "parallel" / role)
        assert parallel["world_size"] == 1 and parallel["distributed_type"] == "NO"  # trained alone, no DDP
        assert (parallel["global_step"], parallel["dataset_fingerprint"]) == (3, meta["dataset_fingerprint"])
        got = load_file(str(tmp_path / "parallel" / role / ADAPTER_FILE))
        expected = load_file(str(tmp_path / "serial" / role / ADAPTER_FILE))
        assert got.keys() == expected.keys() and any(t.abs().sum() > 0 for k, t in got.items() if "lora_B" in k)
        assert all(torch.equal(got[k], expected[k]) for k in expected), f"{role}: other weights than one process's"


@pytest.mark.slow
def test_an_fsdp_launch_of_several_roles_is_refused_in_one_line(datasets, tmp_path, tiny_model_dir):
    (tmp_path / "work").mkdir()
    run = _launch("fsdp.yaml", _flags(tiny_model_dir, datasets, tmp_path / "out"), tmp_path / "work")
    assert run.returncode != 0
    assert "field 'roles': FSDP shards one role over the processes of a launch" in run.stderr, run.stderr[-3000:]
    assert not (tmp_path / "out").exists()
