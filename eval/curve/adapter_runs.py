"""Training adapters from inside an eval recipe (the quickstart, the learning curve), resumably.

An adapter is kept while it was trained on today's dataset (its fingerprint), student prompt version and
token budget; otherwise it is trained again with the command a user would type (`python -m train`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CPU_TRAIN_CONFIG = CONFIGS / "train" / "smollm2-cpu.yaml"


def stale_reason(adapter: Path, dataset: Path, max_tokens_budget: int) -> Optional[str]:
    """Why the adapter at `adapter` must be (re)trained, or None when it matches the dataset and budget."""
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
    if (meta.get("train_config") or {}).get("max_tokens_budget") != max_tokens_budget:
        return "the token budget changed"
    return None


def train_stale(
    datasets: Path,
    adapters: Path,
    budgets: Mapping[str, int],
    config: Path = CPU_TRAIN_CONFIG,
    card_example: bool = True,
) -> dict[str, str]:
    """Train the roles of `budgets` (role -> training tokens) whose adapters are stale, one `python -m train`
    run per budget; returns role -> why trained.

    card_example=False skips the card's example answer, which decodes up to the role's token cap per adapter."""
    stale = {r: why for r, n in budgets.items() if (why := stale_reason(adapters / r, datasets / r, n))}
    for role, why in stale.items():
        if why != "not trained yet":
            print(f"retraining {role}: {why}", flush=True)
    for budget in dict.fromkeys(budgets[r] for r in stale):
        roles = [r for r in stale if budgets[r] == budget]
        argv = ["--config", str(config), "--dataset_name", str(datasets), "--output_dir", str(adapters)]
        argv += ["--roles", ",".join(roles), "--max_tokens_budget", str(budget)]
        argv += [] if card_example else ["--card_example", "false"]
        _train(argv, roles)
    return stale


def _train(argv: list[str], roles: Sequence[str]) -> None:
    from train.__main__ import main as train_main

    print(f"$ python -m train {shlex.join(argv)}", flush=True)
    if rc := train_main(argv):
        raise SystemExit(f"training {', '.join(roles)} failed (exit {rc}); rerun to resume from here")
