"""Each eval metric against values computed by hand on small fixed inputs, edge cases included."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest

from data_prep.taxonomy import EKMAN
from distill.pipeline.trace import Step, Trace
from eval.compare.cost import cost_and_speed
from eval.metrics.accuracy import (
    classification_report,
    emotion_accuracy,
    schema_valid_rate,
    teacher_agreement,
    token_f1,
)
from eval.metrics.diversity import distinct_n, ead_n, ngrams, whitespace_tokens
from eval.metrics.stats import bootstrap_ci, mean_with_ci, percentile, sign_test

MODULES = Path(__file__).resolve().parents[1] / "eval" / "metrics" / "modules"


def test_dist_by_hand():
    corpus = ["I am so sorry", "i am happy"]
    # unigrams: i am so sorry i am happy → 7 total, {i, am, so, sorry, happy} = 5 distinct
    assert distinct_n(corpus, 1) == pytest.approx(5 / 7)
    # bigrams within responses only: (i am)(am so)(so sorry)(i am)(am happy) → 5 total, 4 distinct
    assert distinct_n(corpus, 2) == pytest.approx(4 / 5)


def test_dist_edge_cases():
    assert distinct_n([], 1) == 0.0
    assert distinct_n(["", "   "], 1) == 0.0
    assert distinct_n(["wow"], 1) == 1.0
    assert distinct_n(["wow", "wow"], 2) == 0.0  # corpus shorter than n: no bigram at all
    assert ngrams(["a"], 2) == []
    assert whitespace_tokens("Oh NO!  really") == ["oh", "no!", "really"]


def test_ead_equals_formula_with_whitespace_vocab():
    corpus = ["a b a", "b c"]
    v = 10
    # concatenated: a b a b c → unigrams C=5, distinct 3; bigrams ab ba ab bc → C=4, distinct 3
    assert ead_n(corpus, 1, "whitespace", v) == pytest.approx(3 / (v * (1 - (9 / 10) ** 5)))
    assert ead_n(corpus, 2, "whitespace", v) == pytest.approx(3 / (v * (1 - (9 / 10) ** 4)))
    assert ead_n([""], 1, "whitespace", v) == 0.0
    assert ead_n(["one"], 2, "whitespace", v) == 0.0


def test_ead_cl100k_default():
    import bpe_openai

    enc = bpe_openai.get_encoding("cl100k_base")
    corpus = ["That sounds hard.", "That sounds great!"]
    ids = enc.encode(corpus[0]) + enc.encode(corpus[1])
    v = enc.n_vocab
    expected = len(set(ids)) / (v * (1 - ((v - 1) / v) ** len(ids)))
    assert ead_n(corpus, 1) == pytest.approx(expected)
    with pytest.raises(ValueError, match="vocab_size"):
        ead_n(corpus, 1, "whitespace")


def test_evaluate_modules_load_from_local_path():
    import evaluate

    dist = evaluate.load(str(MODULES / "dist"))
    out = dist.compute(predictions=["I am so sorry", "i am happy"])
    assert out["dist1"] == pytest.approx(5 / 7) and out["dist2"] == pytest.approx(4 / 5)
    ead = evaluate.load(str(MODULES / "ead"))
    out = ead.compute(predictions=["a b a", "b c"], tokenizer="whitespace", vocab_size=10)
    assert out["ead1"] == pytest.approx(3 / (10 * (1 - 0.9**5)))


def test_classification_report_by_hand():
    pred = ["anger", "anger", "fear", None]
    gold = ["anger", "fear", "fear", "sadness"]
    rep = classification_report(pred, gold, EKMAN)
    assert rep["accuracy"]["value"] == pytest.approx(0.5) and rep["n"] == 4 and rep["n_invalid"] == 1
    # anger: tp1 fp1 fn0 → 2/3; fear: tp1 fp0 fn1 → 2/3; sadness: tp0 fn1 → 0
    assert rep["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    m = rep["confusion"]
    assert m["columns"][-1] == "(invalid)"
    assert m["matrix"][m["rows"].index("fear")][m["columns"].index("anger")] == 1
    assert sum(map(sum, m["matrix"])) == 4
    with pytest.raises(ValueError, match="gold label 'joy'"):
        classification_report(["anger"], ["joy"], EKMAN)


def test_i_acc_strict_and_traces_invalid_dropped_by_hand():
    # five answers: two right, one wrong, two invalid ('joy' is no Ekman class, None is no answer)
    res = emotion_accuracy(["anger", "fear", "sadness", "joy", None], ["anger", "fear", "happiness", "fear", "anger"])
    six = res["ekman6"]
    assert six["n"] == 5 and six["n_invalid"] == 2
    assert six["accuracy"]["value"] == pytest.approx(2 / 5) and six["accuracy"]["n"] == 5  # strict
    # TRACE's Agent1.py keeps rows with predicted_id >= 0 only: 2 right of the 3 valid
    assert six["accuracy_invalid_dropped"]["value"] == pytest.approx(2 / 3)
    assert six["accuracy_invalid_dropped"]["n"] == 3


def test_emotion_accuracy_keeps_6_and_32_class_apart():
    res = emotion_accuracy(["sadness", "happiness"], ["sadness", "happiness"], ["lonely", "proud"])
    assert res["ekman6"]["accuracy"]["value"] == 1.0 and res["ed32"] is None  # Ekman predictions: no 32-class
    res = emotion_accuracy(["lonely", "grateful"], ["sadness", "happiness"], ["lonely", "proud"])
    assert res["ekman6"]["accuracy"]["value"] == 1.0  # fine predictions map to their Ekman family
    assert res["ed32"]["accuracy"]["value"] == 0.5


def test_token_f1():
    assert token_f1("the old piano", "old piano sold") == pytest.approx(2 / 3)
    assert token_f1("", "") == 1.0 and token_f1("a", "") == 0.0


def _trace(i: int, emotion, category, strategy, triggers, valid=True, latency=1.0, model="gpt-4o"):
    from conftest import make_dialogue

    d = make_dialogue(i, "sadness", "sad", "s", ["x"])
    outputs = {
        "asi": {"emotion": emotion},
        "cae": {"category": category, "triggers": triggers},
        "srp": {"strategy": strategy},
        "ers": {"response": "ok"},
    }
    parsed = outputs["asi"] if valid else None
    steps = [Step(role="asi", messages=[], parsed=parsed, latency_s=latency, prompt_tokens=100, completion_tokens=10)]
    return Trace(
        key=str(i),
        dialogue=d,
        backend="openai",
        model=model,
        prompt_version="v1",
        prompt_style="teacher",
        config={},
        outputs=outputs,
        steps=steps,
    )


def test_teacher_agreement_and_validity():
    teacher = [
        _trace(0, "sadness", "Loss & Failure", "ER", ["sold the piano"]),
        _trace(1, "anger", "Threat & Potential Danger", "EX", ["car"]),
    ]
    student = [
        _trace(0, "sadness", "Threat & Potential Danger", "ER", ["the piano"], valid=False),
        _trace(1, "fear", "Threat & Potential Danger", "IP", ["car"]),
    ]
    agree = teacher_agreement(student, teacher)
    assert agree["emotion"]["value"] == 0.5 and agree["emotion"]["n"] == 2
    assert agree["cause_category"]["value"] == 0.5 and agree["strategy"]["value"] == 0.5
    assert agree["trigger_f1"]["value"] == pytest.approx((0.8 + 1.0) / 2)
    assert schema_valid_rate(student)["overall"]["value"] == 0.5


def test_cost_and_speed():
    traces = [_trace(i, "sadness", "Loss & Failure", "ER", ["x"], latency=float(i + 1)) for i in range(4)]
    out = cost_and_speed(traces, wall_s=2.0)
    assert out["latency_p50_s"] == 2.5 and out["throughput_dps"] == 2.0
    assert out["tokens_per_role"]["asi"] == {"prompt_per_dialogue": 100.0, "completion_per_dialogue": 10.0}
    # gpt-4o: $2.50 / 1M in, $10 / 1M out → (100*2.5 + 10*10)/1e6 per dialogue
    assert out["usd_per_1k"] == pytest.approx(350 / 1e6 * 1000)


def test_sign_test_matches_scipy():
    from scipy.stats import binomtest

    for wins, losses in [(0, 0), (1, 0), (7, 3), (3, 7), (10, 10), (15, 2), (0, 12), (40, 25)]:
        expected = binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
        assert sign_test(wins, losses) == pytest.approx(expected, rel=1e-9)


def test_bootstrap_is_seeded_and_brackets_mean():
    vals = [0, 1, 1, 0, 1, 1, 1, 0]
    assert bootstrap_ci(vals) == bootstrap_ci(vals)
    res = mean_with_ci(vals)
    assert res["ci_low"] <= res["value"] == 0.625 <= res["ci_high"] and res["n"] == 8
    assert mean_with_ci([])["value"] is None and mean_with_ci([3.0])["ci_low"] == 3.0
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)


def _resampled(values, statistic, resamples=1000, seed=0):
    """`statistic` of each bootstrap resample, computed by numpy over the same draws `bootstrap_ci` makes
    (one `random.Random(seed)`, n indices per resample), so only the interval's arithmetic is compared."""
    rng = random.Random(seed)
    idx = [[rng.randrange(len(values)) for _ in values] for _ in range(resamples)]
    return statistic(np.asarray(values, dtype=float)[idx], axis=1)


