"""Per-dialogue comparisons between systems, and the dataset's human replies scored as a system.

Two separate confidence intervals say little about a difference; a paired bootstrap over the same
test dialogues does. Every pair of systems gets one for each per-dialogue metric both have: I-ACC
(strict: an invalid answer is wrong), PPL (the corpus statistic over the resampled dialogues), BERTScore F, emotion
agreement with the reference system, and latency; Holm's adjustment over the whole table says which
differences survive the multiple comparisons. The human-gold row gives a reader the scale of
diversity and fluency that real listeners reach on the same dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any, Optional

from data_prep.dialogues import Dialogue
from data_prep.taxonomy import to_ekman
from eval.metrics.accuracy import ekman_or_invalid
from eval.metrics.diversity import diversity_metrics
from eval.metrics.perplexity import corpus_ppl
from eval.metrics.registry import paired_metrics, reply_metrics, score_replies
from eval.metrics.stats import DEFAULT_RESAMPLES, holm, mean_with_ci, paired_bootstrap

ALPHA = 0.05  # the family-wise error rate the paired table is corrected to


def _emotion(trace) -> Optional[str]:
    return ekman_or_invalid(trace.emotion)


def per_dialogue(run, test: Sequence[Dialogue], reference, extras: dict[str, list]) -> dict[str, list]:
    """The per-dialogue values of one system (its traces are in test order); `extras` holds PPL items
    and BERTScore values computed by the scorer."""
    values: dict[str, list] = {"latency_s": [sum(s.latency_s for s in t.steps) for t in run.traces]}
    if all(t.config.get("use_asi", True) for t in run.traces):
        values["i_acc"] = [float(_emotion(t) == to_ekman(d.emotion)) for t, d in zip(run.traces, test)]
    if reference is not None and reference.name != run.name:
        values["emotion_agreement"] = [
            float(_emotion(t) is not None and _emotion(t) == _emotion(r)) for t, r in zip(run.traces, reference.traces)
        ]
    values.update(extras)
    return values


def paired_resamples(family_size: int) -> int:
    """Resamples for a family of `family_size` paired tests: at least 1,000, and enough that the smallest
    attainable p, 2 / (B + 1), is below Holm's first threshold ALPHA / m, so every row can survive."""
    return max(DEFAULT_RESAMPLES, 40 * family_size)


def paired_comparisons(per_system: dict[str, dict[str, list]]) -> list[dict[str, Any]]:
    """One paired bootstrap per pair of systems and metric both have; diff = first − second.

    The family is every row of the table (each pair of systems × each metric both have). Holm's
    adjustment over that family gives ``p_holm``; ``survives_holm`` marks the rows whose difference
    holds at a family-wise error rate of ALPHA. A CI that excludes 0 alone is not a finding.
    """
    rows = []
    for first, second in combinations(per_system, 2):
        a, b = per_system[first], per_system[second]
        for metric, reading in paired_metrics().items():
            if metric not in a or metric not in b:
                continue
            # a dialogue a metric cannot score (BERTScore without a gold reply) is left out on both sides
            keep = [i for i, (x, y) in enumerate(zip(a[metric], b[metric])) if x is not None and y is not None]
            xs, ys = [a[metric][i] for i in keep], [b[metric][i] for i in keep]
            rows.append(((first, second), metric, reading, xs, ys))
    resamples = paired_resamples(len(rows))
    out = []
    for pair, metric, reading, xs, ys in rows:
        stat = corpus_ppl if metric == "ppl" else None  # any other metric: the mean of its items
        result = paired_bootstrap(xs, ys, statistic=stat, resamples=resamples)
        out.append({"pair": list(pair), "metric": metric, "reading": reading, **result, "resamples": resamples})
    adjusted = holm({str(i): row["p_value"] for i, row in enumerate(out) if row["p_value"] is not None})
    for i, row in enumerate(out):
        row["p_holm"] = adjusted.get(str(i))
        row["survives_holm"] = row["p_holm"] is not None and row["p_holm"] < ALPHA
    return out


def human_gold(test: Sequence[Dialogue], config, reference_lm) -> dict[str, Any]:
    """The gold replies scored like a system: diversity, PPL and length. Not BERTScore: it is scored
    against these very replies. Not I-ACC or cost: a human reply has no predicted emotion or latency."""
    replies = [d.gold_response or "" for d in test]
    row: dict[str, Any] = {
        "name": "human (gold replies)",
        "n": len(test),
        "diversity": diversity_metrics(replies, config.ead.tokenizer, config.ead.vocab_size),
        "length_words": mean_with_ci([len(r.split()) for r in replies]),
    }
    if config.ppl is not None:
        row["ppl"], _ = score_ppl(replies, test, config, reference_lm)
    for spec in reply_metrics():
        if spec.human_row:
            row[spec.name], _ = score_replies(spec, replies, None, [d.render_context() for d in test])
    return row


def score_ppl(responses: Sequence[str], test: Sequence[Dialogue], config, reference_lm) -> tuple[dict, list]:
    """PPL of `responses` as the config asks, named by its reference LM, and the per-dialogue items."""
    from eval.metrics.perplexity import perplexity

    contexts = [d.render_context() for d in test]
    ppl = perplexity(responses, reference_lm, config.ppl.context, contexts, config.ppl.batch_size, keep_items=True)
    items = ppl.pop("items")
    return {**ppl, "model": config.ppl.model}, items
