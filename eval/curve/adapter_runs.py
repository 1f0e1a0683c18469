"""Training adapters from inside an eval recipe (the quickstart, the learning curve), resumably.

An adapter is kept while it was trained on today's dataset (its fingerprint), student prompt version and
training options (token budget, learning rate); otherwise it is trained again with the command a user
would type (`python -m train`), resumed (`--resume true`) when a killed run's last checkpoint was trained
from the same dataset, prompt version and options.
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
    from distill.adapters.adapters import has_metadata, read_metadata

    if not has_metadata(adapter):
        return "not trained yet"
    return _changed(read_metadata(adapter), dataset, options)


def _changed(meta: Mapping[str, Any], dataset: Path, options: Mapping[str, Any]) -> Optional[str]:
    """What differs between the record of a training run (adapter metadata, checkpoint record) and today's."""
    from datasets import load_from_disk

    from distill.roles.roles import STUDENT_PROMPT_VERSION

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
    groups: dict[tuple, list[str]] = {}
    for role, why in stale.items():
        checkpoint = resumable(adapters / role, datasets / role, options[role])
        if checkpoint:
            print(f"resuming {role} from {checkpoint}: {why}", flush=True)
        elif why != "not trained yet":
            print(f"retraining {role}: {why}", flush=True)
        groups.setdefault((tuple(sorted(options[role].items())), bool(checkpoint)), []).append(role)
    for (flags, resume), roles in groups.items():
        argv = ["--config", str(config), "--dataset_name", str(datasets), "--output_dir", str(adapters)]
        argv += ["--roles", ",".join(roles), *(x for key, value in flags for x in (f"--{key}", str(value)))]
        argv += [] if card_example else ["--card_example", "false"]
        argv += ["--resume", "true"] if resume else []
        _train(argv, roles)
    return stale


def link_identical(adapter: Path, dataset: Path, options: Mapping[str, Any], donors: Sequence[Path]) -> Optional[Path]:
    """Link `adapter` to the first donor adapter trained on the same dataset (its fingerprint) with the same
    `options`, which is what training it again would give; returns the donor, or None when it trains itself.

    A link whose donor was since retrained on other data is removed first, so training never writes into
    another student's adapter."""
    if adapter.is_symlink():
        if stale_reason(adapter, dataset, options) is None:
            return adapter.resolve()
        adapter.unlink()
    if adapter.exists():  # trained here earlier: kept or retrained by `train_stale`
        return None
    for donor in donors:
        if donor.is_dir() and not donor.is_symlink() and stale_reason(donor, dataset, options) is None:
            adapter.parent.mkdir(parents=True, exist_ok=True)
            adapter.symlink_to(donor.resolve(), target_is_directory=True)
            print(f"{adapter}: the same dataset and training options as {donor}; linked, not trained", flush=True)
            return donor
    return None


def resumable(adapter: Path, dataset: Path, options: Mapping[str, Any]) -> Optional[str]:
    """The name of the checkpoint `--resume true` would continue in `adapter`, when its record shows it was trained
    from today's dataset, prompt version and `options`; None otherwise (no checkpoint, or one of another run)."""
    from train.resume import checkpoint_record, last_checkpoint

    found = last_checkpoint(adapter / "checkpoints")
    record = checkpoint_record(found) if found else None
    return Path(found).name if record and _changed(record, dataset, options) is None else None


def _train(argv: list[str], roles: Sequence[str]) -> None:
    from train.__main__ import main as train_main

    print(f"$ python -m train {shlex.join(argv)}", flush=True)
    if rc := train_main(argv):
        raise SystemExit(f"training {', '.join(roles)} failed (exit {rc}); rerun to resume from here")