def test_bootstrap_ci_honours_level_and_statistic():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1000]  # one outlier: mean 104.5, median 5.5
    means, intervals = _resampled(values, np.mean), {}
    for level in (0.5, 0.95, 0.99):
        tail = 100 * (1 - level) / 2  # the percentile interval's order statistics: floor below, ceil above
        expected = np.percentile(means, tail, method="lower"), np.percentile(means, 100 - tail, method="higher")
        intervals[level] = bootstrap_ci(values, level=level)
        assert intervals[level] == pytest.approx(expected), level
    (lo50, hi50), (lo95, hi95), (lo99, hi99) = intervals.values()
    assert lo99 < lo95 < lo50 < hi50 < hi95 < hi99  # the same resamples: a higher level only widens
    # the median's interval, on resamples where the outlier drags the mean's far above every typical value
    low, high = bootstrap_ci(values, statistic=statistics.median, level=0.9)
    medians = _resampled(values, np.median)
    assert (low, high) == pytest.approx(
        (np.percentile(medians, 5, method="lower"), np.percentile(medians, 95, method="higher"))
    )
    assert 1 <= low < 5.5 < high <= 9 < hi95


@pytest.mark.slow
def test_perplexity_by_hand(smollm_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eval.metrics.perplexity import perplexity

    lm = AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(smollm_path)
    responses = ["That sounds hard.", "", "Wow"]
    # the old definition, kept as an option: after <|endoftext|>, every token scored (TRACE's is in
    # test_faithfulness.py)
    out = perplexity(responses, (lm, tok), context="document_start", batch_size=2, progress=False)
    total_nll, total_tok = 0.0, 0
    with torch.no_grad():
        for r in ["That sounds hard.", "Wow"]:  # the empty response adds no token
            ids = torch.tensor([[tok.convert_tokens_to_ids("<|endoftext|>")] + tok.encode(r, add_special_tokens=False)])
            total_nll += lm(input_ids=ids, labels=ids).loss.item() * (ids.shape[1] - 1)
            total_tok += ids.shape[1] - 1
    assert out["tokens"] == total_tok and out["n"] == 3
    assert out["value"] == pytest.approx(math.exp(total_nll / total_tok), rel=1e-3)  # padding shifts fp32 sums slightly
    ctx = perplexity(
        ["That sounds hard."], (lm, tok), context="dialogue", contexts=["seeker: I lost my job."], progress=False
    )
    assert ctx["context"] == "dialogue" and ctx["value"] != out["value"]


@pytest.mark.slow
def test_bertscore_local_encoder():
    from eval.metrics.bertscore import bertscore

    out = bertscore(["the cat sat on the mat", "hello", ""], ["the cat sat on the mat", None, "a reply"])
    assert out["f1"]["n"] == 2 and out["empty_candidates"] == 1
    assert out["f1"]["value"] == pytest.approx(0.5, abs=1e-4)  # identical pair 1.0, empty candidate 0.0
    assert out["model"] == "minilm" and out["num_layers"] == 6


def test_paired_bootstrap_by_hand():
    from eval.metrics.stats import paired_bootstrap

    # a constant shift: every resample gives the same difference
    shift = paired_bootstrap([3, 5, 9], [1, 3, 7])
    assert shift["n"] == 3 and [shift[k] for k in ("diff", "ci_low", "ci_high")] == pytest.approx([2.0] * 3)
    # two dialogues, a right on one: a resample's difference is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4,
    # so the 2.5th percentile is 0 and the 97.5th is 1
    out = paired_bootstrap([1, 0], [0, 0])
    assert (out["diff"], out["ci_low"], out["ci_high"]) == (0.5, 0.0, 1.0)
    # pairing matters: the same values unpaired would not give a zero-width interval
    assert paired_bootstrap([1, 2, 3, 4], [0, 1, 2, 3])["ci_low"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="3 items against 2"):
        paired_bootstrap([1, 2, 3], [1, 2])


def test_paired_bootstrap_p_value_by_hand():
    import random

    from eval.metrics.stats import paired_bootstrap

    # every resampled difference is 2: none at or below 0, so p = 2 (0 + 1) / (1000 + 1)
    assert paired_bootstrap([3, 5, 9], [1, 3, 7])["p_value"] == pytest.approx(2 / 1001)
    assert paired_bootstrap([3, 5, 9], [1, 3, 7], resamples=99)["p_value"] == pytest.approx(2 / 100)
    # identical systems: every difference is 0, on both sides at once
    assert paired_bootstrap([1, 0, 1], [1, 0, 1])["p_value"] == 1.0
    # [1, 0] vs [0, 0]: a resample's difference is 0 only when both draws pick the second dialogue
    rng = random.Random(0)
    zeros = sum([rng.randrange(2), rng.randrange(2)] == [1, 1] for _ in range(1000))  # replay the draws
    assert paired_bootstrap([1, 0], [0, 0])["p_value"] == pytest.approx(2 * (zeros + 1) / 1001)


def test_paired_table_is_corrected_by_holm_over_the_whole_family():
    from eval.compare.paired import paired_comparisons, paired_resamples

    # three systems, one metric: A − B and B − C are the same constant shift, A − C is no difference
    p = 2 / 1001  # see the p-value test: no resample on the other side of 0
    # A and C equal on every dialogue test nothing: that row is left out of the family, so m = 2, not 3
    rows = paired_comparisons({"A": {"i_acc": [1.0] * 4}, "B": {"i_acc": [0.0] * 4}, "C": {"i_acc": [1.0] * 4}})
    by_pair = {tuple(r["pair"]): r for r in rows}
    assert by_pair[("A", "C")]["identical"] is True and by_pair[("A", "C")]["p_holm"] is None
    assert [by_pair[k]["p_value"] for k in (("A", "B"), ("A", "C"), ("B", "C"))] == pytest.approx([p, 1.0, p])
    # Holm over m = 2 (A − C left out): p·2 for both shifts
    assert by_pair[("A", "B")]["p_holm"] == by_pair[("B", "C")]["p_holm"] == pytest.approx(2 * p)
    assert "identical" not in by_pair[("A", "B")] and not by_pair[("A", "C")]["survives_holm"]
    # a family too large for 1,000 resamples gets more, so a clear difference can still survive
    assert paired_resamples(3) == 1000 and paired_resamples(30) == 1200
    many = {f"S{i}": {"i_acc": [float(i % 2)] * 4} for i in range(9)}  # 36 pairs, 20 of them a shift of ±1
    rows = paired_comparisons(many)
    assert len(rows) == 36 and {r["resamples"] for r in rows} == {1440}
    assert sum(r["survives_holm"] for r in rows) == 20 and all(r["p_holm"] < 0.05 for r in rows if r["diff"])
    assert sum(bool(r.get("identical")) for r in rows) == 16  # the pairs of equal systems, out of the family


def test_holm_by_hand():
    from eval.metrics.stats import holm

    # sorted: a 0.01*3 = 0.03; c 0.03*2 = 0.06; b 0.04*1 = 0.04, raised to 0.06 to stay monotone
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert holm({"x": 0.6, "y": 0.7}) == {"x": 1.0, "y": 1.0}
    assert holm({}) == {}


def test_the_report_says_an_identical_row_is_left_out_of_holms_family():
    from eval.compare.paired import paired_comparisons
    from eval.compare.report import _family_sentence, paired_table

    rows = paired_comparisons({"A": {"i_acc": [1.0] * 4}, "B": {"i_acc": [0.0] * 4}, "C": {"i_acc": [1.0] * 4}})
    table = "\n".join(paired_table({"paired": rows}))
    assert "| A − C | i_acc |" in table and "– (identical: left out)" in table
    said = _family_sentence({"rows": 2, "identical_rows": 1})
    assert said == (
        "every row of this table (2; 1 rows whose two systems are equal on every dialogue are left out: they test "
        "nothing)"
    )
    assert _family_sentence({"rows": 3}) == "every row of this table (3)"
