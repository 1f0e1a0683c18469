"""near_duplicate, the one run-level check: the same reply, or nearly the same, given to many dialogues.

Replies are compared as sets of word trigrams (shingles) by Jaccard similarity. Candidates come from an
inverted index over shingles, so only replies that share a shingle are ever compared: exact on a run of a
few thousand replies, where MinHash's estimate would buy nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Optional

from distill.quality.checks import words
from distill.quality.thresholds import QualityThresholds


def shingles(text: str, n: int = 3) -> frozenset[tuple[str, ...]]:
    """The reply's word n-grams; a reply shorter than n words is one shingle, itself."""
    ws = words(text)
    if len(ws) < n:
        return frozenset([tuple(ws)]) if ws else frozenset()
    return frozenset(tuple(ws[i : i + n]) for i in range(len(ws) - n + 1))


def near_duplicates(replies: Sequence[str], dialogue_ids: Sequence[str], t: QualityThresholds) -> list[Optional[str]]:
    """One reason (or None) per reply: None unless the reply matches the replies of at least
    `near_duplicate_min_dialogues` different dialogues, its own included."""
    if len(replies) != len(dialogue_ids):
        raise ValueError(f"near_duplicates: {len(replies)} replies but {len(dialogue_ids)} dialogue ids")
    # identical shingle sets are compared once: a collapsed model gives many replies one set
    groups: dict[frozenset, list[int]] = defaultdict(list)
    for i, text in enumerate(replies):
        groups[shingles(text)].append(i)
    keys = [k for k in groups if k]
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for g, key in enumerate(keys):
        for sh in key:
            index[sh].append(g)
    out: list[Optional[str]] = [None] * len(replies)
    for key in keys:
        shared = Counter(other for sh in key for other in index[sh])
        similar = [o for o, n in shared.items() if n / (len(key) + len(keys[o]) - n) >= t.near_duplicate_jaccard]
        dialogues = {dialogue_ids[i] for o in similar for i in groups[keys[o]]}
        if len(dialogues) >= t.near_duplicate_min_dialogues:
            reason = f"{len(dialogues)} different dialogues got this reply or one nearly the same"
            for i in groups[key]:
                out[i] = reason
    return out
