"""Dist/EAD's bootstrap intervals (eval.metrics.diversity_ci) against a plain-Python bootstrap of the metrics'
own definitions: every resampled corpus scored as `distinct_n` / `ead_n` score it, the intervals from the
same draws."""

from __future__ import annotations

import numpy as np
import pytest

from eval.metrics.diversity import distinct_n, ead_n
from eval.metrics.diversity_ci import (
    CorpusGrams,
    bootstrap_draws,
    human_ratio_intervals,
    paired_differences,
    reply_tokens,
)
from eval.metrics.stats import interval_of_draws, p_of_differences

FIGURES = ("dist1", "dist2", "ead1", "ead2")
SYSTEM = [
    "I'm so sorry to hear that.",
    "  ",  # blank: no n-gram, and no bigram spanning it in EAD's concatenated corpus
    "Oh no!",
    "That sounds so hard, I'm sorry.",
    "wow",  # one token: its EAD bigrams all span a boundary
    "Oh no! That sounds so hard.",
    "I'm so sorry to hear that. Are you okay?",
    "Congrats, that is great news!",
]
HUMAN = [
    "That must have been scary.",
    "What happened next?",
    "I would be upset too.",
    "Glad you are safe.",
    "Wow, good for you!",
    "Did you tell anyone?",
    "I know how that feels.",
    "That is such great news, congrats!",
]


def reference(replies: list[str], figure: str, draw) -> float:
    """The figure of the drawn corpus, as the metrics' own code computes it."""
    corpus, n = [replies[i] for i in draw], int(figure[-1])
    return distinct_n(corpus, n) if figure.startswith("dist") else ead_n(corpus, n)


@pytest.mark.parametrize("figure", FIGURES)
def test_each_resampled_corpus_scores_as_the_metric_scores_it(figure):
    draws = bootstrap_draws(len(SYSTEM), resamples=300, seed=7)
    grams = CorpusGrams.of(reply_tokens(SYSTEM, "cl100k_base", None), figure)
    expected = np.array([reference(SYSTEM, figure, draw) for draw in draws])
    np.testing.assert_allclose(grams.on(draws, block=64), expected, rtol=0, atol=1e-12)
    assert grams.figure(np.arange(len(SYSTEM))) == pytest.approx(reference(SYSTEM, figure, range(len(SYSTEM))))


@pytest.mark.parametrize("figure", FIGURES)
def test_paired_intervals_are_the_plain_bootstrap_ones(figure):
    """Differences and shares of the human replies: each draw scores both corpora on the same dialogues."""
    resamples = 400
    draws = bootstrap_draws(len(SYSTEM), resamples)
    mine = np.array([reference(SYSTEM, figure, d) for d in draws])
    theirs = np.array([reference(HUMAN, figure, d) for d in draws])
    items = {"system": reply_tokens(SYSTEM, "cl100k_base", None), "human": reply_tokens(HUMAN, "cl100k_base", None)}

    [diff] = paired_differences(items, [("system", "human")], figure, resamples)
    every = range(len(SYSTEM))
    assert diff["diff"] == pytest.approx(reference(SYSTEM, figure, every) - reference(HUMAN, figure, every))
    assert (diff["ci_low"], diff["ci_high"]) == pytest.approx(interval_of_draws(mine - theirs))
    assert diff["p_value"] == pytest.approx(p_of_differences(mine - theirs)) and diff["n"] == len(SYSTEM)

    share = human_ratio_intervals(items["system"], items["human"], [figure], resamples)[figure]
    assert share["value"] == pytest.approx(reference(SYSTEM, figure, every) / reference(HUMAN, figure, every))
    assert (share["ci_low"], share["ci_high"]) == pytest.approx(interval_of_draws(mine / theirs))


def test_a_corpus_without_ngrams_and_bad_input_say_so():
    blank = reply_tokens(["", "  "], "cl100k_base", None)
    assert CorpusGrams.of(blank, "dist2").figure(np.array([0, 1])) == 0.0
    assert human_ratio_intervals(blank, blank, ["dist1"])["dist1"] is None  # no human n-gram: no share
    with pytest.raises(ValueError, match="n 1 or 2 only"):
        CorpusGrams.of(blank, "dist3")
    with pytest.raises(ValueError, match="the same dialogues"):
        paired_differences({"a": blank, "b": blank[:1]}, [("a", "b")], "dist1")
