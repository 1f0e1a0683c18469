"""Training adapters from inside an eval recipe (the quickstart, the learning curve), resumably.

An adapter is kept exactly while its stage key holds (`distill.pipeline.stage_key`): the dataset it learnt (its
fingerprint), every training setting (the train YAML's, with the recipe's flags over them: budget, learning
rate, LoRA rank, epochs...), the student prompts (their version and their rendered text) and the base model (its
weights, the dtype it trains in). Otherwise it is trained again with the command a user would type (`python -m
train`), resumed (`--resume true`) when a killed run's last checkpoint was trained from the same dataset, prompt
version and settings. An adapter trained before keys were recorded is kept (its key written) while its metadata
shows the same dataset, prompt version and settings.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from distill.pipeline.stage_key import model_fingerprint, prompt_fingerprint, stale, write_key

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CPU_TRAIN_CONFIG = CONFIGS / "train" / "smollm2-cpu.yaml"
PLACEMENT = ("dataset_name", "output_dir", "roles")  # where a training run reads and writes, not what it learns


def training_settings(options: Mapping[str, Any], config: Path | str) -> dict[str, Any]:
    """The settings the train YAML writes (all but where a run reads and writes), the recipe's flags (`options`)
    over them, each as training resolves it (`report_to: none` is []): what an adapter's metadata records."""
    from train.config_load import config_from_dict, read_yaml

    written = {**read_yaml(config), **options}
    resolved = config_from_dict(dict(written), str(config)).to_dict()
    return {k: resolved.get(k, v) for k, v in written.items() if k not in PLACEMENT}


def adapter_inputs(dataset: Path, options: Mapping[str, Any], config: Path | str) -> dict[str, Any]:
    """Everything an adapter trained on `dataset` with `options` under the train YAML `config` is made from."""
    from datasets import load_from_disk

    from distill.roles.roles import STUDENT_PROMPT_VERSION

    settings = training_settings(options, config)
    base = {"model": settings.get("model_name_or_path", "smollm2-135m"), "device": "cpu"}
    splits = load_from_disk(str(dataset))
    inputs = {
        "dataset": splits["train"]._fingerprint,
        "training settings": settings,
        "student prompt version": STUDENT_PROMPT_VERSION,
        "student prompts": prompt_fingerprint("student"),
        "base model": model_fingerprint(base if settings.get("use_cpu") else {**base, "device": "cuda"}),
    }
    if settings.get("early_stopping_patience"):  # the validation loss picks the epoch kept: it is an input too
        inputs["validation"] = splits["validation"]._fingerprint if "validation" in splits else None
    return inputs


def stale_reason(
    adapter: Path, dataset: Path, options: Mapping[str, Any], config: Path | str = CPU_TRAIN_CONFIG
) -> Optional[str]:
    """Why the adapter at `adapter` must be (re)trained, or None when its key holds: the same dataset, training
    `options` (train flags, e.g. max_tokens_budget, learning_rate) over the train YAML `config`, prompts and base."""
    from distill.adapters.adapters import has_metadata, read_metadata

    if not has_metadata(adapter):
        return "not trained yet"
    settings = training_settings(options, config)

    def explain() -> Optional[str]:  # what the adapter's own record says differs
        return _changed(read_metadata(adapter), dataset, settings)

    details = dict.fromkeys(("dataset", "training settings", "student prompt version"), explain)
    return stale(adapter, adapter_inputs(dataset, options, config), migrate=explain, details=details)


def _changed(meta: Mapping[str, Any], dataset: Path, settings: Mapping[str, Any]) -> Optional[str]:
    """What differs between the record of a training run (adapter metadata, checkpoint record) and today's."""
    from datasets import load_from_disk

    from distill.roles.roles import STUDENT_PROMPT_VERSION

    if meta.get("dataset_fingerprint") != load_from_disk(str(dataset))["train"]._fingerprint:
        return "its dataset changed"
    if meta.get("prompt_version") != STUDENT_PROMPT_VERSION:
        return f"it was trained for student prompt version {meta.get('prompt_version')}"
    trained = meta.get("train_config") or {}
    for key, value in settings.items():
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
    stale = {r: why for r, o in options.items() if (why := stale_reason(adapters / r, datasets / r, o, config))}
    groups: dict[tuple, list[str]] = {}
    for role, why in stale.items():
        checkpoint = resumable(adapters / role, datasets / role, training_settings(options[role], config))
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
        for role in roles:  # only once trained: a killed run leaves no key, so it is never taken for finished
            write_key(adapters / role, adapter_inputs(datasets / role, options[role], config))
    return stale


def copy_identical(
    adapter: Path,
    dataset: Path,
    options: Mapping[str, Any],
    donors: Sequence[tuple[Path, Path]],
    config: Path | str,
) -> Optional[Path]:
    """Copy into `adapter` the first donor adapter (`donors`: each adapter and the dataset it learnt) that is current
    on its own dataset with these `options` and whose dataset has this one's rows (every column but `key`, which
    names the trace and so its pipeline): what training it would give. Its key is then this dataset's. Returns the
    donor, or None when it trains itself.

    A copy, not a link: a donor retrained later in the same run (its own options changed) must not change the
    adapter of a student that took it. A link an earlier version made is replaced."""
    if adapter.is_symlink():
        adapter.unlink()
    if adapter.exists():  # trained here earlier: kept or retrained by `train_stale`
        return None
    own: Optional[dict[str, list[dict]]] = None  # this dataset's rows, read once and only when a donor is current
    for donor, learnt in donors:
        trained_alone = donor.is_dir() and not donor.is_symlink() and learnt.is_dir()
        if not trained_alone or stale_reason(donor, learnt, options, config) is not None:
            continue
        own = _rows(dataset) if own is None else own
        if _rows(learnt) == own:
            shutil.copytree(donor, adapter, ignore=shutil.ignore_patterns("checkpoints"))
            write_key(adapter, adapter_inputs(dataset, options, config))
            print(f"{adapter}: the same rows and settings as {donor}; copied, not trained", flush=True)
            return donor
    return None


def _rows(dataset: Path) -> dict[str, list[dict]]:
    from datasets import load_from_disk

    splits = load_from_disk(str(dataset))
    return {name: split.remove_columns(["key"]).to_list() for name, split in splits.items()}


def resumable(adapter: Path, dataset: Path, settings: Mapping[str, Any]) -> Optional[str]:
    """The name of the checkpoint `--resume true` would continue in `adapter`, when its record shows it was trained
    from today's dataset, prompt version and training `settings`; None otherwise (no checkpoint, or another run's)."""
    from train.resume import checkpoint_record, last_checkpoint

    found = last_checkpoint(adapter / "checkpoints")
    record = checkpoint_record(found) if found else None
    return Path(found).name if record and _changed(record, dataset, settings) is None else None


def _train(argv: list[str], roles: Sequence[str]) -> None:
    from train.__main__ import main as train_main

    print(f"$ python -m train {shlex.join(argv)}", flush=True)
    if rc := train_main(argv):
        raise SystemExit(f"training {', '.join(roles)} failed (exit {rc}); rerun to resume from here")
