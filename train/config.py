"""`TrainConfig`: every option of `trace-distill train`, on TRL's own config classes and names.

Options are TRL's `SFTConfig` (training) and `ModelConfig` (base model and LoRA), parsed with
`TrlParser` as `trl sft` parses them, plus `DistillArguments` for what is ours (which role datasets,
the token budget, CPU knobs). A YAML config's keys are exactly the flags: `--config
configs/train/smollm2-cpu.yaml` sets the defaults and flags on the command line override them, so a
TRL user's training keys (`model_name_or_path`, `per_device_train_batch_size`, `lora_r`, ...) work as
they are. TRL's script keys for one dataset's config and splits (`TRL_SCRIPT_KEYS`) have no meaning
over per-role datasets with fixed splits: the value ours already is passes, any other is refused by
name. Unknown keys are an error that names the file and the key, so a typo never silently falls back
to a default. `bf16` takes auto (the default) as well as true and false.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib.util
import json
import os
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from trl import ModelConfig, SFTConfig, TrlParser

from data_prep.config_file import read_mapping
from distill.datasets.sft_tasks import JOINT
from distill.roles.roles import CORE_ROLES, ROLES, RoleSpec
from train import TOKENS_BUDGET

# TRL's `dtype` names for the base's weights (train.precision.base_dtype resolves them).
WEIGHT_DTYPES = ("auto", "bfloat16", "float16", "float32")


class ConfigError(ValueError):
    """A config file or flag is wrong; the message names the file and the field."""


@dataclass
class DistillArguments:
    """What trace-distill adds to TRL's options: the per-role datasets and a CPU-friendly budget."""

    dataset_name: str = field(
        default="runs/datasets",
        metadata={
            "help": "Role datasets: a folder of them (`distill datasets --out`, one DatasetDict per <role>/), or a "
            "hub dataset id / staged folder with one config per role (`distill datasets --push-to-hub`)."
        },
    )
    roles: str = field(
        default="all",
        metadata={
            "help": "Comma-separated roles to train in turn (e.g. asi,cae) or 'all' (= asi,cae,srp,ers); "
            "'joint' trains one adapter for every role on <dataset_name>/joint (distill datasets --joint). A DDP "
            "launch of K processes trains K roles at once, one per process (one role: data parallel)."
        },
    )
    pipeline: Optional[str] = field(
        default=None,
        metadata={
            "help": "A declared pipeline's YAML (e.g. configs/pipelines/escot.yaml, as its traces were made with): "
            "its roles can be trained, and 'all' means them."
        },
    )
    max_tokens_budget: int = field(
        default=0,
        metadata={
            "help": "If > 0, train each role on about this many tokens: it sets the steps, overriding "
            "num_train_epochs (max_steps, when set, still caps them); 0 (the default): num_train_epochs or "
            f"max_steps as given. The quickstart and `eval curve` set one ({TOKENS_BUDGET} unless told)."
        },
    )
    completion_head: str = field(
        default="auto",
        metadata={
            "help": "auto, true or false: run the LM head only on completion tokens (under autocast) instead of "
            "TRL's fp32 head over every position. Same loss; faster on CPU; on a GPU unsettled (faster in one H200 "
            "run, slower in another and on an H100: docs/performance.md#on-a-gpu), so auto = on for CPU training only."
        },
    )
    resume: bool = field(
        default=False,
        metadata={"help": "Resume each role from its last checkpoint in <output_dir>/<role>/checkpoints/."},
    )
    early_stopping_patience: int = field(
        default=0,
        metadata={
            "help": "If > 0, train to convergence: evaluate and save every epoch, stop when the validation loss has "
            "not improved for this many epochs, and keep the best epoch's adapter (num_train_epochs is the most). "
            "Needs a validation split (distill datasets --eval-fraction)."
        },
    )
    init_adapter: str = field(
        default="",
        metadata={
            "help": "An adapter folder (adapter_model.safetensors) whose LoRA weights every role starts from, "
            "trainable, instead of a fresh LoRA: a two-stage student's roles start from its multitask adapter. Its "
            "rank and alpha must be this run's (lora_r, lora_alpha); empty (the default): a fresh LoRA."
        },
    )
    card_example: bool = field(
        default=True,
        metadata={
            "help": "After training, answer the role's first validation prompt greedily and show it on the adapter "
            "card. false skips it (a sweep's adapters, whose cards nobody reads: it decodes up to the role's cap)."
        },
    )
    num_threads: int = field(
        default=0,
        metadata={
            "help": "torch CPU threads per process (0: torch's default). Use 1 on a CPU shared with other jobs, "
            "where oversubscribed threads slow every step."
        },
    )


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
        flag = _tristate(value, "bf16")
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


