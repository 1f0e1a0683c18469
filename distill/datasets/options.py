"""How a role dataset is built (`DatasetOptions`) and what each role's build kept, dropped and flagged (`RoleCounts`).

Both the builder (sft_data) and the dataset card read these, so they live apart from either.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from distill.datasets.sft_tasks import RationaleSource

QualityMode = Literal["filter", "report", "off"]
QUALITY_DROP = "failed a quality check"  # the one drop reason; which checks failed is in RoleCounts.quality


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
    # the trace quality checks (distill.quality) on each row's own role output: "filter" drops a row that
    # fails one, "report" keeps it and counts, "off" runs none. Direct rows and a gold ers target are human
    # answers, not the teacher's, so no check reads them.
    quality: QualityMode = "filter"
    quality_thresholds: dict[str, Any] = field(default_factory=dict)  # QualityThresholds fields to change
    # when filtering leaves a role no rows to train on (and no single check that every failing row fails can be
    # set aside), train on its rows unfiltered rather than fail the role
    keep_unfiltered_when_empty: bool = False


@dataclass
class RoleCounts:
    read: int = 0
    dropped: Counter = field(default_factory=Counter)
    kept: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # per split, after the conversation split
    quality: Counter = field(default_factory=Counter)  # check -> rows whose own output failed it
    quality_mode: QualityMode = "off"  # what was done with those rows (`quality_mode`)
    kept_failing: bool = False  # filter would have left no train rows: all were kept (keep_unfiltered_when_empty)
    # checks every failing row failed, set aside because filtering on them left no train rows
    unfiltered: list[str] = field(default_factory=list)
    # the auxiliary link rows added to the train split (sft_tasks.with_link_rows), with the run they came from
    auxiliary: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        counted = {
            "read": self.read,
            "dropped": dict(sorted(self.dropped.items())),
            "kept": self.kept,
            "rows": self.rows,
            "quality": {
                "mode": self.quality_mode,
                "failed": dict(sorted(self.quality.items())),
                "kept_failing": self.kept_failing,
                "unfiltered": self.unfiltered,
            },
        }
        return {**counted, "auxiliary": self.auxiliary} if self.auxiliary else counted


def quality_mode(role: str, options: DatasetOptions) -> QualityMode:
    """The quality mode that holds for `role`'s rows: "off" where the row's target is not the teacher's answer
    (direct rows; a gold ers target), since the checks judge what the teacher wrote."""
    if options.inputs == "direct" or (role == "ers" and options.ers_target == "gold"):
        return "off"
    return options.quality
