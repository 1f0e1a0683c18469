"""Statistics every eval number carries: seeded bootstrap confidence intervals and the sign test.

A mean-type metric is reported as ``{"value", "ci_low", "ci_high", "n"}`` (see `mean_with_ci`), so the
report shows how much a difference between systems could be noise. The judge's Win/Lose/Tie counts
are tested with a two-sided exact sign test (`sign_test`); a paired bootstrap also gives a p-value, and
`holm` adjusts a family of them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Optional

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> tuple[Optional[float], Optional[float]]:
    """Percentile bootstrap CI (Efron & Tibshirani 1993, ch. 13) of ``statistic`` (default: the mean).

    Seeded so that the same inputs always give the same interval. Returns (None, None) for an
    empty sample; a single value gives a zero-width interval.
    """
    if not values:
        return None, None
    stat = statistic or (lambda xs: sum(xs) / len(xs))
    rng = random.Random(seed)
    n = len(values)
    return interval_of_draws([stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)], level)


def interval_of_draws(draws: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap draws: the draws at ranks floor(α (B − 1)) and ceil((1 − α)(B − 1))."""
    ordered = sorted(float(d) for d in draws)
    alpha, last = (1.0 - level) / 2, len(ordered) - 1
    return ordered[int(math.floor(alpha * last))], ordered[int(math.ceil((1 - alpha) * last))]


def p_of_differences(diffs: Sequence[float]) -> float:
    """Two-sided bootstrap p of resampled differences: 2 (k + 1) / (B + 1), k the draws on the smaller side of 0
    (at or beyond it), capped at 1 (see `paired_bootstrap`)."""
    k = min(sum(d <= 0 for d in diffs), sum(d >= 0 for d in diffs))
    return min(1.0, 2 * (int(k) + 1) / (len(diffs) + 1))


def mean_with_ci(values: Sequence[float], resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """The mean of per-item values with its bootstrap 95% CI and n; value is None when n is 0."""
    vals = [float(v) for v in values]
    if not vals:
        return {"value": None, "ci_low": None, "ci_high": None, "n": 0}
    low, high = bootstrap_ci(vals, resamples=resamples, seed=seed)
    return {"value": sum(vals) / len(vals), "ci_low": low, "ci_high": high, "n": len(vals)}


def mean_with_items(values: Sequence[float]) -> dict:
    """`mean_with_ci` of per-dialogue values, which it keeps as ``items`` for the paired table."""
    items = [float(v) for v in values]
    return {**mean_with_ci(items), "items": items}


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value (Dixon & Mood 1946): ties are excluded beforehand.

    Under H0 a non-tied pair is a win with probability 1/2, so the p-value is the probability of a
    split at least as uneven as the one observed: the sum over the binomial tails, doubled and
    capped at 1 (this equals ``scipy.stats.binomtest(wins, wins + losses, 0.5).pvalue``).
    """
    if wins < 0 or losses < 0:
        raise ValueError(f"sign_test: counts must be non-negative, got wins={wins}, losses={losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (numpy's default 'linear' method), q in [0, 100]."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def paired_bootstrap(
    a: Sequence,
    b: Sequence,
    statistic: Callable[[Sequence], float] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> dict:
    """Paired percentile bootstrap of ``statistic(a) - statistic(b)`` over the same items.

    Each resample draws item indices once and applies them to both systems, so the interval is for
    the difference on these dialogues, not two separate intervals that ignore the pairing. ``a[i]``
    and ``b[i]`` must describe the same item; ``statistic`` defaults to the mean.

    ``p_value`` is two-sided: 2 (k + 1) / (B + 1), k the number of the B resampled differences on the
    smaller side of 0 (at or beyond it), capped at 1. It is the level at which the percentile interval
    would reach 0, with the usual +1 of a Monte Carlo p-value, so it is never below 2 / (B + 1).
    """
    if len(a) != len(b):
        raise ValueError(f"paired_bootstrap: {len(a)} items against {len(b)}")
    n = len(a)
    if n == 0:
        return {"diff": None, "ci_low": None, "ci_high": None, "n": 0, "p_value": None}
    stat = statistic or (lambda xs: sum(xs) / len(xs))
    rng = random.Random(seed)
    diffs = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(stat([a[i] for i in idx]) - stat([b[i] for i in idx]))
    low, high = interval_of_draws(diffs, level)
    p = p_of_differences(diffs)
    return {"diff": float(stat(a) - stat(b)), "ci_low": low, "ci_high": high, "n": n, "p_value": p}


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment (Holm 1979) of a family of p-values; keys keep their names.

    The i-th smallest of m p-values is multiplied by m - i + 1, then made monotone (never below an
    earlier adjusted value) and capped at 1. Rejecting where the adjusted p < α controls the
    family-wise error rate at α.
    """
    order = sorted(p_values, key=lambda k: p_values[k])
    m, running, adjusted = len(order), 0.0, {}
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[key]))
        adjusted[key] = running
    return adjusted
