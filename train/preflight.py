"""Checks of a training run that need the base model's config but not its weights.

PEFT only finds out that `lora_target_modules` names no layer after the model has loaded, and a
model that cannot be found is reported without the option that named it. Both are checked here
first, on a weightless (meta-device) copy of the architecture, so the error names the config file
and the field and comes in a second or two.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from data_prep.models import ModelNotAvailable, resolve_model
from train.config import ConfigError, TrainConfig


def check_base_model(cfg: TrainConfig) -> str:
    """The base model's local path, once its name resolves and every LoRA target matches a layer."""
    try:
        path = resolve_model(cfg.model.model_name_or_path)
    except ModelNotAvailable as err:
        raise ConfigError(f"{cfg.source}: field 'model_name_or_path': {err}") from None
    targets = cfg.model.lora_target_modules
    if targets is None or targets == "all-linear":
        return path
    names, linear = _module_names(path)
    # PEFT's rules: one string is a regular expression over full module names; a list holds names
    # that match a module's last dotted parts.
    if isinstance(targets, str):
        unmatched = [] if any(re.fullmatch(targets, n) for n in names) else [targets]
    else:
        unmatched = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if unmatched:
        regex = isinstance(targets, str)
        hint = " (one name alone is a regular expression over full names: give a list)" if regex else ""
        raise ConfigError(
            f"{cfg.source}: field 'lora_target_modules': '{unmatched[0]}' matches no layer of "
            f"{cfg.model.model_name_or_path}{hint}; its linear layers: {', '.join(linear)} (or all-linear)"
        )
    return path


def check_launch(cfg: TrainConfig, environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a sharded launch of several roles, and an FSDP launch that would train without a GPU.

    FSDP and DeepSpeed shard one role's training over the processes; several roles in one launch would each be
    wrapped, sharded and saved in turn on the same processes, which no test has run. A DDP launch trains several
    roles one per process instead (train.parallel).

    accelerate sets FSDP up only for accelerator devices (`AcceleratorState`: the FSDP branch is for
    MULTI_GPU and its kin), so on CPU an FSDP config trains as plain data parallel and says nothing:
    a user who tested a sharded save there would have tested DDP's.
    """
    import torch

    fsdp = environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    engine = "FSDP" if fsdp else "DeepSpeed"
    if (fsdp or environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true") and len(cfg.role_list()) > 1:
        raise ConfigError(
            f"{cfg.source}: field 'roles': {engine} shards one role over the processes of a launch; train one role per "
            f"launch (--roles {cfg.role_list()[0]}), or launch a DDP config (configs/accelerate/multi-gpu-ddp.yaml), "
            "which trains several roles one per process"
        )
    if not fsdp:
        return
    if cfg.sft.use_cpu or not torch.accelerator.is_available():
        raise ConfigError(
            f"{cfg.source}: an FSDP launch needs GPUs: on CPU accelerate ignores the FSDP config and "
            "trains as plain data parallel; use configs/accelerate/cpu-ddp.yaml here"
        )


def _module_names(path: str) -> tuple[list[str], list[str]]:
    """Every module's full name, and the short names of the linear layers (what a target usually is)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    modules = list(skeleton.named_modules())
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in modules if isinstance(m, torch.nn.Linear)})
    return [n for n, _ in modules], linear
