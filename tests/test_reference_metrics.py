"""The metrics against a reference (issue 58): ROUGE-L and BLEU-2 against the gold reply, exact on strings worked by
hand and equal to the published implementations (`rouge_score`, and NLTK's corpus BLEU on the same tokens); label
accuracy beside its majority class; the answer similarity with the reference system; and all of them reaching
compare's report through the registry, paired between systems."""

from __future__ import annotations

import json
import math
from pathlib import Path

import evaluate
import pytest
from test_eval_compare import _dataset, _hand_trace_run, _run_bad, _write_config

from eval.__main__ import main
from eval.compare.paired import paired_comparisons
from eval.metrics.accuracy import label_accuracy, majority_class
from eval.metrics.overlap import (
    bleu_counts,
    bleu_of_counts,
    bleu_tokens,
    corpus_bleu,
    lcs_length,
    rouge_l,
    rouge_tokens,
    score_bleu,
    score_rouge_l,
)

MODULES = Path(__file__).resolve().parents[1] / "eval" / "metrics" / "modules"
# (reply, reference) pairs with punctuation, case, digits, an apostrophe and non-ASCII letters
PAIRS = [
    ("The cat sat on the mat.", "the cat is on the mat"),
    ("I'm so sorry you're going through this. It's hard!", "That sounds really hard; I'm sorry."),
    ("Café déjà vu: 123-456, 3.5 & more.", "cafe deja vu 123 456"),
    ("a b c d e f", "f e d c b a"),
    ("Have you talked to a counselor about it?", "Have you thought about talking to a counselor?"),
]


# --- ROUGE-L -------------------------------------------------------------------------------------


def test_rouge_l_is_the_f_measure_of_the_lcs_on_rouge_scores_tokens():
    assert rouge_tokens("Don't STOP, café-42!") == ["don", "t", "stop", "caf", "42"]
    assert lcs_length("abcbdab", "bdcaba") == 4  # CLRS's example: "bcba"
    # 6 tokens each, LCS "the cat on the mat" = 5: P = R = 5/6
    assert rouge_l("The cat sat on the mat.", "the cat is on the mat") == pytest.approx(5 / 6)
    # 3 reply tokens, 6 reference tokens, LCS 2: P 2/3, R 1/3, F = 2PR / (P + R) = 4/9
    assert rouge_l("cat mat dog", "the cat is on the mat") == pytest.approx(4 / 9)
    assert rouge_l("", "anything") == 0.0 and rouge_l("!!!", "...") == 0.0


def test_rouge_l_equals_rouge_score():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rouge_scorer.RougeScorer(["rougeL"])  # evaluate's `rouge` default: no stemmer, default tokenizer
    for reply, reference in PAIRS:
        assert rouge_l(reply, reference) == pytest.approx(scorer.score(reference, reply)["rougeL"].fmeasure, abs=1e-12)


# --- BLEU ----------------------------------------------------------------------------------------


def test_13a_tokens_split_punctuation_but_not_apostrophes_or_decimals():
    assert bleu_tokens("Hello, world. It's 3.5-4 &amp; ok!") == [
        "Hello", ",", "world", ".", "It's", "3.5", "-", "4", "&", "ok", "!"
    ]  # fmt: skip


def test_bleu_2_worked_by_hand_with_the_brevity_penalty():
    short = bleu_counts("the cat sat", "the cat sat on the mat", 2)
    assert short == (3, 2, 3, 2, 3, 6)  # matches 1-2, reply n-grams 1-2, reply length, reference length
    # precisions 1 and 1; c = 3 < r = 6: BP = exp(1 - 6/3)
    assert bleu_of_counts([short]) == pytest.approx(math.exp(-1))
    doubled = bleu_counts("the the cat", "the cat", 2)
    assert doubled == (2, 1, 3, 2, 3, 2)  # "the" clipped to the reference's one
    assert bleu_of_counts([doubled]) == pytest.approx(math.sqrt(2 / 3 * 1 / 2))  # c > r: no penalty
    # the corpus sums before dividing: unigrams 5/6, bigrams 3/4, c = 6 < r = 8
    both = corpus_bleu([short, doubled])
    assert both["precisions"] == pytest.approx([5 / 6, 3 / 4])
    assert both["brevity_penalty"] == pytest.approx(math.exp(1 - 8 / 6))
    assert both["bleu"] == pytest.approx(math.sqrt(5 / 6 * 3 / 4) * math.exp(1 - 8 / 6))
    assert bleu_of_counts([bleu_counts("cat dog", "the cat", 2)]) == 0.0  # no bigram matches: BLEU 0, unsmoothed


