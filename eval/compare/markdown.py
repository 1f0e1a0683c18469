"""Numbers and tables as the reports and docs print them: every figure a value stored in JSON, rounded for reading.

A value with an interval keeps two significant digits of the interval's half-width (9.7725 [6.9847, 19.5992] reads
9.8 [7.0, 19.6]); any other float keeps three significant digits, never fewer than its integer digits (1030.1111
reads 1030); integers print whole.
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any, Optional

from eval.metrics.registry import Figure

DASH = "–"


def _decimals(magnitude: float, significant: int) -> int:
    """Decimal places that keep `significant` digits of `magnitude` (none beyond the integer part)."""
    if magnitude == 0 or not math.isfinite(magnitude):
        return 0
    return max(0, significant - 1 - math.floor(math.log10(abs(magnitude))))


def fmt(value: Any, decimals: Optional[int] = None) -> str:
    """A stored number rounded for reading (see the module note); missing → a dash."""
    if value is None:
        return DASH
    if not isinstance(value, float):
        return json.dumps(value)
    return f"{value:.{_decimals(value, 3) if decimals is None else decimals}f}"


def interval(value: Any, low: Any, high: Any) -> str:
    """``value [low, high]``, all three to two significant digits of the half-width."""
    if value is None:
        return DASH
    if low is None or high is None:
        return fmt(value)
    half = (high - low) / 2
    decimals = _decimals(half, 2) if half > 0 else _decimals(value, 3)
    return f"{fmt(float(value), decimals)} [{fmt(float(low), decimals)}, {fmt(float(high), decimals)}]"


def with_ci(stat: Optional[dict]) -> str:
    """``value [ci_low, ci_high]`` for a mean-type statistic dict from `eval.metrics.stats.mean_with_ci`."""
    if not stat:
        return DASH
    return interval(stat.get("value"), stat.get("ci_low"), stat.get("ci_high"))


def cell(row: dict, figure: Figure) -> str:
    """One figure of a report row as report.md prints it: a statistic with its interval, or a number."""
    value = figure.read(row)
    return with_ci(value) if isinstance(value, dict) else fmt(value, figure.decimals)


def wrap_paragraph(paragraph: str) -> list[str]:
    """A paragraph in lines of at most 120 characters (the docs' width); a code span is never split."""
    return textwrap.wrap(paragraph, 120, break_long_words=False, break_on_hyphens=False)


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


# the figures an ESD-CoT-style report shows per system (label and reply), in the order its tables give them
FIGURES = (
    Figure("strategy acc.", "label_accuracy.accuracy", 3),
    Figure("EM similarity", "answer_similarity", 3),
    Figure("BERTScore F", "bertscore.f1", 3),
    Figure("ROUGE-L", "rouge_l", 3),
    Figure("BLEU-2", "bleu2", 3),
    Figure("relevance", "relevance", 3),
    Figure("Dist-2 / ref.", "human_ratio.dist2", 2),
    Figure("EAD-2 / ref.", "human_ratio.ead2", 2),
    Figure("loop", "reply_checks.rates.loop", 3),
    Figure("non-reply", "reply_checks.rates.non_reply", 3),
)


def stages_lines(stages: list[dict[str, Any]]) -> list[str]:
    """Each stage's seconds and peak RSS, and whether this run reused it (where the record says)."""
    if not stages:
        return []
    header, reused = ["stage", "seconds", "peak RSS (MiB)"], any("reused" in s for s in stages)
    rows = [[s["stage"], fmt(s["seconds"], 0), fmt(s["peak_rss_mb"], 0)] for s in stages]
    if reused:
        header, rows = [*header, "reused"], [[*r, "yes" if s.get("reused") else "no"] for r, s in zip(rows, stages)]
    total = sum(s["seconds"] for s in stages)
    return [*markdown_table(header, rows), "", f"All stages: {total:,.0f} s.", ""]
