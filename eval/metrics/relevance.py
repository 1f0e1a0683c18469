"""Whether a reply answers the dialogue: per dialogue, the cosine of the MiniLM sentence embeddings of the reply and
of the seeker's last turn, the turn it answers (the project's embedder, `data_prep.retrieval.Embedder`; unit rows, so
a dot product).

Dist and EAD reward any new word, and BERTScore compares a reply with one human reply among the many a listener
could give; a reply that stops answering the seeker ("They lived happily ever after 2 yr.") can score well on all of
them. Its relevance falls. It is the target's coherence guard (`eval.curve.target`); how far it falls for a reply
that answers another dialogue is measured by `benchmarks/coherence_calibration.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from eval.metrics.similarity import DEFAULT_SIMILARITY_MODEL, paired_cosines
from eval.metrics.stats import mean_with_ci

DEFAULT_RELEVANCE_MODEL = DEFAULT_SIMILARITY_MODEL


def relevance_items(
    replies: Sequence[str], seeker_turns: Sequence[Optional[str]], model: str = DEFAULT_RELEVANCE_MODEL
) -> list[Optional[float]]:
    """Per dialogue, the cosine of the reply with the seeker's last turn: None where the dialogue has no seeker
    turn; 0 for an empty reply (it answers nothing)."""
    return paired_cosines(replies, seeker_turns, model)


def reply_relevance(
    replies: Sequence[str], seeker_turns: Sequence[Optional[str]], model: str = DEFAULT_RELEVANCE_MODEL
) -> dict:
    """The mean relevance of the replies to the seekers' last turns with its bootstrap CI, and the per-dialogue
    cosines as ``items`` (the paired table resamples them)."""
    items = relevance_items(replies, seeker_turns, model)
    scored = [x for x in items if x is not None]
    empty = sum(1 for i, x in enumerate(items) if x is not None and not (replies[i] and replies[i].strip()))
    return {**mean_with_ci(scored), "model": model, "empty_replies": empty, "items": items}
