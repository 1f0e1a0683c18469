"""How a role dataset is built (`DatasetOptions`) and what each role's build kept and dropped (`RoleCounts`).

Both the builder (sft_data) and the dataset card read these, so they live apart from either.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from distill.datasets.sft_tasks import RationaleSource


@dataclass
class DatasetOptions:
    require_gold_emotion: bool = False  # keep only traces whose asi emotion is the gold Ekman label
    ers_target: Literal["teacher", "gold"] = "teacher"  # "gold": the human reply is the ers target
    dedup: bool = True  # drop repeated (prompt, completion) pairs
    eval_fraction: float = 0.1  # share of conversations held out for validation
    seed: int = 0
    split: Optional[str] = None  # keep only traces of this dialogue split (when the run records one)
    # repeat asi train rows of rarer emotions until every emotion has as many as the commonest, so a
    # small student is not taught the skew of the data (the validation split is left as it is)
    balance_emotions: bool = False
    # "direct": the standard fine-tuning baseline, the dialogue in and the data's gold answer out, with no
    # teacher output at all (distill.datasets.sft_tasks); only asi and ers have such rows
    inputs: Literal["pipeline", "direct"] = "pipeline"
    # a rationale-task twin for asi/srp train rows (Distilling step-by-step), from the teacher's reasoning
    # or from ED's situation text; `rationale_share` of the label rows get one (seeded)
    rationale: Optional[RationaleSource] = None
    rationale_share: float = 1.0


@dataclass
class RoleCounts:
    read: int = 0
    dropped: Counter = field(default_factory=Counter)
    kept: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # per split, after the conversation split

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "dropped": dict(sorted(self.dropped.items())), "kept": self.kept, "rows": self.rows}