@dataclass
class TrainConfig:
    """One training run: ours, TRL's training config and TRL's model config. Nothing is stored twice."""

    distill: DistillArguments
    sft: SFTConfig
    model: ModelConfig
    source: str = "command line"  # the YAML file (or flags) the options came from, for error messages

    def role_list(self) -> list[str]:
        roles = self.roles()
        declared = [name for name, spec in roles.items() if spec.pipeline is not None]
        if self.distill.roles.strip() == "all":
            return declared or list(CORE_ROLES)
        names = [r.strip() for r in self.distill.roles.split(",") if r.strip()]
        unknown = [r for r in names if r not in roles and r != JOINT]
        if not names or unknown:
            raise ConfigError(
                f"roles: unknown role(s) {unknown or [self.distill.roles]} (known: all, {', '.join(roles)}, {JOINT})"
            )
        return names

    def roles(self) -> Mapping[str, RoleSpec]:
        """The roles this run may train: the built-in ones, and its declared pipeline's (`pipeline`) in stage order."""
        if not self.distill.pipeline:
            return ROLES
        from distill.roles.declared import load_pipeline, pipeline_roles

        try:
            return pipeline_roles(load_pipeline(self.distill.pipeline))
        except ValueError as exc:
            raise ConfigError(f"pipeline: {exc}") from None

    def device(self) -> str:
        """cpu or cuda: where this config trains."""
        import torch

        return "cpu" if self.sft.use_cpu or not torch.cuda.is_available() else "cuda"

    def use_completion_head(self) -> bool:
        """Resolve `completion_head` (auto/true/false, or a YAML bool): auto is on for CPU training."""
        value = _tristate(self.distill.completion_head, "completion_head")
        return self.device() == "cpu" if value is None else value

    def to_dict(self) -> dict:
        """Every option, flat, as the keys a YAML would use (what an adapter's metadata records)."""
        model = {k: v for k, v in dataclasses.asdict(self.model).items()}
        distill = dataclasses.asdict(self.distill)
        if distill["init_adapter"]:  # by what it holds, not where it lies: a recipe's key, a checkpoint's record
            distill["init_adapter"] = init_fingerprint(distill["init_adapter"])
        return {**self.sft.to_dict(), **model, **distill}


