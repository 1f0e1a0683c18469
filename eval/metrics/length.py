"""The replies' length in words: no quality in itself, but the scale every other reply figure is read at."""

from __future__ import annotations

from collections.abc import Sequence

from eval.metrics.stats import mean_with_ci


def reply_length(replies: Sequence[str]) -> dict:
    """Mean whitespace words per reply, with its bootstrap CI."""
    return mean_with_ci([len(r.split()) for r in replies])
