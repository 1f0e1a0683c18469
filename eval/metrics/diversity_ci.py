"""Intervals for the corpus-level Dist-n and EAD-n, paired over the test dialogues, by half-sampling.

Dist and EAD are one number per corpus, so an interval needs new corpora made of the test dialogues. The plain
bootstrap's corpora (the dialogues drawn with replacement) repeat about a third of them, and a repeat adds
n-grams but no distinct ones: the resampled figures sit below the corpus's own, the more diverse corpus's
further, and they spread less than new corpora do. Its interval for a share of the human replies sat above
the value, and too narrow. Half-sampling has no repeats: each draw is half of the dialogues without
replacement, in the test set's order, and the interval is the figure plus the spread of the half-corpora's
figures around their mean, scaled by sqrt(m / (n − m)) for m of n dialogues (the delete-d jackknife, Shao &
Wu 1989, with d = n − m; the scale is 1 for an even n). `benchmarks/diversity_ci_coverage.py` measures both
on corpora drawn from a known population.

Each reply's n-grams are hashed to integers once (`CorpusGrams`); a draw is then a mask and a matrix product.
Pairing is by the draws: two systems, or a system and the human replies, are scored on the same halves, so a
difference or a share of the human replies gets an interval of its own, not two that ignore the pairing.
Each draw's figure is exactly `distinct_n` / `ead_n` of the drawn replies in the drawn order (for EAD the
bigrams that span two replies, as TRACE's concatenated corpus has, included), which the test checks against
the metrics' own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from eval.metrics.diversity import (
    DEFAULT_EAD_ENCODING,
    RATIO_KEYS,
    diversity_metrics,
    normalize_response,
    resolve_tokenizer,
    whitespace_tokens,
)
from eval.metrics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, interval_of_draws, p_of_differences


@dataclass(frozen=True)
class ReplyTokens:
    """One reply as Dist and EAD read it: lowercased whitespace words (Dist), and the normalised reply's token
    ids with the EAD tokenizer's vocabulary size (EAD). The per-dialogue item a paired bootstrap resamples."""

    words: tuple[str, ...]
    ids: tuple[int, ...]
    vocab: int


def reply_tokens(replies: Sequence[Optional[str]], tokenizer: Any, vocab_size: Optional[int]) -> list[ReplyTokens]:
    encode, vocab = resolve_tokenizer(tokenizer, vocab_size)
    out = []
    for reply in replies:
        text = normalize_response(reply)  # blank replies add nothing to EAD, as in `ead_n`
        out.append(ReplyTokens(tuple(whitespace_tokens(reply or "")), tuple(encode(text)) if text else (), vocab))
    return out


