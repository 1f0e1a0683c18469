"""Saving a trained adapter, and proving the file holds what was trained.

Under FSDP and ZeRO a save can go wrong without an error: a sharded state dict leaves the adapter
file empty or partial, and a save from the wrong rank writes its initial weights. A GPU user would
find out after hours, when the adapter loads and answers like the base. So every save is checked
against a fingerprint of the weights in memory (the count of LoRA tensors and their squared norm),
taken on every rank before saving, and a mismatch fails the run at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Optional

import torch

ADAPTER_WEIGHTS = "adapter_model.safetensors"  # PEFT's file name


class AdapterSaveError(RuntimeError):
    """The saved adapter file does not hold the weights that were trained."""


def _full(param: torch.Tensor) -> torch.Tensor:
    # FSDP2 holds parameters as DTensors: the full tensor is a gather, so every rank must take part
    full_tensor = getattr(param, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else param


def _fingerprint(named: Iterable[tuple[str, torch.Tensor]]) -> dict:
    tensors = [t for n, t in named if "lora_" in n]
    return {"lora_tensors": len(tensors), "sq_norm": sum(float(t.double().pow(2).sum()) for t in tensors)}


def _matches(found: dict, expected: dict, rel_tol: float = 1e-3) -> bool:
    # the tolerance covers a bf16 file written from fp32 weights; initial weights (B = 0) or a shard
    # differ by far more
    same_count = found["lora_tensors"] == expected.get("lora_tensors")
    return same_count and math.isclose(found["sq_norm"], expected["sq_norm"], rel_tol=rel_tol)


def lora_fingerprint(model: torch.nn.Module) -> dict:
    """The LoRA weights' count and squared L2 norm (float64); a collective under FSDP2."""
    return _fingerprint((n, _full(p.detach())) for n, p in model.named_parameters())


def file_fingerprint(adapter_dir: Path) -> dict:
    """The same fingerprint, read from a saved adapter's weights file."""
    from safetensors.torch import load_file

    path = Path(adapter_dir) / ADAPTER_WEIGHTS
    if not path.is_file():
        raise AdapterSaveError(f"{adapter_dir}: no {ADAPTER_WEIGHTS} was written")
    return _fingerprint(load_file(str(path)).items())


def check_fingerprint(adapter_dir: Path, expected: dict) -> None:
    """Fail when the file's LoRA tensors differ from `expected` in number or norm."""
    found = file_fingerprint(adapter_dir)
    if not _matches(found, expected):
        raise AdapterSaveError(
            f"{adapter_dir}/{ADAPTER_WEIGHTS} does not hold the trained weights: "
            f"{found['lora_tensors']} LoRA tensors with squared norm {found['sq_norm']:.6g}, "
            f"trained {expected['lora_tensors']} with {expected['sq_norm']:.6g}"
        )


def _fsdp1(trainer) -> bool:
    # FSDP1 keeps flat shards outside forward: their per-rank norms are not the model's
    return trainer.is_fsdp_enabled and not getattr(trainer.accelerator, "is_fsdp2", False)


def save_adapter(trainer, out: Path) -> Optional[dict]:
    """Write the trained adapter (and tokenizer) to `out`; every rank calls it, rank 0 writes.

    Under FSDP gathering the weights is a collective, and with a sharded state dict `save_model`
    writes nothing, so the plugin is switched to a full state dict first, as PEFT's FSDP guide does.
    `Trainer.save_model` then writes the adapter alone, from the gathered weights under FSDP and ZeRO.
    Returns the in-memory fingerprint the file was checked against (None under FSDP1, not checked).
    """
    fingerprint = None if _fsdp1(trainer) else lora_fingerprint(trainer.model)
    if trainer.is_fsdp_enabled:
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(str(out))
    trainer.accelerator.wait_for_everyone()  # rank 0 may still be writing
    if fingerprint is not None and trainer.is_world_process_zero():
        check_fingerprint(out, fingerprint)
    return fingerprint


def check_loaded_adapter(folder: Path) -> dict:
    """Load `folder` with plain PEFT (no trace-distill code on the load path) and report on its weights.

    `ok` when every LoRA B matrix moved from its zero start and the loaded weights match the
    fingerprint that training took in memory before saving (the metadata's `lora_fingerprint`).
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from distill.adapters.adapters import read_metadata

    meta = read_metadata(folder)
    base = AutoModelForCausalLM.from_pretrained(meta["base_model_path"])
    model = PeftModel.from_pretrained(base, str(folder))
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    loaded, trained = lora_fingerprint(model), meta.get("lora_fingerprint") or {}
    matches = _matches(loaded, trained)
    moved = sum(int(p.abs().sum() > 0) for p in lora_b)
    return {
        "adapter": str(folder),
        "distributed_type": meta.get("distributed_type"),
        "world_size": meta.get("world_size"),
        "lora_tensors": loaded["lora_tensors"],
        "lora_b_moved": moved,
        "lora_b": len(lora_b),
        "matches_trained_weights": matches,
        "ok": matches and moved == len(lora_b) > 0,
    }
