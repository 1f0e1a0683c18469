"""The metric registry: one entry per metric, read by compare, paired, report and score.

An entry says what a reader of the numbers needs: the metric's name (its key in report.json and in
`eval score`'s JSON), its label in report.md, whether it is a per-dialogue mean or a corpus statistic,
which direction is better, whether the paired table compares systems on it, whether the human replies
get a row, and its settings, each with its one default.

The built-in metrics keep their own scorers in compare (they need traces, the reference LM or the
gold labels). A new reply metric is its module plus one `register(MetricSpec(..., score=fn))`: `fn`
takes the replies, the gold replies (None where there are none) and the dialogues' contexts (None in
`eval score` without them), plus its settings, and returns a statistic dict (`eval.metrics.stats.mean_with_ci`'s
shape), with an `items` list of per-dialogue values when the metric is paired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from eval.metrics.bertscore import DEFAULT_BERTSCORE_MODEL
from eval.metrics.diversity import DEFAULT_EAD_ENCODING
from eval.metrics.perplexity import DEFAULT_PPL_CONTEXT, DEFAULT_PPL_MODEL

ReplyScorer = Callable[..., dict]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    label: str
    level: Literal["dialogue", "corpus"]
    direction: Literal["higher", "lower"]
    paired: bool = False  # the paired table compares every pair of systems on it
    human_row: bool = False  # the dataset's human replies are scored on it too
    settings: dict[str, Any] = field(default_factory=dict)  # setting -> its one default
    score: Optional[ReplyScorer] = None  # None: a built-in, scored by compare itself

    @property
    def reading(self) -> str:
        """How to read a difference (first − second) in the paired table."""
        return f"{self.direction} is better"


METRICS: dict[str, MetricSpec] = {}


def register(spec: MetricSpec) -> MetricSpec:
    if spec.name in METRICS:
        raise ValueError(f"metric '{spec.name}' is already registered")
    METRICS[spec.name] = spec
    return spec


for _spec in (
    MetricSpec("i_acc", "I-ACC (6, strict)", "dialogue", "higher", paired=True),
    MetricSpec(
        "ppl",
        "PPL",
        "corpus",
        "lower",
        paired=True,
        human_row=True,
        settings={"model": DEFAULT_PPL_MODEL, "context": DEFAULT_PPL_CONTEXT, "batch_size": 8},
    ),
    MetricSpec(
        "bertscore_f1",
        "BERTScore F",
        "dialogue",
        "higher",
        paired=True,
        settings={"model": DEFAULT_BERTSCORE_MODEL, "num_layers": None, "batch_size": 32},
    ),
    MetricSpec("emotion_agreement", "emotion agreement", "dialogue", "higher", paired=True),
    MetricSpec("latency_s", "latency (s)", "dialogue", "lower", paired=True),
    MetricSpec(
        "diversity",
        "Dist / EAD",
        "corpus",
        "higher",
        human_row=True,
        settings={"tokenizer": DEFAULT_EAD_ENCODING, "vocab_size": None},
    ),
):
    register(_spec)


def paired_metrics() -> dict[str, str]:
    """metric -> its reading, for every metric the paired table compares (registered ones included)."""
    return {name: spec.reading for name, spec in METRICS.items() if spec.paired}


def reply_metrics() -> list[MetricSpec]:
    """The registered metrics that score replies through their own `score` function."""
    return [spec for spec in METRICS.values() if spec.score is not None]


def score_replies(
    spec: MetricSpec, replies: Sequence[str], gold: Optional[Sequence[Optional[str]]], contexts
) -> tuple[dict, Optional[list]]:
    """One registered metric over `replies`: its statistic, and its per-dialogue items (None if it has none)."""
    stat = dict(spec.score(list(replies), gold, contexts, **spec.settings))
    return stat, stat.pop("items", None)
