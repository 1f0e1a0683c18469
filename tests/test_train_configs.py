"""Every shipped train / accelerate config parses, and config errors name the file and key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from train.config import ConfigError, TrainConfig
from train.config_load import config_from_dict, parse_config, read_yaml
from train.sft import steps_for_budget

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TRAIN_YAMLS = sorted((CONFIGS / "train").glob("*.yaml"))
ACCELERATE_YAMLS = sorted((CONFIGS / "accelerate").glob("*.yaml"))
ACCELERATE_KEYS = {"compute_environment", "distributed_type", "num_machines", "mixed_precision"}


def test_configs_are_shipped():
    assert {p.stem for p in TRAIN_YAMLS} == {"smollm2-cpu", "qwen0.5b-gpu"}  # one per base model
    assert {p.stem for p in ACCELERATE_YAMLS} >= {"single", "cpu-ddp", "multi-gpu-ddp", "fsdp", "deepspeed-zero2"}


def _parse_here(path: Path, *flags: str) -> TrainConfig:
    """Parse a shipped YAML; a GPU config is told to use the CPU when the machine has no GPU (as CI has none)."""
    import torch

    gpu_only = read_yaml(path).get("use_cpu") is False and not torch.cuda.is_available()
    return parse_config(["--config", str(path), *(["--use_cpu", "true"] if gpu_only else []), *flags])


@pytest.mark.parametrize("path", TRAIN_YAMLS, ids=lambda p: p.name)
def test_train_yaml_parses_into_config(path):
    assert path.read_text().startswith("#"), f"{path.name} needs a header comment saying what it does"
    cfg = _parse_here(path)
    assert isinstance(cfg, TrainConfig) and cfg.role_list() == ["asi", "cae", "srp", "ers"]
    flat = cfg.to_dict()
    for key, value in read_yaml(path).items():
        if key in ("use_cpu", "report_to"):  # adapted to this machine above; TRL turns "none" into []
            continue
        assert flat[key] == value, f"{path.name}: {key}"
    assert not cfg.sft.gradient_checkpointing or not cfg.sft.use_cpu, "gradient checkpointing only costs time on CPU"


def test_trl_style_yaml_is_read_as_it_is(tmp_path):
    """A TRL user's SFT YAML, in TRL's names, parses with nothing renamed."""
    trl_yaml = tmp_path / "sft.yaml"
    trl_yaml.write_text(
        "model_name_or_path: smollm2-135m\nper_device_train_batch_size: 4\nlearning_rate: 1.0e-4\n"
        "num_train_epochs: 2\nlora_r: 8\nlora_alpha: 16\ngradient_accumulation_steps: 2\nuse_peft: true\n"
    )
    cfg = parse_config(["--config", str(trl_yaml), "--roles", "asi"])
    assert (cfg.sft.per_device_train_batch_size, cfg.sft.learning_rate, cfg.sft.num_train_epochs) == (4, 1e-4, 2)
    assert (cfg.model.lora_r, cfg.model.lora_alpha, cfg.sft.gradient_accumulation_steps) == (8, 16, 2)
    # what the YAML leaves out takes our recipe, not TRL's defaults
    assert cfg.sft.padding_free and not cfg.sft.gradient_checkpointing and cfg.model.lora_dropout == 0.0


def test_bare_config_from_dict_is_padding_free():
    assert config_from_dict({"roles": "asi"}, source="test").sft.padding_free


def test_flags_override_yaml():
    cfg = parse_config(
        ["--config", str(CONFIGS / "train" / "smollm2-cpu.yaml"), "--roles", "asi,cae", "--lora_r", "4"]
        + ["--padding_free", "false"]
    )
    assert cfg.role_list() == ["asi", "cae"] and cfg.model.lora_r == 4 and cfg.sft.padding_free is False
    assert cfg.model.model_name_or_path == "smollm2-135m"  # untouched keys keep the YAML value


def test_unknown_yaml_key_names_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("# bad\nmodel_name_or_path: smollm2-135m\nlearning_rat: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: unknown key 'learning_rat' \(did you mean 'learning_rate'"):
        parse_config(["--config", str(bad)])


def test_old_key_names_point_to_trls(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("batch_size: 8\n")
    with pytest.raises(ConfigError, match="old.yaml: unknown key 'batch_size'.*per_device_train_batch_size"):
        parse_config(["--config", str(old)])


def test_yaml_values_of_the_wrong_type_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora_r: 8.5\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: field 'lora_r': expected int, got 8.5"):
        parse_config(["--config", str(bad)])


def test_trainer_checks_become_config_errors():
    with pytest.raises(ConfigError, match="command line: .*warp-speed"):
        parse_config(["--lr_scheduler_type", "warp-speed"])
    with pytest.raises(ConfigError, match="command line: argument --lora_r/--lora-r: invalid int value"):
        parse_config(["--lora_r", "many"])


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
    assert loaded.num_processes == data.get("num_processes", -1)  # -1: the launch's --num_processes
    if path.stem == "cpu-ddp":
        # accelerate's --cpu mode would start one process; CPU DDP needs the torchrun launcher.
        assert data["distributed_type"] == "MULTI_GPU" and data["num_processes"] == 2 and not data["use_cpu"]


def _launch_args(config: str, *flags: str):
    """What `accelerate launch --config_file configs/accelerate/<config> <flags> train.py` resolves, by its own code."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    parsed = launch_command_parser().parse_args(["--config_file", str(CONFIGS / "accelerate" / config), *flags, "x.py"])
    return _validate_launch_command(parsed)


