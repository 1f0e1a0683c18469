"""`TrainConfig`: every option of `trace-distill train`, on TRL's own config classes and names.

Options are TRL's `SFTConfig` (training) and `ModelConfig` (base model and LoRA), plus `DistillArguments` for
what is ours (which role datasets, the token budget, CPU knobs). This module holds the options and what TRL does
not check of them (`check_values`: bounds, the weights' dtype, the init adapter's LoRA shape, where results go),
run before any model is loaded. `train.config_load` builds a `TrainConfig` from a YAML file and flags.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from trl import ModelConfig, SFTConfig

from distill.datasets.sft_tasks import JOINT
from distill.roles.roles import DEFAULT_STAGES, ROLES, RoleSpec
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
            return declared or list(DEFAULT_STAGES)
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
        value = tristate(self.distill.completion_head, "completion_head")
        return self.device() == "cpu" if value is None else value

    def to_dict(self) -> dict:
        """Every option, flat, as the keys a YAML would use (what an adapter's metadata records)."""
        model = {k: v for k, v in dataclasses.asdict(self.model).items()}
        distill = dataclasses.asdict(self.distill)
        if distill["init_adapter"]:  # by what it holds, not where it lies: a recipe's key, a checkpoint's record
            distill["init_adapter"] = init_fingerprint(distill["init_adapter"])
        return {**self.sft.to_dict(), **model, **distill}


def tristate(value, name: str):
    """True/False for a bool or true/false string, None for auto; anything else is a ConfigError."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    if text == "auto":
        return None
    raise ConfigError(f"{name}: expected auto, true or false, got {value!r}")


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
