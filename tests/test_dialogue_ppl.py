"""The target's third guard: the reply's perplexity given its dialogue under the untuned reference LM
(eval/metrics/perplexity.py `score_dialogue_ppl`), in compare's report beside PPL, and its calibration
(benchmarks/coherence_calibration.py --guard ppl), both on a random 2-layer model."""

from __future__ import annotations

import json
import math

import pytest
from report_checks import unbacked_numbers
from test_eval_compare import _dataset, _hand_trace_run, _write_config

from benchmarks.coherence_calibration import deranged
from benchmarks.coherence_calibration import main as calibrate_main
from eval.__main__ import main
from eval.curve.target import GAP_SHARE
from eval.metrics.perplexity import corpus_figure, perplexity

UNRELATED = "The train to the coast leaves at nine and the tickets are cheap on Tuesdays."


def test_compare_scores_ppl_given_the_dialogue_where_named_and_pairs_it_lower_is_better(
    tmp_path, tiny_dialogues, tiny_model_dir
):
    test = tiny_dialogues[:4]
    answering = [f"Oh no, {d.last_seeker_turn().lower()} That must be hard." for d in test]
    runs = {"answers": answering, "drifts": [UNRELATED] * 4}
    systems = [
        {"name": name, "traces": _hand_trace_run(tmp_path / name, test, None, split="test", replies=replies)}
        for name, replies in runs.items()
    ]
    ppl = {"model": tiny_model_dir, "context": "response", "batch_size": 4}
    guard = {"model": tiny_model_dir, "batch_size": 4}
    cfg = {"dialogues": _dataset(tmp_path, "ds", test), "ppl": ppl, "dialogue_ppl": guard, "bertscore": None,
           "relevance": None, "systems": systems}  # fmt: skip
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    answers = report["systems"][0]
    assert answers["ppl"]["context"] == "response"  # PPL keeps its own context; the guard is given the dialogue
    given = perplexity(answering, tiny_model_dir, "dialogue", [d.render_context() for d in test], progress=False)
    assert answers["dialogue_ppl"]["context"] == "dialogue"
    assert answers["dialogue_ppl"]["value"] == pytest.approx(given["value"], rel=1e-3)
    assert answers["dialogue_ppl"]["value"] != pytest.approx(answers["ppl"]["value"], rel=1e-3)
    assert report["human_gold"]["dialogue_ppl"]["n"] == 4  # the human replies get the row too
    (paired,) = [p for p in report["paired"] if p["metric"] == "dialogue_ppl"]
    assert paired["pair"] == ["answers", "drifts"] and paired["reading"] == "lower is better"
    markdown = (out / "report.md").read_text()
    assert "PPL given the dialogue ↓" in markdown and "PPL given the dialogue: each reply scored after" in markdown
    assert not unbacked_numbers(markdown, report)
    cfg["dialogue_ppl"] = None  # off unless named (PPL still on): no figure, no pair
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(tmp_path / "off")]) == 0
    off = json.loads((tmp_path / "off" / "report.json").read_text())
    assert "dialogue_ppl" not in off["systems"][0] and not any(p["metric"] == "dialogue_ppl" for p in off["paired"])


def test_ppl_and_its_dialogue_guard_take_the_embedded_causal_lm_and_refuse_the_encoder(tmp_path):
    """`minilm` as either reference LM loaded an encoder with a random LM head (49,109, then 70,165, then 58,185 on
    one config): refused when the config loads, in one line naming the key; the embedded LM is taken."""
    from eval.compare.compare import load_config

    for key in ("ppl", "dialogue_ppl"):
        cfg = {"dialogues": "x", "systems": [{"name": "a", "traces": "r"}], key: {"model": "smollm2-135m"}}
        assert getattr(load_config(_write_config(tmp_path, cfg)), key).model == "smollm2-135m"
        cfg[key] = {"model": "minilm"}
        with pytest.raises(ValueError) as err:
            load_config(_write_config(tmp_path, cfg))
        said = str(err.value)
        assert f"field '{key}.model': 'minilm' is a BertModel" in said and "not a causal LM" in said, said
        assert "\n" not in said


def test_the_shuffle_moves_every_reply_to_another_dialogue():
    for n in (2, 3, 10, 57):
        moved = deranged(n, seed=0)
        assert sorted(moved) == list(range(n)) and all(j != i for i, j in enumerate(moved))


# six human replies of different lengths, one per dialogue: no two are alike, so a shuffle moves each to new text
REPLIES = [
    "Selling it must feel like losing her twice.",
    "Good for him! Falling and getting back on is the whole trick, and he clearly has it.",
    "That is awful.",
    "Ten years is a long gap, but nerves mean you care. What part worries you most?",
    "What a surprise! Did you have any idea beforehand?",
    "Ugh, that would put me off sandwiches for a week.",
]


def _ed_csv(path, dialogues, replies):
    """The dialogues as an ED CSV (TRACE's columns) whose human reply is `replies`' each."""
    import csv

    from data_prep.taxonomy import EKMAN

    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["utterances", "prompt", "emotion_id", "gold_response"])
        writer.writeheader()
        for d, reply in zip(dialogues, replies):
            turns = "\n".join(f"{t.speaker}: {t.text}" for t in d.turns)
            row = {"utterances": turns, "prompt": d.situation, "emotion_id": EKMAN.index(d.emotion)}
            writer.writerow({**row, "gold_response": reply})
    return path