def _tristate(value, name: str):
    """True/False for a bool or true/false string, None for auto; anything else is a ConfigError."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    if text == "auto":
        return None
    raise ConfigError(f"{name}: expected auto, true or false, got {value!r}")


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


def check_values(cfg: TrainConfig, source: str) -> None:
    """What TRL does not check itself, before any model is loaded; errors name the source and field."""
    sft, model = cfg.sft, cfg.model
    at_least = {
        "lora_r": (model.lora_r, 1), "lora_alpha": (model.lora_alpha, 1),
        "per_device_train_batch_size": (sft.per_device_train_batch_size, 1),
        "gradient_accumulation_steps": (sft.gradient_accumulation_steps, 1), "max_length": (sft.max_length or 8, 8),
        "max_tokens_budget": (cfg.distill.max_tokens_budget, 0), "num_threads": (cfg.distill.num_threads, 0),
    }  # fmt: skip
    for name, (value, least) in at_least.items():
        if value < least:
            raise ConfigError(f"{source}: field '{name}': must be >= {least}, got {value!r}")
    if model.dtype is not None and model.dtype not in WEIGHT_DTYPES:
        known = ", ".join(WEIGHT_DTYPES)
        raise ConfigError(f"{source}: field 'dtype': expected {known} or unset (follow bf16), got {model.dtype!r}")
    if not (model.model_name_or_path or "").strip():
        raise ConfigError(f"{source}: field 'model_name_or_path': empty")
    if not model.use_peft:
        raise ConfigError(f"{source}: field 'use_peft': trace-distill trains one LoRA adapter per role; keep it true")
    if sft.max_steps <= 0 and sft.num_train_epochs <= 0:
        raise ConfigError(f"{source}: field 'num_train_epochs': must be > 0 when max_steps is not set")
    if sft.resume_from_checkpoint:
        raise ConfigError(f"{source}: field 'resume_from_checkpoint': each role has its own; use --resume true")
    if sft.push_to_hub and (sft.hub_model_id or "").count("/") != 1:
        raise ConfigError(f"{source}: field 'hub_model_id': --push_to_hub needs 'user/name', got {sft.hub_model_id!r}")
    if model.load_in_4bit and importlib.util.find_spec("bitsandbytes") is None:
        hint = "pip install 'trace-distill[qlora]'"
        raise ConfigError(f"{source}: field 'load_in_4bit': QLoRA needs bitsandbytes ({hint})")
    cfg.role_list()
    cfg.use_completion_head()
    _check_init_adapter(cfg, source)
    _check_outputs(cfg, source)


def init_fingerprint(adapter: str | Path) -> str:
    """What an adapter another starts from (`init_adapter`) holds: its LoRA weights and config, not its card or
    checkpoints. The settings an adapter and a checkpoint record (`TrainConfig.to_dict`) give it in place of the
    path, so an init adapter retrained retrains what starts from it (never resumed), and a moved one does not."""
    from distill.pipeline.stage_key import content_fingerprint

    weights, config = (
        content_fingerprint(Path(adapter) / n) for n in ("adapter_model.safetensors", "adapter_config.json")
    )
    return f"weights {weights}, config {config}"


def _check_init_adapter(cfg: TrainConfig, source: str) -> None:
    """The adapter every role starts from is there and has this run's LoRA shape (its rank and alpha)."""
    init = cfg.distill.init_adapter
    if not init:
        return
    config, weights = Path(init) / "adapter_config.json", Path(init) / "adapter_model.safetensors"
    if not (config.is_file() and weights.is_file()):
        raise ConfigError(f"{source}: field 'init_adapter': {init} is not a trained adapter "
                          "(no adapter_config.json and adapter_model.safetensors in it)")  # fmt: skip
    saved = json.loads(config.read_text(encoding="utf-8"))
    ours = {"r": cfg.model.lora_r, "lora_alpha": cfg.model.lora_alpha}
    if differ := [f"{k} {saved.get(k)} (this run: {v})" for k, v in ours.items() if saved.get(k) != v]:
        raise ConfigError(f"{source}: field 'init_adapter': {init} has LoRA {', '.join(differ)}; "
                          "train with its lora_r and lora_alpha")  # fmt: skip


def _check_outputs(cfg: TrainConfig, source: str) -> None:
    """Where results go, checked here because TRL and transformers only check them after the model loads."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from data_prep.commands import not_a_directory

    unknown = [name for name in cfg.sft.report_to or [] if name not in (*INTEGRATION_TO_CALLBACK, "all", "none")]
    if unknown:
        known = ", ".join(["none", "all", *INTEGRATION_TO_CALLBACK])
        raise ConfigError(f"{source}: field 'report_to': unknown integration '{unknown[0]}' (known: {known})")
    if problem := not_a_directory(cfg.sft.output_dir):
        raise ConfigError(f"{source}: field 'output_dir': {cfg.sft.output_dir} must be a directory, but {problem}")
