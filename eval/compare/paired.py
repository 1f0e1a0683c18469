"""Per-dialogue comparisons between systems, and the dataset's human replies scored as a system.

Two separate confidence intervals say little about a difference; a paired bootstrap over the same
test dialogues does. Every pair of systems gets one for each paired metric of the registry both have
(each metric's items, resampled together; a corpus statistic such as PPL is recomputed on each draw; Dist and
EAD, whose corpora a with-replacement draw would bias, by half-sampling: `eval.metrics.diversity_ci`);
Holm's adjustment over the whole table says which differences survive the multiple comparisons. The
human-gold row gives a reader the scale of diversity and fluency that real listeners reach on the same
dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any, Optional

from data_prep.dialogues import Dialogue
from eval.compare.run_figures import reply_quality
from eval.metrics.diversity_ci import paired_differences
from eval.metrics.registry import METRICS, Sample, paired_metrics, score_sample
from eval.metrics.stats import DEFAULT_RESAMPLES, holm, paired_bootstrap

ALPHA = 0.05  # the family-wise error rate the paired table is corrected to


def paired_resamples(family_size: int) -> int:
    """Resamples for a family of `family_size` paired tests: at least 1,000, and enough that the smallest
    attainable p, 2 / (B + 1), is below Holm's first threshold ALPHA / m, so every row can survive."""
    return max(DEFAULT_RESAMPLES, 40 * family_size)


def paired_comparisons(
    per_system: dict[str, dict[str, list]], primary: Optional[tuple[tuple[str, str], str]] = None
) -> list[dict[str, Any]]:
    """One paired interval per pair of systems and metric both have (per figure, for a corpus metric with
    `paired_figures`, by half-sampling); diff = first − second, first the earlier system, but for the `primary`
    row, whose first is the one its pair names first (the config's `pair: [A, B]` reads A − B everywhere).

    The family is every row of the table (each pair of systems × each metric or figure both have). Holm's
    adjustment over that family gives ``p_holm``; ``survives_holm`` marks the rows whose difference
    holds at a family-wise error rate of ALPHA. A CI that excludes 0 alone is not a finding. A `primary`
    ((first, second), metric), declared before the run, is tested alone at ALPHA (its ``p_holm`` is its own p,
    ``primary`` marks it) and left out of the others' family. A row whose two systems have the same value on every
    dialogue (a label-ranked student beside the one whose replies it decodes) tests nothing; ``identical`` marks it
    and it is left out of the family too, where it would only make every other row stricter.
    """
    rows, corpus = [], []
    for pair in combinations(per_system, 2):
        for metric, reading in paired_metrics().items():
            if any(metric not in per_system[name] for name in pair):
                continue
            if METRICS[metric].paired_figures:
                corpus += [(_as_declared(pair, figure, primary), metric, figure, reading)
                           for figure in METRICS[metric].paired_figures]  # fmt: skip
                continue
            first, second = _as_declared(pair, metric, primary)
            a, b = per_system[first][metric], per_system[second][metric]
            # a dialogue a metric cannot score (BERTScore without a gold reply) is left out on both sides
            keep = [i for i, (x, y) in enumerate(zip(a, b)) if x is not None and y is not None]
            rows.append(((first, second), metric, reading, [a[i] for i in keep], [b[i] for i in keep]))
    resamples = paired_resamples(len(rows) + len(corpus))
    out = []
    for pair, metric, reading, xs, ys in rows:
        result = paired_bootstrap(xs, ys, statistic=METRICS[metric].paired_statistic, resamples=resamples)
        out.append({"pair": list(pair), "metric": metric, "reading": reading, **result, "resamples": resamples,
                    **({"identical": True} if xs == ys else {})})  # fmt: skip
    out += _corpus_rows(per_system, corpus, resamples)
    _adjust(out, next((i for i, row in enumerate(out) if primary and _is(row, *primary)), None))
    return out


def _adjust(out: list[dict[str, Any]], first: Optional[int]) -> None:
    """Holm's p over the family (every row but the primary, `first`, and the identical ones), and which survive."""
    family = {str(i): row["p_value"] for i, row in enumerate(out) if in_family(row) and i != first}
    adjusted = holm({i: p for i, p in family.items() if p is not None})
    for i, row in enumerate(out):
        row["p_holm"] = row["p_value"] if i == first else adjusted.get(str(i))
        row["survives_holm"] = row["p_holm"] is not None and row["p_holm"] < ALPHA
        if i == first:
            row["primary"] = True


def in_family(row: dict[str, Any]) -> bool:
    """The row counts in Holm's family: neither the declared primary nor two systems equal on every dialogue."""
    return not row.get("primary") and not row.get("identical")


def _as_declared(pair: tuple[str, str], metric: str, primary: Optional[tuple[tuple[str, str], str]]) -> tuple[str, str]:
    """`pair` in the order the primary declares it where it is the primary's row (its difference then reads as
    the config wrote it); any other row keeps the systems' order."""
    if primary and set(pair) == set(primary[0]) and metric == primary[1]:
        return primary[0][0], primary[0][1]
    return pair


def _is(row: dict[str, Any], pair: tuple[str, str], metric: str) -> bool:
    """The row compares `pair` (in either order) on `metric`."""
    return set(row["pair"]) == set(pair) and row["metric"] == metric


def _corpus_rows(per_system: dict[str, dict[str, list]], asked: list[tuple], resamples: int) -> list[dict[str, Any]]:
    """The paired rows of corpus figures (Dist/EAD): each system's figure on the same half-sampled corpora, once."""
    out = []
    for metric, figure in dict.fromkeys((metric, figure) for _, metric, figure, _ in asked):
        rows = [(pair, reading) for pair, m, f, reading in asked if (m, f) == (metric, figure)]
        items = {name: per_system[name][metric] for pair, _ in rows for name in pair}
        results = paired_differences(items, [pair for pair, _ in rows], figure, resamples)
        for (pair, reading), result in zip(rows, results):
            same = items[pair[0]] == items[pair[1]]
            out.append({"pair": list(pair), "metric": figure, "reading": reading, **result, "resamples": resamples,
                        **({"identical": True} if same else {})})  # fmt: skip
    return out


def human_gold(test: Sequence[Dialogue], settings: dict[str, dict]) -> tuple[dict[str, Any], dict[str, list]]:
    """The gold replies scored like a system, on the metrics that score the human replies (not BERTScore:
    it is scored against these very replies; not I-ACC or cost: a human reply names no emotion and has no
    latency), and their per-dialogue items. `settings` are the compare's metrics, as `score_sample` takes them."""
    replies = [d.gold_response or "" for d in test]
    contexts, seeker_turns = [d.render_context() for d in test], [d.last_seeker_turn() for d in test]
    sample = Sample(replies=replies, contexts=contexts, seeker_turns=seeker_turns)
    stats, items = score_sample(sample, settings, human=True)
    row = {"name": "human (gold replies)", "n": len(test), **stats, "quality": reply_quality(replies, test)}
    return row, items