@dataclass(frozen=True)
class CorpusGrams:
    """One figure's n-grams (Dist-n or EAD-n, n 1 or 2) of a corpus of replies, hashed to integers once.

    A draw's distinct n-grams are those only one reply holds, counted per drawn reply, plus the shared ones any
    drawn reply holds: one matrix product over every draw at once (`on`)."""

    shared: np.ndarray  # sorted keys that two or more replies hold
    incidence: np.ndarray  # replies × shared, 1.0 where the reply holds the key
    single: np.ndarray  # sorted keys that one reply alone holds
    single_owner: np.ndarray  # that reply
    singles: np.ndarray  # per reply: how many keys it alone holds
    grams: np.ndarray  # n-grams inside each reply, repeats counted
    tokens: np.ndarray  # tokens in each reply
    first: np.ndarray  # each reply's first token (-1: none), for the bigrams that span two replies
    last: np.ndarray
    base: int  # a bigram's key is first * base + second
    spans: bool  # n-grams run across reply boundaries (EAD's concatenated corpus) or not (Dist)
    vocab: Optional[int]  # EAD's V; None for Dist

    @classmethod
    def of(cls, items: Sequence[ReplyTokens], figure: str) -> CorpusGrams:
        kind, n = figure[:-1], int(figure[-1])
        if kind not in ("dist", "ead") or n not in (1, 2):
            raise ValueError(f"no bootstrap for figure '{figure}': Dist-n and EAD-n with n 1 or 2 only")
        codes: dict[Any, int] = {}
        coded = [
            np.array([codes.setdefault(t, len(codes)) for t in (item.words if kind == "dist" else item.ids)], np.int64)
            for item in items
        ]
        base = len(codes) + 1
        keys = [c if n == 1 else c[:-1] * base + c[1:] for c in coded]
        held = [np.unique(k) for k in keys]
        owner = np.repeat(np.arange(len(held)), [len(h) for h in held])
        flat = np.concatenate(held) if held else np.zeros(0, np.int64)
        distinct, holders = np.unique(flat, return_counts=True)
        is_shared = np.isin(flat, distinct[holders > 1])
        shared = distinct[holders > 1]
        incidence = np.zeros((len(items), len(shared)), np.float32)
        incidence[owner[is_shared], np.searchsorted(shared, flat[is_shared])] = 1.0
        order = np.argsort(flat[~is_shared])
        return cls(
            shared=shared,
            incidence=incidence,
            single=flat[~is_shared][order],
            single_owner=owner[~is_shared][order],
            singles=np.bincount(owner[~is_shared], minlength=len(items)).astype(np.float32),
            grams=np.array([len(k) for k in keys], dtype=np.int64),
            tokens=np.array([len(c) for c in coded], dtype=np.int64),
            first=np.array([c[0] if len(c) else -1 for c in coded], dtype=np.int64),
            last=np.array([c[-1] if len(c) else -1 for c in coded], dtype=np.int64),
            base=base,
            spans=kind == "ead" and n == 2,
            vocab=items[0].vocab if kind == "ead" and items else None,
        )

    def figure(self, draw: np.ndarray) -> float:
        """The figure of the corpus made of the replies `draw` indexes, in that order."""
        return float(self.on(np.asarray(draw)[None, :])[0])

    def on(self, draws: np.ndarray, block: int = 256) -> np.ndarray:
        """The figure on each row of `draws` (rows of reply indices, e.g. `half_samples`), `block` rows at a time."""
        return np.concatenate([self._block(draws[i : i + block]) for i in range(0, len(draws), block)])

    def _block(self, draws: np.ndarray) -> np.ndarray:
        chosen = np.zeros((len(draws), len(self.grams)), np.float32)
        chosen[np.arange(len(draws))[:, None], draws] = 1.0
        present = chosen @ self.incidence > 0
        distinct = chosen @ self.singles + present.sum(axis=1)
        total = self.grams[draws].sum(axis=1).astype(np.float64)
        if self.spans:
            for r, draw in enumerate(draws):  # the bigram from each reply's last token to the next one's first
                order = draw[self.tokens[draw] > 0]
                if len(order) > 1:
                    spanning = np.unique(self.last[order[:-1]] * self.base + self.first[order[1:]])
                    distinct[r] += len(spanning) - self._held(spanning, chosen[r], present[r]).sum()
                    total[r] += len(order) - 1
        return self._score(distinct, total)

    def _held(self, keys: np.ndarray, chosen: np.ndarray, present: np.ndarray) -> np.ndarray:
        """Which of `keys` a drawn reply already holds inside itself."""
        held = np.zeros(len(keys), dtype=bool)
        for table, in_draw in (
            (self.shared, lambda at: present[at]),
            (self.single, lambda at: chosen[self.single_owner[at]] > 0),
        ):
            if len(table):
                at = np.minimum(np.searchsorted(table, keys), len(table) - 1)
                found = table[at] == keys
                held[found] |= in_draw(at[found])
        return held

    def _score(self, distinct: np.ndarray, total: np.ndarray) -> np.ndarray:
        safe = np.maximum(total, 1)
        if self.vocab is None:
            score = distinct / safe
        else:
            score = distinct / (self.vocab * (1.0 - ((self.vocab - 1) / self.vocab) ** safe))
        return np.where(total > 0, score, 0.0)


MIN_DIALOGUES = 2  # the fewest dialogues that give a half-sample and a rest to scale it by


