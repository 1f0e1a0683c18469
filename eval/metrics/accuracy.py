"""Metrics read off pipeline traces: emotion accuracy (I-ACC), any label's accuracy beside its majority class,
agreement with the teacher, schema validity.

Mean-type numbers carry a seeded bootstrap 95% CI and n (`eval.metrics.stats.mean_with_ci`). Labels come
from `data_prep.taxonomy` only: 6-class (Ekman) and 32-class (ED) accuracy are separate results,
never mixed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Optional

from data_prep.taxonomy import ED_EMOTIONS, EKMAN, to_ekman
from distill.pipeline.trace import Trace
from distill.roles.trace_data import AGREEMENT_FIELDS, SPAN_AGREEMENT_FIELDS
from eval.metrics.stats import bootstrap_ci, mean_with_ci

INVALID = "(invalid)"  # a prediction missing or outside the label set: wrong in the strict figure


def _normalise(label: Optional[str], labels: Sequence[str]) -> str:
    key = (label or "").strip().lower()
    return key if key in labels else INVALID


def classification_report(predicted: Sequence[Optional[str]], gold: Sequence[str], labels: Sequence[str]) -> dict:
    """Accuracy (with CI), macro-F1 and confusion matrix of ``predicted`` vs ``gold`` over ``labels``.

    Two accuracies: ``accuracy`` is strict (an invalid prediction counts as wrong);
    ``accuracy_invalid_dropped`` is TRACE's (Agent1.py scores only rows with predicted_id >= 0), with
    ``n_invalid`` the rows it leaves out. A system that answers invalidly more often looks no worse
    under TRACE's rule, so the strict figure is the one paired comparisons use.
    Macro-F1 averages per-class F1 (van Rijsbergen's F with β=1) over the classes present in gold
    or in the valid predictions, like scikit-learn's default. The confusion matrix has gold as rows,
    predictions as columns, plus an ``(invalid)`` column when any prediction was unusable.
    """
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold labels")
    preds = [_normalise(p, labels) for p in predicted]
    golds = [_normalise(g, labels) for g in gold]
    bad = [g for g in gold if _normalise(g, labels) == INVALID]
    if bad:
        raise ValueError(f"gold label '{bad[0]}' is not one of {', '.join(labels)}")
    correct = [float(p == g) for p, g in zip(preds, golds)]
    columns = list(labels) + ([INVALID] if INVALID in preds else [])
    counts = Counter(zip(golds, preds))
    return {
        "accuracy": mean_with_ci(correct),
        "accuracy_invalid_dropped": mean_with_ci([c for c, p in zip(correct, preds) if p != INVALID]),
        "macro_f1": macro_f1(list(zip(preds, golds)), labels),
        "n": len(gold),
        "n_invalid": preds.count(INVALID),
        "confusion": {
            "rows": list(labels),
            "columns": columns,
            "matrix": [[counts[(g, p)] for p in columns] for g in labels],
        },
    }


def macro_f1(pairs: Sequence[tuple[str, str]], labels: Sequence[str] = ()) -> Optional[float]:
    """Macro-F1 of normalised (predicted, gold) pairs (`classification_report`'s): per-class F1 averaged over the
    classes in gold or in the valid predictions (summed in `labels`' order when given); None for no pairs. One
    pass, so a bootstrap can call it often."""
    tp: Counter = Counter()
    fp: Counter = Counter()
    fn: Counter = Counter()
    for p, g in pairs:
        if p == g:
            tp[g] += 1
        else:
            fp[p] += 1
            fn[g] += 1
    seen = (set(tp) | set(fp) | set(fn)) - {INVALID}
    present = [c for c in labels if c in seen] + sorted(seen - set(labels))
    f1s = [2 * tp[c] / (2 * tp[c] + fp[c] + fn[c]) for c in present]
    return sum(f1s) / len(f1s) if f1s else None


def macro_f1_with_ci(predicted: Sequence[Optional[str]], gold: Sequence[str], labels: Sequence[str]) -> dict:
    """Macro-F1 of ``predicted`` vs ``gold`` over ``labels`` (as `classification_report` scores it) with its
    seeded bootstrap 95% CI over the dialogues, and n."""
    pairs = [(_normalise(p, labels), _normalise(g, labels)) for p, g in zip(predicted, gold, strict=True)]
    low, high = bootstrap_ci(pairs, statistic=lambda drawn: macro_f1(drawn, labels))
    return {"value": macro_f1(pairs, labels), "ci_low": low, "ci_high": high, "n": len(pairs)}


def ekman_or_invalid(label: Optional[str]) -> Optional[str]:
    """A predicted label as Ekman, or None when it is missing or outside every label set."""
    try:
        return to_ekman(label) if label else None
    except ValueError:
        return None


def emotion_accuracy(
    predicted: Sequence[Optional[str]], gold_ekman: Sequence[str], gold_fine: Optional[Sequence[Optional[str]]] = None
) -> dict:
    """I-ACC: emotion accuracy, 6-class Ekman and, when both sides are fine ED labels, 32-class; each
    strict and as TRACE's Agent1.py computes it (invalid predictions dropped), see `classification_report`.

    6-class: predictions and gold are mapped to Ekman with `to_ekman` (a fine prediction counts as
    its Ekman family). 32-class is reported only when every gold fine label exists and the
    predictions are ED labels themselves: `eval score` on a file of fine predictions. The pipeline's
    ASI answers Ekman's six, so `eval compare` has no 32-class figure.
    """

    result = {
        "ekman6": classification_report(
            [ekman_or_invalid(p) for p in predicted], [to_ekman(g) for g in gold_ekman], EKMAN
        ),
        "ed32": None,
    }
    fine_gold_ok = gold_fine is not None and all(gold_fine)
    fine_preds = [p for p in predicted if p and p.strip().lower() in ED_EMOTIONS]
    if fine_gold_ok and fine_preds and len(fine_preds) >= len(predicted) / 2:
        result["ed32"] = classification_report(list(predicted), list(gold_fine), ED_EMOTIONS)
    return result


def i_acc(
    emotions: Sequence[Optional[str]], gold_emotions: Sequence[str], gold_fine: Optional[Sequence[Optional[str]]] = None
) -> dict:
    """The registry's I-ACC: `emotion_accuracy`, and each dialogue's strict 6-class hit (an invalid answer
    is a miss) as ``items`` for the paired table."""
    items = [float(ekman_or_invalid(p) == to_ekman(g)) for p, g in zip(emotions, gold_emotions)]
    return {**emotion_accuracy(emotions, gold_emotions, gold_fine), "items": items}


def majority_class(gold: Sequence[str], train: Optional[Sequence[Optional[str]]] = None) -> dict:
    """The label a constant guess would name, and how often it is right on `gold`: the commonest label of the
    train split's gold labels when given (`from`: "train labels"), else of `gold` itself ("test gold", an upper
    bound on what a constant guess learned elsewhere scores). Labels compare stripped and lowercased; a tie
    goes to the label first in alphabetical order."""
    source = [t for t in (train or []) if t and t.strip()]
    pool = [_key(t) for t in (source or gold)]
    label = min(Counter(pool).items(), key=lambda item: (-item[1], item[0]))[0] if pool else None
    rate = sum(_key(g) == label for g in gold) / len(gold) if gold and label is not None else None
    return {"label": label, "rate": rate, "from": "train labels" if source else "test gold"}


def _key(label: Optional[str]) -> str:
    return (label or "").strip().lower()


def label_accuracy(
    labels: Sequence[Optional[str]],
    gold_labels: Sequence[Optional[str]],
    train_labels: Optional[Sequence[Optional[str]]] = None,
) -> dict:
    """The registry's label accuracy, for any classification answer (ESCoT's 13 strategies, say): a system's
    label against the gold one per dialogue, as `classification_report` scores it (strict accuracy with a CI,
    macro-F1, confusion), with `majority_class` beside it. Dialogues without a gold label are not scored.

    The label set is every gold label of the test and train splits: a prediction outside it is invalid (a miss).
    ``items`` (1 hit, 0 miss, None without gold) pair systems on the same dialogues.
    """
    scored = [i for i, g in enumerate(gold_labels) if g and g.strip()]
    gold = [_key(gold_labels[i]) for i in scored]
    label_set = sorted({*gold, *(_key(t) for t in train_labels or [] if t and t.strip())})
    report = classification_report([labels[i] for i in scored], gold, label_set)
    items: list[Optional[float]] = [None] * len(gold_labels)
    for i, g in zip(scored, gold):
        items[i] = float(_key(labels[i]) == g)
    return {**report, "majority": majority_class(gold, train_labels), "items": items}


def emotion_agreement(emotions: Sequence[Optional[str]], reference_emotions: Sequence[Optional[str]]) -> dict:
    """Per dialogue, 1 when a system names the same valid Ekman emotion as the reference system does."""
    items = [
        float(mine is not None and mine == ekman_or_invalid(theirs))
        for mine, theirs in zip(map(ekman_or_invalid, emotions), reference_emotions)
    ]
    return {**mean_with_ci(items), "items": items}


def token_f1(predicted: str, reference: str) -> float:
    """SQuAD token F1 (Rajpurkar et al. 2016) on lowercased whitespace tokens; both empty → 1.0."""
    p, r = predicted.lower().split(), reference.lower().split()
    if not p and not r:
        return 1.0
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


def _field(trace: Trace, role: str, key: str):
    return (trace.outputs.get(role) or {}).get(key)


def teacher_agreement(system: Sequence[Trace], teacher: Sequence[Trace]) -> dict:
    """Per-role agreement of a system's final outputs with the teacher's on the same dialogue ids.

    For each field, dialogues where the teacher has no output are skipped (nothing to agree with);
    where the teacher has one and the system does not, it counts as disagreement. Trigger spans
    are compared as one bag of tokens per dialogue (token F1).
    """
    by_id = {t.dialogue.id: t for t in teacher}
    fields, spans = AGREEMENT_FIELDS, SPAN_AGREEMENT_FIELDS
    scores: dict[str, list[float]] = {name: [] for name in [*fields, *spans]}
    for trace in system:
        ref = by_id.get(trace.dialogue.id)
        if ref is None:
            continue
        for name, (role, key) in fields.items():
            if _field(ref, role, key) is not None:
                scores[name].append(float(_field(trace, role, key) == _field(ref, role, key)))
        for name, (role, key) in spans.items():
            if _field(ref, role, key):
                mine = " ".join(_field(trace, role, key) or [])
                scores[name].append(token_f1(mine, " ".join(_field(ref, role, key))))
    return {name: mean_with_ci(vals) for name, vals in scores.items()}


def schema_valid_rate(traces: Sequence[Trace]) -> dict:
    """Share of role calls whose final output validated against the role schema, overall and per role."""
    per_role: dict[str, list[float]] = {}
    for trace in traces:
        for step in trace.steps:
            per_role.setdefault(step.role, []).append(float(step.valid))
    overall = [v for vals in per_role.values() for v in vals]
    return {"overall": mean_with_ci(overall), "per_role": {r: mean_with_ci(v) for r, v in per_role.items()}}
