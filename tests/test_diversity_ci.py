"""Dist/EAD's half-sampling intervals (eval.metrics.diversity_ci) against the metrics' own definitions: every
drawn corpus scored as `distinct_n` / `ead_n` score it, the intervals from the same draws, and how often the
intervals hold the value they estimate on corpora from a known population (benchmarks/diversity_ci_coverage)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.diversity_ci_coverage import Population, coverage
from eval.compare.markdown import fmt
from eval.compare.report import paired_table
from eval.metrics.diversity import distinct_n, ead_n
from eval.metrics.diversity_ci import (
    CorpusGrams,
    half_samples,
    human_ratio_intervals,
    paired_differences,
    reply_tokens,
)
from eval.metrics.stats import interval_of_draws

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
def test_each_drawn_corpus_scores_as_the_metric_scores_it(figure):
    """Any rows of reply indices, repeats and any order included, not only half-samples."""
    draws = np.random.default_rng(7).integers(0, len(SYSTEM), size=(300, len(SYSTEM)))
    grams = CorpusGrams.of(reply_tokens(SYSTEM, "cl100k_base", None), figure)
    expected = np.array([reference(SYSTEM, figure, draw) for draw in draws])
    np.testing.assert_allclose(grams.on(draws, block=64), expected, rtol=0, atol=1e-12)
    assert grams.figure(np.arange(len(SYSTEM))) == pytest.approx(reference(SYSTEM, figure, range(len(SYSTEM))))


def test_half_samples_are_half_the_dialogues_without_repeats_in_order():
    draws = half_samples(9, resamples=50, seed=3)
    assert draws.shape == (50, 4)
    assert all(len(set(row)) == 4 and list(row) == sorted(row) for row in draws.tolist())
    np.testing.assert_array_equal(draws, half_samples(9, resamples=50, seed=3))


def test_one_dialogue_has_a_figure_but_no_interval_and_no_p():
    """One dialogue has no rest to scale a half-sample by: a zero-width interval and p = 2 / (B + 1) would call
    any difference significant."""
    items = {
        "system": reply_tokens(SYSTEM[:1], "cl100k_base", None),
        "human": reply_tokens(HUMAN[:1], "cl100k_base", None),
    }
    [diff] = paired_differences(items, [("system", "human")], "dist1", resamples=50)
    value = reference(SYSTEM[:1], "dist1", [0]) - reference(HUMAN[:1], "dist1", [0])
    assert diff == {"diff": pytest.approx(value), "ci_low": None, "ci_high": None, "n": 1, "p_value": None}
    share = human_ratio_intervals(items["system"], items["human"], ["ead1"], resamples=50)["ead1"]
    assert share["value"] > 0 and (share["ci_low"], share["ci_high"], share["n"]) == (None, None, 1)
    row = {"pair": ["system", "human"], "metric": "dist1", "reading": "higher is better", **diff}
    assert (
        paired_table({"paired": [row]})[-1]
        == f"| system − human | dist1 | {fmt(value)} | 1 | higher is better | – | – | no |"
    )


@pytest.mark.parametrize("n, scale", [(8, 1.0), (7, np.sqrt(3 / 4))])
@pytest.mark.parametrize("figure", FIGURES)
def test_paired_intervals_are_the_half_samples_spread_around_the_figure(figure, n, scale):
    """Differences and shares of the human replies: each half-sample scores both corpora on the same dialogues;
    the interval is the figure plus the half-corpora's spread around their mean, scaled by sqrt(m / (n − m)):
    1 for 8 dialogues, sqrt(3 / 4) for 7 (halves of 3)."""
    system, human, resamples = SYSTEM[:n], HUMAN[:n], 400
    draws = half_samples(n, resamples)
    mine = np.array([reference(system, figure, d) for d in draws])
    theirs = np.array([reference(human, figure, d) for d in draws])
    items = {"system": reply_tokens(system, "cl100k_base", None), "human": reply_tokens(human, "cl100k_base", None)}
    every = range(n)

    [diff] = paired_differences(items, [("system", "human")], figure, resamples)
    value = reference(system, figure, every) - reference(human, figure, every)
    spread = value + ((mine - theirs) - (mine - theirs).mean()) * scale
    assert diff["diff"] == pytest.approx(value) and diff["n"] == n
    assert (diff["ci_low"], diff["ci_high"]) == pytest.approx(interval_of_draws(spread))
    on_smaller_side = min((spread <= 0).sum(), (spread >= 0).sum())
    assert diff["p_value"] == pytest.approx(min(1.0, 2 * (on_smaller_side + 1) / (resamples + 1)))

    share = human_ratio_intervals(items["system"], items["human"], [figure], resamples)[figure]
    value = reference(system, figure, every) / reference(human, figure, every)
    assert share["value"] == pytest.approx(value)
    spread = value + (mine / theirs - (mine / theirs).mean()) * scale
    assert (share["ci_low"], share["ci_high"]) == pytest.approx(interval_of_draws(spread))


def test_the_p_value_is_1_for_a_system_against_itself_and_smallest_for_a_clear_difference():
    resamples = 200
    items = {
        "system": reply_tokens(SYSTEM, "cl100k_base", None),
        "repeats": reply_tokens(["so sorry so sorry so sorry"] * len(SYSTEM), "cl100k_base", None),
    }
    same, clear = paired_differences(items, [("system", "system"), ("system", "repeats")], "dist1", resamples)
    assert same["p_value"] == 1.0 and (same["diff"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    assert clear["p_value"] == pytest.approx(2 / (resamples + 1)) and clear["ci_low"] > 0


@pytest.mark.slow
def test_the_shares_intervals_hold_the_estimand_about_95_percent_of_the_time():
    """On 100 corpora of 253 dialogues from a known population, each interval should hold the figure's expected
    share, missing it about as often on each side; the plain bootstrap's sat above it
    (benchmarks/diversity_ci_coverage.py)."""
    result = coverage(Population(), n=253, corpora=100, truth_corpora=150, resamples=400, seed=0)
    for figure, row in result.items():
        shipped = row["shipped"]
        assert 0.88 <= shipped["coverage"] <= 1.0, (figure, shipped)
        assert shipped["above"] <= 8 and shipped["below"] <= 8, (figure, shipped)  # the bootstrap had 12-28 above


def test_a_corpus_without_ngrams_and_bad_input_say_so():
    blank = reply_tokens(["", "  "], "cl100k_base", None)
    assert CorpusGrams.of(blank, "dist2").figure(np.array([0, 1])) == 0.0
    assert human_ratio_intervals(blank, blank, ["dist1"])["dist1"] is None  # no human n-gram: no share
    with pytest.raises(ValueError, match="n 1 or 2 only"):
        CorpusGrams.of(blank, "dist3")
    with pytest.raises(ValueError, match="the same dialogues"):
        paired_differences({"a": blank, "b": blank[:1]}, [("a", "b")], "dist1")
