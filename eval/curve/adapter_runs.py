"""Training adapters from inside an eval recipe (the quickstart, the learning curve), resumably.

An adapter is kept while it was trained on today's dataset (its fingerprint), student prompt version and
training options (token budget, learning rate); otherwise it is trained again with the command a user
would type (`python -m train`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CPU_TRAIN_CONFIG = CONFIGS / "train" / "smollm2-cpu.yaml"


def stale_reason(adapter: Path, dataset: Path, options: Mapping[str, Any]) -> Optional[str]:
    """Why the adapter at `adapter` must be (re)trained, or None when it matches the dataset and the training
    `options` (train flags, e.g. max_tokens_budget, learning_rate) it was trained with."""
    from datasets import load_from_disk

    from distill.adapters.adapters import has_metadata, read_metadata
    from distill.roles.roles import STUDENT_PROMPT_VERSION

    if not has_metadata(adapter):
        return "not trained yet"
    meta = read_metadata(adapter)
    if meta.get("dataset_fingerprint") != load_from_disk(str(dataset))["train"]._fingerprint:
        return "its dataset changed"
    if meta.get("prompt_version") != STUDENT_PROMPT_VERSION:
        return f"it was trained for student prompt version {meta.get('prompt_version')}"
    trained = meta.get("train_config") or {}
    for key, value in options.items():
        if trained.get(key) != value:
            return "the token budget changed" if key == "max_tokens_budget" else f"its {key} changed"
    return None


def train_stale(
    datasets: Path,
    adapters: Path,
    options: Mapping[str, Mapping[str, Any]],
    config: Path = CPU_TRAIN_CONFIG,
    card_example: bool = True,
) -> dict[str, str]:
    """Train the roles of `options` (role -> train flags, e.g. {"max_tokens_budget": 6000}) whose adapters are
    stale, one `python -m train` run per set of flags; returns role -> why trained.

    card_example=False skips the card's example answer, which decodes up to the role's token cap per adapter."""
    stale = {r: why for r, o in options.items() if (why := stale_reason(adapters / r, datasets / r, o))}
    for role, why in stale.items():
        if why != "not trained yet":
            print(f"retraining {role}: {why}", flush=True)
    groups: dict[tuple, list[str]] = {}
    for role in stale:
        groups.setdefault(tuple(sorted(options[role].items())), []).append(role)
    for flags, roles in groups.items():
        argv = ["--config", str(config), "--dataset_name", str(datasets), "--output_dir", str(adapters)]
        argv += ["--roles", ",".join(roles), *(x for key, value in flags for x in (f"--{key}", str(value)))]
        argv += [] if card_example else ["--card_example", "false"]
        _train(argv, roles)
    return stale


def _train(argv: list[str], roles: Sequence[str]) -> None:
    from train.__main__ import main as train_main

    print(f"$ python -m train {shlex.join(argv)}", flush=True)
    if rc := train_main(argv):
        raise SystemExit(f"training {', '.join(roles)} failed (exit {rc}); rerun to resume from here")
