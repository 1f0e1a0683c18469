"""What a role's checkpoint records beside transformers' files, so that a resumed run counts as one run would.

TRL's SFTTrainer counts the tokens a run trains on (`_total_train_tokens`, logged as `num_tokens`; the adapter's
`tokens_seen`) in memory only, from 0 at each start: a resumed adapter recorded its last session's tokens alone.
The count transformers keeps in a checkpoint's trainer_state.json, `num_input_tokens_seen`, is off by default and
counts other tokens (padding, or every eos where the pad token is eos). So each checkpoint gets a record of TRL's
count and of what it was trained from (dataset fingerprint, prompt version, options): a resumed run starts its
count there, and a recipe can tell whether a killed run's checkpoint still fits its dataset and options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

CHECKPOINT_RECORD = "trace_distill_checkpoint.json"


class RecordCheckpoint(TrainerCallback):
    """Writes `<checkpoint>/trace_distill_checkpoint.json` after each save: the step, the trainer's token count
    and `trained_from` (what the adapter metadata says the run was trained from)."""

    def __init__(self, trainer, trained_from: dict[str, Any]):
        self.trainer, self.trained_from = trainer, trained_from

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and folder.is_dir():
            record = {"global_step": state.global_step, "tokens_seen": int(self.trainer._total_train_tokens)}
            (folder / CHECKPOINT_RECORD).write_text(json.dumps(record | self.trained_from), encoding="utf-8")


def checkpoint_record(checkpoint: str | Path) -> Optional[dict[str, Any]]:
    """The record of `checkpoint`, or None: made before records were written, or killed while writing one."""
    path = Path(checkpoint) / CHECKPOINT_RECORD
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def last_checkpoint(checkpoints: Path) -> Optional[str]:
    """The highest-step checkpoint in `checkpoints`, the one `--resume true` continues (None: no checkpoint)."""
    return get_last_checkpoint(str(checkpoints)) if Path(checkpoints).is_dir() else None


def tokens_at(checkpoint: str | Path) -> Optional[int]:
    """The tokens trained on up to `checkpoint`: its record's count, else TRL's `num_tokens` where its trainer state
    logged one at the checkpoint's own step (a checkpoint older than the records); None when neither says."""
    record = checkpoint_record(checkpoint)
    if record is not None and "tokens_seen" in record:
        return int(record["tokens_seen"])
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    step = state.get("global_step")
    logged = [e["num_tokens"] for e in state.get("log_history", []) if e.get("step") == step and "num_tokens" in e]
    return int(logged[-1]) if logged else None
