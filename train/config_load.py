"""Loading `trace-distill train`'s options into a `TrainConfig` (`train.config`): a YAML file, flags, or a mapping.

Options are parsed with `TrlParser` as `trl sft` parses them, over TRL's `SFTConfig` and `ModelConfig` and our
`DistillArguments`, with trace-distill's own defaults where they differ from TRL's (`_our_defaults`). A YAML
config's keys are exactly the flags: `--config configs/train/smollm2-cpu.yaml` sets the defaults and flags on the
command line override them, so a TRL user's training keys (`model_name_or_path`, `per_device_train_batch_size`,
`lora_r`, ...) work as they are. TRL's script keys for one dataset's config and splits (`TRL_SCRIPT_KEYS`) have no
meaning over per-role datasets with fixed splits: the value ours already is passes, any other is refused by name.
Unknown keys are an error that names the file and the key, so a typo never silently falls back to a default.
`bf16` takes auto (the default) as well as true and false. The config built is checked (`check_values`) before
it is handed back.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import typing
import warnings
from pathlib import Path
from typing import Any

from trl import ModelConfig, SFTConfig, TrlParser

from data_prep.config_file import read_mapping
from train.config import ConfigError, DistillArguments, TrainConfig, check_values, tristate


def _native_bf16() -> bool:
    """bf16 where this machine runs it natively (recent GPUs, CPUs with AMX/AVX512-BF16)."""
    import torch

    from data_prep.models import resolve_dtype

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return resolve_dtype("auto", device) == torch.bfloat16


def _our_defaults() -> dict[str, Any]:
    """Where trace-distill's defaults differ from TRL's; a YAML or a flag overrides each."""
    import torch

    return {
        "model_name_or_path": "smollm2-135m",  # the embedded default, so nothing needs the hub
        "output_dir": "runs/adapters",  # adapters land in <output_dir>/<role>/
        "use_peft": True,  # every role is a LoRA adapter; the pipeline swaps them on one base
        "lora_target_modules": "all-linear",
        "lora_dropout": 0.0,  # TRL's 0.05 copies every LoRA input, which costs CPU time (docs/history/performance.md)
        "learning_rate": 2e-4,  # TRL's 2e-5 is a full fine-tuning rate; LoRA wants ~10x
        "bf16": "auto",  # TRL's default (on) is slower than fp32 on a CPU without native bf16
        "use_cpu": not torch.cuda.is_available(),  # bf16 on a CPU needs it (TrainingArguments checks)
        "gradient_checkpointing": False,  # TRL turns it on; on small models it only costs time
        "padding_free": True,  # as both shipped configs: no compute on pad tokens, rows flattened into one
        "dtype": None,  # TRL's float32 would keep a GPU's bf16 run in float32 weights (train.precision)
        "save_steps": 0.25,  # four checkpoints per role, so --resume always has one
        "report_to": "none",
    }


def _bf16_value(value: str) -> bool:
    """`--bf16` / `bf16:` as TRL reads it (true/false), plus auto: bf16 where this machine runs it natively."""
    try:
        flag = tristate(value, "bf16")
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("bf16: ")) from None
    return _native_bf16() if flag is None else flag


# TRL's script keys (`trl sft`'s ScriptArguments and dataset mixtures): key -> (the value that means
# what trace-distill does anyway, why any other value cannot apply).
TRL_SCRIPT_KEYS = {
    "dataset_train_split": ("train", "each role dataset trains on its 'train' split, as `distill datasets` writes it"),
    "dataset_test_split": ("validation", "each role dataset evaluates on its 'validation' split, "
                           "which `distill datasets --eval-fraction` sizes"),
    "dataset_config": (None, "each role is its own dataset, or hub config; choose them with roles"),
    "datasets": (None, "TRL's dataset mixtures; dataset_name names the folder or hub id of the role datasets"),
    "dataset_streaming": (False, "role datasets are loaded whole"),
    "streaming": (False, "role datasets are loaded whole"),
    "test_split_size": (None, "`distill datasets --eval-fraction` makes the validation split"),
}  # fmt: skip

# trace-distill's own names before it took TRL's, so an old YAML gets a hint instead of a bare "unknown".
RENAMED = {
    "model": "model_name_or_path", "r": "lora_r", "alpha": "lora_alpha",
    "dropout": "lora_dropout", "target_modules": "lora_target_modules", "epochs": "num_train_epochs",
    "batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
    "warmup_ratio": "warmup_steps (a float < 1 is a ratio)", "eval": "do_eval",
}  # fmt: skip


_CLASSES = (DistillArguments, SFTConfig, ModelConfig)


def known_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for cls in _CLASSES for f in dataclasses.fields(cls) if f.init}


def _plain_types() -> dict[str, type]:
    """bool, int or float for the fields declared as one (optional or not); others are left to argparse."""
    out = {}
    for cls in _CLASSES:
        for name, hint in typing.get_type_hints(cls).items():
            args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
            if len(args) == 1 and args[0] in (bool, int, float):
                out[name] = args[0]
    return out


def _unknown_key(key: str, source: str) -> ConfigError:
    if key in RENAMED:
        return ConfigError(f"{source}: unknown key '{key}' (TRL's name, which trace-distill uses: {RENAMED[key]})")
    close = difflib.get_close_matches(key, known_fields(), n=1)
    hint = f"did you mean '{close[0]}'?" if close else "see `trace-distill train --help`"
    return ConfigError(f"{source}: unknown key '{key}' ({hint})")


def read_yaml(path: str | Path) -> dict:
    """Load a train YAML and check every key and plain value; errors name the file and key."""
    return check_keys(read_mapping(path, ConfigError), str(path))


def check_keys(values: dict, source: str) -> dict:
    """Names and plain types of YAML-given values, which argparse would pass through unconverted."""
    known, plain_types = known_fields(), _plain_types()
    out = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name == "env":  # TRL's config files may set environment variables
            continue
        if name in TRL_SCRIPT_KEYS:
            ours, why = TRL_SCRIPT_KEYS[name]
            if value != ours:
                raise ConfigError(f"{source}: field '{name}': TRL's script option, not taken here: {why}")
            continue
        if name == "bf16" and isinstance(value, str):
            try:
                _bf16_value(value)
            except argparse.ArgumentTypeError as err:
                raise ConfigError(f"{source}: field 'bf16': {err}") from None
        if name not in known:
            raise _unknown_key(str(key), source)
        plain = plain_types.get(name)
        if plain is not None and value is not None and not isinstance(value, str):
            bad = isinstance(value, bool) != (plain is bool) or not isinstance(value, (int, float))
            if bad or (plain is int and isinstance(value, float)):
                raise ConfigError(f"{source}: field '{name}': expected {plain.__name__}, got {value!r}")
        out[name] = value
    return out


class _Parser(TrlParser):
    """TrlParser whose errors are ConfigErrors (one line, naming the source) instead of argparse exits."""

    source = "command line"

    def error(self, message: str):
        raise ConfigError(f"{self.source}: {message}")


def make_parser(prog: str = "trace-distill train") -> _Parser:
    parser = _Parser(
        _CLASSES,
        prog=prog,
        description="Per-role LoRA SFT on the datasets built by `distill datasets` (TRL's SFTConfig and "
        "ModelConfig, plus trace-distill's options).",
        epilog="--config FILE.yaml sets defaults from a YAML file whose keys are these flags; flags on the command "
        "line override it. `trace-distill train export --help` for export.",
    )
    parser.set_defaults(**_our_defaults())
    for action in parser._actions:  # HfArgumentParser's bool type refuses "auto"
        if action.dest == "bf16":
            action.type = _bf16_value
            action.help = "auto (bf16 where this machine runs it natively, else fp32), true or false"
        if action.dest == "dtype":
            action.help = (
                "the base's weights: unset, bf16 for a bf16 run on a GPU, else float32 (bf16 is then autocast); "
                "float32, bfloat16, float16, or auto (the checkpoint's own)"
            )
    return parser


def parse_config(argv: list[str], prog: str = "trace-distill train") -> TrainConfig:
    """`--config file.yaml` sets the defaults, flags override them (TrlParser)."""
    argv = list(argv)
    parser = make_parser(prog)
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ConfigError("--config needs a YAML file path")
        path = argv[i + 1]
        values = read_yaml(path)
        _apply_env(path)
        parser.set_defaults_with_config(**values)
        parser.source = f"{path} (or its command-line overrides)"
        del argv[i : i + 2]
    return _build(parser, argv)


def _apply_env(path: str) -> None:
    env = read_mapping(path, ConfigError).get("env") or {}
    if not isinstance(env, dict):
        raise ConfigError(f"{path}: field 'env': expected a mapping of VARIABLE: value")
    for key, value in env.items():
        os.environ[str(key)] = str(value)


def config_from_dict(values: dict, source: str = "<dict>") -> TrainConfig:
    """Build a config from a mapping of YAML keys (tests, benchmarks); errors name `source`."""
    parser = make_parser()
    parser.set_defaults_with_config(**check_keys(values, source))
    parser.source = source
    return _build(parser, [])


def _build(parser: _Parser, argv: list[str]) -> TrainConfig:
    try:
        with warnings.catch_warnings():
            # TRL 1.16's SFTConfig still defaults transformers' deprecated name; every run would warn.
            warnings.filterwarnings("ignore", "`gradient_checkpointing` is deprecated", FutureWarning)
            distill, sft, model = parser.parse_args_into_dataclasses(args=argv)
    except ConfigError:
        raise
    except ValueError as err:  # TrainingArguments' and ModelConfig's own checks
        first = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(f"{parser.source}: {first}") from None
    cfg = TrainConfig(distill=distill, sft=sft, model=model, source=parser.source)
    check_values(cfg, parser.source)
    return cfg
