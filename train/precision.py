"""How the base model is loaded for training: the dtype of its weights, and an attention that padding-free batches
can run on.

**Weights.** TRL's `dtype` key (ModelConfig) names the dtype the frozen base is loaded in. Unset (our default),
it follows `bf16`: a GPU run with `bf16: true` loads bf16 weights, half the memory of float32 weights under bf16
autocast, and the LoRA weights stay float32 (PEFT's `autocast_adapter_dtype`); a CPU run, or one without bf16,
loads float32, and `bf16` there is autocast over those weights. `dtype: float32` keeps float32 weights under
autocast on a GPU too; `dtype: bfloat16` loads bf16 weights anywhere; `auto` takes the checkpoint's own dtype.

**Attention.** A padding-free batch (`padding_free: true`, or BFD packing, which TRL makes padding-free) is one
row of examples end to end whose positions restart at 0 for each. TRL documents it for FlashAttention 2 or 3
(SFTConfig's `padding_free` help), whose varlen kernels attend within each example. transformers' sdpa, eager and
flex get a block-diagonal mask built from the positions instead: the loss is the same, but sdpa and eager compute
every example against every other and mask the result away. On a CPU, distill's attention attends by example
(`train.sft.attend_by_example`); elsewhere a flash kernel must be named, and is checked to be installed before
the model loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional, Union

import torch

from train.config import ConfigError, TrainConfig

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# Hub kernels (`kernels-community/flash-attn2`, ...) are flash kernels too; they need the `kernels` package.
FLASH_PREFIX = "flash_attention_"


def base_dtype(cfg: TrainConfig) -> Union[torch.dtype, str]:
    """The dtype the base's weights load in: the config's `dtype`, or, unset, bf16 for a bf16 run on a GPU."""
    named = cfg.model.dtype  # checked against TRL's names when the config was built (train.config.check_values)
    if named == "auto":
        return "auto"
    if named:
        return DTYPES[named]
    return torch.bfloat16 if cfg.sft.bf16 and cfg.device() != "cpu" else torch.float32


def runs_padding_free(cfg: TrainConfig) -> bool:
    """Whether TRL flattens each batch into one row (padding-free, or BFD packing, which implies it)."""
    sft = cfg.sft
    return bool(sft.padding_free or (sft.packing and sft.packing_strategy in ("bfd", "bfd_split")))


def check_attention(cfg: TrainConfig, warn: Callable[[str], None]) -> None:
    """Refuse a named attention that cannot run here; warn in one line when padding-free batches would run on an
    attention that attends across the whole flattened row."""
    name = cfg.model.attn_implementation
    where = f"{cfg.source}: field 'attn_implementation'"
    if name and _is_flash(name):
        if cfg.device() == "cpu":
            raise ConfigError(
                f"{where}: {name} needs a CUDA GPU; on a CPU leave it unset (distill's attention, by example) "
                "or name sdpa"
            )
        if not _flash_installed(name):
            raise ConfigError(
                f"{where}: {name} is not installed here ({_install_hint(name)}); or set it to sdpa, which runs "
                "padding-free batches correctly but attends across the whole flattened batch"
            )
        return
    if not runs_padding_free(cfg) or (cfg.device() == "cpu" and name is None):  # distill's, by example
        return
    warn(
        f"warning: {cfg.source}: padding_free on {name or 'sdpa (the default)'} attends every example of a "
        "flattened batch to every other (same loss, more compute); attn_implementation: flash_attention_2 "
        "attends within each (TRL's padding-free requirement)"
    )


def _is_flash(name: str) -> bool:
    return name.startswith(FLASH_PREFIX) or ("/" in name and "flash" in name)


def _flash_installed(name: str) -> bool:
    from transformers.utils import import_utils

    if "/" in name:  # a hub kernel: transformers fetches it at load through `kernels`
        return import_utils.is_kernels_available()
    check: Optional[Callable] = getattr(
        import_utils, f"is_flash_attn_{name.removeprefix(FLASH_PREFIX)}_available", None
    )
    if check is None:
        return True  # a flash name this transformers does not know: its own load error names it
    return bool(check() or (import_utils.is_kernels_available() and check(kernels_fallback_ok=True)))


def _install_hint(name: str) -> str:
    if "/" in name:
        return "pip install kernels"
    version = name.removeprefix(FLASH_PREFIX)
    return "pip install flash-attn --no-build-isolation" if version == "2" else f"the flash-attn {version} package"