def test_bleu_equals_nltk_corpus_bleu_on_the_same_tokens():
    bleu_score = pytest.importorskip("nltk.translate.bleu_score")
    # NLTK divides each sentence's precision by at least 1, so the replies here have two tokens or more
    ours = bleu_of_counts([bleu_counts(r, g, 2) for r, g in PAIRS])
    theirs = bleu_score.corpus_bleu(
        [[bleu_tokens(g)] for _, g in PAIRS], [bleu_tokens(r) for r, _ in PAIRS], (0.5, 0.5)
    )
    assert ours == pytest.approx(theirs, abs=1e-12) and 0 < ours < 1


def test_the_evaluate_modules_load_offline_and_agree():
    replies, golds = [r for r, _ in PAIRS], [g for _, g in PAIRS]
    bleu = evaluate.load(str(MODULES / "bleu")).compute(predictions=replies, references=golds, max_order=2)
    assert bleu == corpus_bleu([bleu_counts(r, g, 2) for r, g in PAIRS])
    rouge = evaluate.load(str(MODULES / "rouge_l"))
    assert rouge.compute(predictions=replies, references=golds, use_aggregator=False)["rougeL"] == [
        rouge_l(r, g) for r, g in PAIRS
    ]


def test_scored_replies_pair_between_systems_and_skip_dialogues_without_gold():
    golds = [g for _, g in PAIRS] + [None]
    copy, other = [*golds[:-1], "x"], [r for r, _ in PAIRS] + ["y"]
    stats = {name: (score_rouge_l(replies, golds), score_bleu(replies, golds)) for name, replies in
             (("copy", copy), ("other", other))}  # fmt: skip
    rouge, bleu = stats["other"]
    assert rouge["n"] == bleu["n"] == 5 and rouge["items"][-1] is None and bleu["items"][-1] is None
    assert bleu["value"] == pytest.approx(bleu_of_counts([bleu_counts(r, g, 2) for r, g in PAIRS]))
    assert bleu["ci_low"] <= bleu["value"] <= bleu["ci_high"] and bleu["max_order"] == 2
    assert stats["copy"][0]["value"] == stats["copy"][1]["value"] == 1.0
    items = {name: {"rouge_l": r["items"], "bleu2": b["items"]} for name, (r, b) in stats.items()}
    rows = {row["metric"]: row for row in paired_comparisons(items)}
    for metric, value in (("rouge_l", rouge["value"]), ("bleu2", bleu["value"])):
        row = rows[metric]
        assert row["pair"] == ["copy", "other"] and row["n"] == 5 and row["reading"] == "higher is better"
        assert row["diff"] == pytest.approx(1.0 - value) and row["ci_low"] <= row["diff"] <= row["ci_high"]
        assert row["ci_high"] <= 1.0 and {"p_value", "p_holm", "survives_holm"} <= set(row)


# --- label accuracy --------------------------------------------------------------------------------


def test_label_accuracy_beside_the_majority_class():
    gold = ["Question", "Question", "Specify", "Question", None]
    predicted = ["question ", "Specify", "Specify", "Imagery", "Question"]  # case and spaces do not matter
    result = label_accuracy(predicted, gold)
    assert result["accuracy"]["value"] == 0.5 and result["accuracy"]["n"] == 4
    assert result["items"] == [1.0, 0.0, 1.0, 0.0, None]  # the dialogue without gold is not scored
    assert result["n_invalid"] == 1  # "Imagery" is no gold label here
    assert result["majority"] == {"label": "question", "rate": 0.75, "from": "test gold"}
    # from the train labels, the majority class is Specify, right on 1 of the 4 test dialogues
    train = ["Specify", "Specify", "Question", "Imagery"]
    assert label_accuracy(predicted, gold, train)["majority"] == {
        "label": "specify",
        "rate": 0.25,
        "from": "train labels",
    }
    assert label_accuracy(predicted, gold, train)["n_invalid"] == 0  # the train labels join the label set
    assert majority_class(["b", "a"])["label"] == "a"  # a tie goes to the first label alphabetically


# --- through compare ---------------------------------------------------------------------------------