def _half(n: int) -> int:
    """How many of n dialogues a half-sample holds (at least one)."""
    return max(1, n // 2)


def half_samples(n: int, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """`resamples` rows of `_half(n)` of the n dialogue indices, without replacement, each row in the test set's
    order; seeded."""
    keep = _half(n)
    return np.sort(np.argsort(np.random.default_rng(seed).random((resamples, n)), axis=1)[:, :keep], axis=1)


def spread_around(value: float, figures: np.ndarray, n: int) -> np.ndarray:
    """Draws for `interval_of_draws` / `p_of_differences`: `value` plus each half-corpus figure's distance from
    their mean, scaled to n dialogues (the delete-d jackknife's sqrt(m / (n − m))); n at least MIN_DIALOGUES."""
    if n < MIN_DIALOGUES:
        raise ValueError(f"spread_around: {n} dialogue(s) give no interval; at least {MIN_DIALOGUES} do")
    m = _half(n)
    scale = np.sqrt(m / (n - m))
    return value + (figures - figures.mean()) * scale


def paired_differences(
    items: dict[str, Sequence[ReplyTokens]],
    pairs: Sequence[tuple[str, str]],
    figure: str,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> list[dict[str, Any]]:
    """`paired_bootstrap`'s result for figure(first) − figure(second) of each pair of systems (`items`: a system's
    replies, the same dialogues in the same order), every system scored once on the same half-samples."""
    scored: dict[str, tuple[float, np.ndarray]] = {}

    def score(name: str) -> tuple[float, np.ndarray]:
        if name not in scored:
            grams = CorpusGrams.of(items[name], figure)
            scored[name] = (grams.figure(np.arange(len(items[name]))), grams.on(draws))
        return scored[name]

    sizes = {len(items[name]) for pair in pairs for name in pair}
    if len(sizes) > 1:
        raise ValueError(f"paired_differences: systems with {sorted(sizes)} replies; pairs need the same dialogues")
    n = sizes.pop() if sizes else 0
    draws = half_samples(n, resamples, seed)
    out = []
    for first, second in pairs:
        if n < MIN_DIALOGUES:  # the figures of one dialogue, if any, but nothing to spread them over
            diff = score(first)[0] - score(second)[0] if n else None
            out.append({"diff": diff, "ci_low": None, "ci_high": None, "n": n, "p_value": None})
            continue
        (a, a_draws), (b, b_draws) = score(first), score(second)
        diffs = spread_around(a - b, a_draws - b_draws, n)
        low, high = interval_of_draws(diffs, level)
        p = p_of_differences(diffs)
        out.append({"diff": a - b, "ci_low": low, "ci_high": high, "n": n, "p_value": p})
    return out


def human_ratio_intervals(
    replies: Sequence[ReplyTokens],
    human: Sequence[ReplyTokens],
    figures: Sequence[str] = RATIO_KEYS,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> dict[str, Optional[dict[str, Any]]]:
    """Each figure as a share of the human replies on the same dialogues, with its paired interval (each half-sample
    scores both corpora on the same dialogues; no interval below MIN_DIALOGUES); None where the human replies
    score 0."""
    if len(replies) != len(human):
        raise ValueError(f"human_ratio_intervals: {len(replies)} replies against {len(human)} human ones")
    every = np.arange(len(replies))
    draws = half_samples(len(replies), resamples, seed)
    out: dict[str, Optional[dict[str, Any]]] = {}
    for figure in figures:
        mine, theirs = CorpusGrams.of(replies, figure), CorpusGrams.of(human, figure)
        if not replies or theirs.figure(every) == 0:
            out[figure] = None
            continue
        mine_draws, their_draws = mine.on(draws), theirs.on(draws)
        value = mine.figure(every) / theirs.figure(every)
        if len(replies) < MIN_DIALOGUES:
            out[figure] = {"value": float(value), "ci_low": None, "ci_high": None, "n": len(replies)}
            continue
        scored = their_draws > 0
        shares = spread_around(value, mine_draws[scored] / their_draws[scored], len(replies))
        low, high = interval_of_draws(shares, level)
        out[figure] = {"value": float(value), "ci_low": low, "ci_high": high, "n": len(replies)}
    return out


def diversity_with_items(
    replies: Sequence[Optional[str]], tokenizer: Any = DEFAULT_EAD_ENCODING, vocab_size: Optional[int] = None
) -> dict[str, Any]:
    """`diversity_metrics`, with each reply's tokens as the per-dialogue items the paired bootstraps draw from."""
    return {**diversity_metrics(replies, tokenizer, vocab_size), "items": reply_tokens(replies, tokenizer, vocab_size)}


def corpus_sizes(smallest: int, total: int) -> list[int]:
    """`smallest`, doubled while below `total`, then `total`: the sub-corpus sizes a trend is read at."""
    sizes, n = [], smallest
    while n < total:
        sizes.append(n)
        n *= 2
    return [*sizes, total]


def human_ratio_by_size(
    replies: Sequence[ReplyTokens],
    human: Sequence[ReplyTokens],
    sizes: Sequence[int],
    figures: Sequence[str] = RATIO_KEYS,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """`human_ratio_intervals` on sub-corpora of each size in `sizes`: nested ones, the first n of one seeded
    permutation of the dialogues (so each holds the smaller, and a trend is not a new draw at every n), each kept in
    the test set's order; at the full size, the whole test set."""
    if len(replies) != len(human):
        raise ValueError(f"human_ratio_by_size: {len(replies)} replies against {len(human)} human ones")
    order = np.random.default_rng(seed).permutation(len(replies))
    out = []
    for n in sizes:
        pick = np.sort(order[:n])
        mine, theirs = [replies[i] for i in pick], [human[i] for i in pick]
        out.append({"n": len(pick), **human_ratio_intervals(mine, theirs, figures, resamples, seed)})
    return out