def test_the_ddp_config_takes_its_process_count_from_the_launch():
    args, _, _ = _launch_args("multi-gpu-ddp.yaml", "--num_processes", "3")
    assert (args.num_processes, args.multi_gpu, args.mixed_precision) == (3, True, "bf16")
    with pytest.raises(ValueError, match="manually pass in `--num_processes`"):  # never a hidden 2
        _launch_args("multi-gpu-ddp.yaml")


def test_the_deepspeed_config_takes_gradient_accumulation_from_the_train_config(monkeypatch):
    """The launch hands DeepSpeed `auto`, which the Trainer fills with the train config's gradient_accumulation_steps
    (transformers' HfTrainerDeepSpeedConfig); a number there must equal the train config's or the Trainer refuses."""
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    args, defaults, _ = _launch_args("deepspeed-zero2.yaml")
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as launch_command sets it
    _, env = prepare_deepspeed_cmd_env(args)
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    assert DeepSpeedPlugin().deepspeed_config["gradient_accumulation_steps"] == "auto"


def test_the_fsdp_config_holds_no_fsdp1_key():
    """fsdp.yaml is FSDP2: accelerate drops FSDP1's keys there (`use_orig_params`, ...), warning they are obsolete."""
    import dataclasses
    import logging

    from accelerate.utils import FullyShardedDataParallelPlugin

    fsdp = yaml.safe_load((CONFIGS / "accelerate" / "fsdp.yaml").read_text(encoding="utf-8"))["fsdp_config"]
    assert fsdp["fsdp_version"] == 2
    fields = {f.name for f in dataclasses.fields(FullyShardedDataParallelPlugin)}
    named = {key if key in fields else key.removeprefix("fsdp_"): value for key, value in fsdp.items()}
    warned: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warned.append(record.getMessage())
    logger = logging.getLogger("accelerate.utils.dataclasses")
    logger.addHandler(handler)
    try:
        FullyShardedDataParallelPlugin(**{k: v for k, v in named.items() if k in fields})
    finally:
        logger.removeHandler(handler)
    assert not [w for w in warned if "FSDP2" in w], warned


@pytest.mark.parametrize("value, expected", [("true", True), ("false", False), (True, True), (False, False)])
def test_bf16_flag_forces_either_way(value, expected):
    assert parse_config(["--use_cpu", "true", "--bf16", str(value).lower()]).sft.bf16 is expected
    from train.config_load import config_from_dict

    assert config_from_dict({"use_cpu": True, "bf16": value}).sft.bf16 is expected  # YAML gives real bools


def test_bf16_unset_follows_the_hardware():
    import torch

    from data_prep.models import resolve_dtype

    native = resolve_dtype("auto", "cuda" if torch.cuda.is_available() else "cpu") == torch.bfloat16
    assert parse_config([]).sft.bf16 is native


def test_bf16_auto_is_the_unset_default(tmp_path):
    unset = parse_config([]).sft.bf16
    yaml_auto = tmp_path / "auto.yaml"
    yaml_auto.write_text("bf16: auto\n")
    assert parse_config(["--bf16", "auto"]).sft.bf16 is unset
    assert parse_config(["--config", str(yaml_auto)]).sft.bf16 is unset
    assert config_from_dict({"bf16": "AUTO"}).sft.bf16 is unset
    yaml_auto.write_text("bf16: maybe\n")
    with pytest.raises(ConfigError, match=r"auto\.yaml: field 'bf16': expected auto, true or false, got 'maybe'$"):
        parse_config(["--config", str(yaml_auto)])
    with pytest.raises(ConfigError, match=r"^command line: argument --bf16: expected auto, true or false"):
        parse_config(["--bf16", "maybe"])


def test_trl_script_keys_pass_when_they_mean_ours_and_are_refused_by_name_otherwise(tmp_path):
    """A `trl sft` YAML names one dataset's splits; ours are fixed per role dataset (train, validation)."""
    trl_yaml = tmp_path / "sft.yaml"
    trl_yaml.write_text("dataset_name: runs/datasets\ndataset_train_split: train\ndataset_test_split: validation\n")
    assert parse_config(["--config", str(trl_yaml)]).distill.dataset_name == "runs/datasets"
    for line, key in [
        ("dataset_test_split: test", "dataset_test_split"),
        ("dataset_train_split: train[:100]", "dataset_train_split"),
        ("dataset_config: default", "dataset_config"),
        ("datasets: [{path: some/dataset}]", "datasets"),
        ("dataset_streaming: true", "dataset_streaming"),
    ]:
        trl_yaml.write_text(f"model_name_or_path: smollm2-135m\n{line}\n")
        with pytest.raises(ConfigError) as err:
            parse_config(["--config", str(trl_yaml)])
        message = str(err.value)
        assert message.startswith(f"{trl_yaml}: field '{key}': TRL's script option, not taken here: ")
        assert "\n" not in message


