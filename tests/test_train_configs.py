"""Every shipped train / accelerate config parses, and config errors name the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from train.config import ConfigError, TrainConfig, parse_config, read_yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TRAIN_YAMLS = sorted((CONFIGS / "train").glob("*.yaml"))
ACCELERATE_YAMLS = sorted((CONFIGS / "accelerate").glob("*.yaml"))
ACCELERATE_KEYS = {"compute_environment", "distributed_type", "num_machines", "num_processes", "mixed_precision"}


def test_configs_are_shipped():
    names = {p.stem for p in TRAIN_YAMLS}
    assert {"asi", "cae", "srp", "ers"} <= names
    assert {f"qwen0.5b-{r}" for r in ("asi", "cae", "srp", "ers")} <= names
    assert {p.stem for p in ACCELERATE_YAMLS} >= {"single", "cpu-ddp", "multi-gpu-ddp", "fsdp", "deepspeed-zero2"}


@pytest.mark.parametrize("path", TRAIN_YAMLS, ids=lambda p: p.name)
def test_train_yaml_parses_into_config(path):
    assert path.read_text().startswith("#"), f"{path.name} needs a header comment saying what it does"
    cfg = parse_config(["--config", str(path)])
    assert isinstance(cfg, TrainConfig)
    assert set(cfg.role_list()) <= {"asi", "cae", "srp", "ers", "perspective", "phase", "plan", "gra"}
    for key, value in read_yaml(path).items():
        assert getattr(cfg, key) == value, f"{path.name}: {key}"
    assert not cfg.gradient_checkpointing or not cfg.use_cpu, "gradient checkpointing only costs time on CPU"


def test_flags_override_yaml():
    cfg = parse_config(
        ["--config", str(CONFIGS / "train" / "asi.yaml"), "--roles", "asi,cae", "--r", "4", "--no_padding_free"]
    )
    assert cfg.role_list() == ["asi", "cae"] and cfg.r == 4 and cfg.padding_free is False
    assert cfg.model == "smollm2-135m"  # untouched keys keep the YAML value


def test_unknown_yaml_key_names_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("# bad\nmodel: smollm2-135m\nlearning_rat: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: unknown key 'learning_rat'"):
        parse_config(["--config", str(bad)])


def test_unknown_role_is_rejected():
    with pytest.raises(ConfigError, match="unknown role"):
        parse_config(["--roles", "asi,nope"])


def test_cli_reports_bad_config_in_one_line(tmp_path, capsys):
    from train.__main__ import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("roles: [asi\n")
    assert main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.yaml" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("path", ACCELERATE_YAMLS, ids=lambda p: p.name)
def test_accelerate_yaml_is_valid(path):
    assert path.read_text().startswith("#"), f"{path.name} needs a header comment"
    data = yaml.safe_load(path.read_text())
    assert ACCELERATE_KEYS <= set(data), f"{path.name} lacks {ACCELERATE_KEYS - set(data)}"
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(path))  # what `accelerate launch --config_file` itself reads
    assert loaded.num_processes == data["num_processes"]
    if path.stem == "cpu-ddp":
        # accelerate's --cpu mode would start one process; CPU DDP needs the torchrun launcher.
        assert data["distributed_type"] == "MULTI_GPU" and data["num_processes"] == 2 and not data["use_cpu"]


@pytest.mark.parametrize("value, expected", [("true", True), ("false", False), (True, True), (False, False)])
def test_bf16_flag_forces_either_way(value, expected):
    assert parse_config(["--bf16", str(value).lower()]).use_bf16() is expected
    from train.config import config_from_dict

    assert config_from_dict({"bf16": value}).use_bf16() is expected  # YAML gives real bools


def test_bf16_auto_follows_the_hardware():
    import torch

    from distill.backends.local import resolve_dtype

    native = resolve_dtype("auto", "cpu") == torch.bfloat16
    assert parse_config(["--use_cpu", "true"]).use_bf16() is native


def test_bad_bf16_value_is_a_config_error():
    with pytest.raises(ConfigError, match="bf16: expected auto, true or false"):
        parse_config(["--bf16", "maybe"])
    with pytest.raises(ConfigError, match="completion_head: expected auto, true or false"):
        parse_config(["--completion_head", "sometimes"])


def test_completion_head_auto_is_on_for_cpu_training_only():
    assert parse_config(["--use_cpu", "true"]).use_completion_head() is True
    assert parse_config(["--use_cpu", "true", "--completion_head", "false"]).use_completion_head() is False
    from train.config import config_from_dict

    assert config_from_dict({"completion_head": True}).use_completion_head() is True