def _compare(tmp_path, tiny_dialogues, answers=None) -> tuple[dict, str]:
    test = tiny_dialogues[:4]
    gold = {"name": "gold", "traces": _hand_trace_run(tmp_path / "g", test, None, "I am sorry", "test")}
    sad = {"name": "sad", "traces": _hand_trace_run(tmp_path / "s", test, "sadness", "so sad", "test")}
    cfg = {"dialogues": _dataset(tmp_path, "ds", test), "ppl": None, "bertscore": None, "systems": [gold, sad]}
    cfg.update({"answers": answers} if answers else {})
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def test_compare_scores_a_declared_label_answer_and_the_reply_overlap(tmp_path, tiny_dialogues):
    """Any label path works: here the ASI's emotion against the dialogues' gold emotion, majority from train."""
    answers = {"label": "asi.emotion", "gold_label": "emotion", "majority_from": "train"}
    report, markdown = _compare(tmp_path, tiny_dialogues, answers)
    right, sad = report["systems"]
    gold_emotions = [d.emotion for d in tiny_dialogues[:4]]
    assert right["label_accuracy"]["accuracy"]["value"] == 1.0
    assert sad["label_accuracy"]["accuracy"]["value"] == gold_emotions.count("sadness") / 4
    assert sad["label_accuracy"]["majority"]["from"] == "train labels"
    assert sad["rouge_l"]["n"] == sad["bleu2"]["n"] == 4 and "items" not in sad["bleu2"]
    assert {p["metric"] for p in report["paired"]} >= {"label_accuracy", "rouge_l", "bleu2"}
    for header in ("label accuracy ↑", "majority class", "ROUGE-L ↑", "BLEU-2 ↑"):
        assert f"| {header} |" in markdown or f" {header} |" in markdown


def test_a_compare_without_declared_answers_shows_no_label_columns(tmp_path, tiny_dialogues):
    report, markdown = _compare(tmp_path, tiny_dialogues)
    assert report["systems"][1]["label_accuracy"] is None
    assert "label accuracy" not in markdown and "answer similarity" not in markdown and "BLEU-2 ↑" in markdown


def test_a_gold_label_field_no_dialogue_has_is_one_line(tmp_path, capsys, tiny_dialogues):
    test = tiny_dialogues[:4]
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test),
        "systems": [{"name": "t", "traces": _hand_trace_run(tmp_path / "t", test, split="test")}],
        "answers": {"label": "srp.strategy", "gold_label": "stratgy"},
    }
    assert "answers.gold_label: no dialogue has a field 'stratgy'" in _run_bad(tmp_path, capsys, cfg)


@pytest.mark.slow
def test_answer_similarity_is_the_minilm_cosine_with_the_reference(tmp_path, tiny_dialogues):
    from eval.metrics.similarity import answer_similarity

    reference = ["The seeker feels overwhelmed and stretched thin.", "The seeker feels lonely.", "x", None]
    mine = ["The seeker feels overwhelmed and stretched thin.", "I like trains.", None, "y"]
    result = answer_similarity(mine, reference)
    assert result["items"][0] == pytest.approx(1.0, abs=1e-5) and result["items"][2:] == [0.0, None]
    assert result["items"][1] < 0.5 and result["n"] == 3 and result["unanswered"] == 1
    # through compare: each system's CAE cause summary against the reference system's (the first)
    report, markdown = _compare(tmp_path, tiny_dialogues, {"text": "cae.cause"})
    first, second = report["systems"]
    assert first["answer_similarity"] is None  # the reference is not compared with itself
    assert second["answer_similarity"]["value"] == pytest.approx(1.0, abs=1e-5)  # the same hand-written cause
    assert not any(p["metric"] == "answer_similarity" for p in report["paired"])  # one system has it: no pair
    assert "answer similarity ↑" in markdown


def test_eval_score_takes_label_columns(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    rows = [("ok", "Question", "Question"), ("sure", "Specify", "Question"), ("hm", None, "Specify")]
    path.write_text("".join(json.dumps({"reply": r, "pred": p, "gold": g}) + "\n" for r, p, g in rows))
    argv = ["score", "--responses", str(path), "--column", "reply", "--label-column", "pred"]
    capsys.readouterr()
    assert main([*argv, "--gold-label-column", "gold"]) == 0
    scored = json.loads(capsys.readouterr().out)["label_accuracy"]
    assert scored["accuracy"]["value"] == pytest.approx(1 / 3) and scored["n_invalid"] == 1  # no answer: a miss
    assert scored["majority"] == {"label": "question", "rate": pytest.approx(2 / 3), "from": "test gold"}
    assert main(argv) == 2 and "--label-column and --gold-label-column go together" in capsys.readouterr().err