def test_bad_completion_head_is_a_config_error():
    with pytest.raises(ConfigError, match="completion_head: expected auto, true or false"):
        parse_config(["--completion_head", "sometimes"])


def test_completion_head_auto_is_on_for_cpu_training_only():
    assert parse_config(["--use_cpu", "true"]).use_completion_head() is True
    assert parse_config(["--use_cpu", "true", "--completion_head", "false"]).use_completion_head() is False
    from train.config_load import config_from_dict

    assert config_from_dict({"completion_head": True}).use_completion_head() is True


# --- what a token budget trains ----------------------------------------------------------------------


def _budget_config(**values):
    base = {"dataset_name": "x", "num_train_epochs": 3, "per_device_train_batch_size": 8, "max_tokens_budget": 20000}
    return config_from_dict({**base, **values}, source="test")


def _trained(steps: int, n: int, mean: float, rows_per_step: int) -> float:
    """The tokens `steps` steps train on average: an epoch's tokens over its ceil(n / rows) steps (the last short)."""
    return steps * n * mean / math.ceil(n / rows_per_step)


def test_budget_is_not_capped_by_epochs_on_a_small_dataset():
    # 13 rows of 150 tokens: three epochs are 6 steps (~5,850 tokens); the budget asks for ~20.
    steps = steps_for_budget(_budget_config(), n_train=13, mean_tokens=150.0, world_size=1)
    assert steps == 21
    assert abs(_trained(steps, 13, 150.0, 8) - 20000) <= 13 * 150 / 2 / 2  # within half a step of the budget


def test_budget_steps_count_every_rank_and_accumulation():
    cfg = _budget_config(gradient_accumulation_steps=2, per_device_train_batch_size=4)
    assert steps_for_budget(cfg, n_train=1000, mean_tokens=100.0, world_size=1) == 25  # 8 rows a step
    assert steps_for_budget(cfg, n_train=1000, mean_tokens=100.0, world_size=2) == 13  # 16 rows a step, 63 an epoch


def test_a_short_last_step_is_counted():
    """18 rows at 8 a step are 3 steps an epoch (8, 8, 2): a step holds 6 rows on average, not 8."""
    steps = steps_for_budget(_budget_config(max_tokens_budget=15960), n_train=18, mean_tokens=88.67, world_size=1)
    assert steps == 30  # 10 epochs; counting 8 rows a step gave 22 steps: 7.3 epochs, about 11,700 tokens
    assert abs(_trained(steps, 18, 88.67, 8) - 15960) <= 18 * 88.67 / 3 / 2


def test_two_datasets_under_one_budget_train_the_same_tokens():
    """The curve's promise: students with different row counts and lengths see the same tokens per role."""
    cfg = _budget_config()
    shapes = ((13, 150.0), (18, 88.7), (26, 95.0), (400, 310.0))
    seen = [_trained(steps_for_budget(cfg, n, mean, 1), n, mean, 8) for n, mean in shapes]
    assert max(seen) - min(seen) <= 0.06 * 20000, seen  # within 6% of each other
    assert all(abs(s - 20000) <= 0.05 * 20000 for s in seen), seen


def test_max_steps_still_caps_a_budget_and_no_budget_means_max_steps():
    assert steps_for_budget(_budget_config(max_steps=5), n_train=13, mean_tokens=150.0, world_size=1) == 5
    assert steps_for_budget(_budget_config(max_tokens_budget=0, max_steps=7), 13, 150.0, 1) == 7


def test_the_gpu_recipes_train_and_eval_configs_agree_on_their_folders():
    """The GPU eval config reads the adapters the GPU train config writes, and that config trains its epochs."""
    train = read_yaml(CONFIGS / "train" / "qwen0.5b-gpu.yaml")
    evaluate = yaml.safe_load((CONFIGS / "eval" / "qwen0.5b-gpu.yaml").read_text(encoding="utf-8"))
    [student] = [s for s in evaluate["systems"] if s["name"] == "student"]
    assert student["backend"]["adapters"] == train["output_dir"]
    assert Path(train["dataset_name"]).parent == Path(train["output_dir"]).parent == Path(evaluate["dialogues"]).parent
    assert "max_tokens_budget" not in train
    assert config_from_dict({**train, "bf16": False, "use_cpu": True}).distill.max_tokens_budget == 0  # no GPU here