def test_the_ppl_calibration_counts_the_dialogues_where_anothers_reply_is_as_likely_as_their_own(
    tmp_path, tiny_dialogues, tiny_model_dir, capsys
):
    """Each figure against the same replies scored one at a time, here: own (the reply after its own dialogue),
    shuffled (after the dialogue `deranged` gives it), their per-token PPLs and the count of dialogues whose
    shuffled reply is at most as perplexing per token as their own."""
    dialogues = tiny_dialogues[:6]
    out = tmp_path / "cal.json"
    data = _ed_csv(tmp_path / "ed.csv", dialogues, REPLIES)
    argv = ["--guard", "ppl", "--model", tiny_model_dir, "--data", str(data), "--seed", "4", "--out", str(out)]
    assert calibrate_main(argv) == 0
    record = json.loads(out.read_text())
    assert record["guard"] == "ppl" and record["dialogues"] == 6 and record["model"] == tiny_model_dir
    contexts = [d.render_context() for d in dialogues]

    def alone(reply: str, context: str) -> tuple[float, int]:
        (item,) = perplexity([reply], tiny_model_dir, "dialogue", [context], progress=False, keep_items=True)["items"]
        return item

    own = [alone(reply, context) for reply, context in zip(REPLIES, contexts)]
    shuffled = [alone(REPLIES[j], context) for j, context in zip(deranged(6, seed=4), contexts)]
    per_token = [(s[0] / s[1], o[0] / o[1]) for o, s in zip(own, shuffled)]
    assert min(abs(s - o) / o for s, o in per_token) > 1e-4  # no near tie that batching's rounding could flip
    below = sum(s <= o for s, o in per_token)
    # this shuffle tells the count apart from the comparison reversed and from one of summed (not per-token) NLL
    assert below != sum(s >= o for s, o in per_token) and below != sum(s[0] <= o[0] for o, s in zip(own, shuffled))
    assert record["shuffled_at_or_below_own"] == below
    for name, items in (("own", own), ("shuffled", shuffled)):
        stat = record[name]
        assert stat["n"] == 6 and stat["tokens"] == sum(t for _, t in items)
        assert stat["value"] == pytest.approx(math.exp(sum(n for n, _ in items) / stat["tokens"]), rel=1e-4)
        figure = corpus_figure(items)  # the same seeded bootstrap over these items, so over these dialogues
        assert (stat["ci_low"], stat["ci_high"]) == pytest.approx((figure["ci_low"], figure["ci_high"]), rel=1e-4)
    gap = record["shuffled_minus_own"]
    assert gap["diff"] == pytest.approx(record["shuffled"]["value"] - record["own"]["value"]) and gap["n"] == 6
    assert record["shuffled_over_own"]["value"] == pytest.approx(record["shuffled"]["value"] / record["own"]["value"])
    assert record["allowance_from_gap"] == pytest.approx(GAP_SHARE * gap["diff"])
    assert record["allowance_as_share_of_gap"] == pytest.approx(record["target_allowance"] / gap["diff"])
    assert "shuffled − own:" in capsys.readouterr().out


def test_the_ppl_calibration_scores_a_trace_runs_replies_or_its_dialogues_human_ones(
    tmp_path, tiny_dialogues, tiny_model_dir, capsys
):
    """--traces: a system's replies against their own dialogue and shuffled ones (what a reply owes its
    dialogue, as a ratio too); --human: the same dialogues' human replies, scored the same way."""
    test = [d for d in tiny_dialogues if d.gold_response][:4]
    answering = [f"Oh no, {d.last_seeker_turn().lower()} That must be hard." for d in test]
    run = _hand_trace_run(tmp_path / "answers", test, None, split="test", replies=answering)
    base = ["--guard", "ppl", "--model", tiny_model_dir, "--traces", run]
    for extra, replies in (([], answering), (["--human"], [d.gold_response for d in test])):
        out = tmp_path / f"cal{len(extra)}.json"
        assert calibrate_main([*base, *extra, "--out", str(out)]) == 0
        record = json.loads(out.read_text())
        assert record["dialogues"] == 4 and record["replies"] == ("human" if extra else "the trace run's")
        own = perplexity(replies, tiny_model_dir, "dialogue", [d.render_context() for d in test], progress=False)
        assert record["own"]["value"] == pytest.approx(own["value"], rel=1e-3)  # these replies, their own dialogues
        ratio = record["shuffled_over_own"]
        assert ratio["value"] == pytest.approx(record["shuffled"]["value"] / record["own"]["value"])
        assert ratio["ci_low"] <= ratio["value"] <= ratio["ci_high"] and ratio["n"] == 4
    # the tiny set's four human replies are one sentence, so a shuffle changes nothing: no gap, no share of it
    assert record["shuffled_minus_own"]["diff"] == 0 and record["allowance_as_share_of_gap"] is None
    assert calibrate_main(["--guard", "ppl", "--human"]) == 2
    assert calibrate_main(["--guard", "ppl", "--traces", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "--human scores a trace run's dialogues" in err and "no traces.jsonl" in err
    assert calibrate_main([*base[:2], "--model", "minilm", *base[4:], "--out", str(tmp_path / "enc.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --model 'minilm' is a BertModel") and "not a causal LM" in err, err
    assert len(err.splitlines()) == 1 and not (tmp_path / "enc.json").exists()
