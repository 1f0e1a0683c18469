"""How close a system's free-text answer is to the reference system's, per dialogue: the cosine of their MiniLM
sentence embeddings (the project's embedder, `data_prep.retrieval.Embedder`; unit rows, so a dot product).

For an answer with no label set (ESCoT's emotion, "The seeker feels overwhelmed and stretched thin."), exact
agreement says nothing; the cosine says how near the two answers mean. It is a per-role agreement figure: it
compares a system with the reference's chain, not with a gold label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from eval.metrics.stats import mean_with_ci

DEFAULT_SIMILARITY_MODEL = "minilm"


def paired_cosines(
    texts: Sequence[Optional[str]], others: Sequence[Optional[str]], model: str = DEFAULT_SIMILARITY_MODEL
) -> list[Optional[float]]:
    """Per row, the cosine of the sentence embeddings of `texts[i]` and `others[i]`: None where `others[i]` is
    missing (nothing to compare with), 0 where only `texts[i]` is (it matches nothing)."""
    pairs = [i for i, other in enumerate(others) if other and other.strip()]
    answered = [i for i in pairs if texts[i] and texts[i].strip()]
    items: list[Optional[float]] = [None] * len(others)
    for i in pairs:
        items[i] = 0.0
    if answered:
        from data_prep.retrieval import shared_embedder

        embedder = shared_embedder(model)
        mine = embedder.encode([texts[i] for i in answered], progress=False)
        theirs = embedder.encode([others[i] for i in answered], progress=False)
        for i, cosine in zip(answered, (mine * theirs).sum(axis=1).tolist()):
            items[i] = float(cosine)
    return items


def answer_similarity(
    answers: Sequence[Optional[str]], reference_answers: Sequence[Optional[str]], model: str = DEFAULT_SIMILARITY_MODEL
) -> dict:
    """Per dialogue, the cosine of a system's answer with the reference system's, their mean with a CI, and the
    cosines as ``items``. A dialogue where the reference has no answer is not scored (None); one where the
    system has none while the reference has scores 0 (it agrees with nothing)."""
    items = paired_cosines(answers, reference_answers, model)
    scored = [x for x in items if x is not None]
    unanswered = sum(1 for i, x in enumerate(items) if x is not None and not (answers[i] and answers[i].strip()))
    return {**mean_with_ci(scored), "model": model, "unanswered": unanswered, "items": items}
