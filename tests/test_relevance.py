"""The coherence guard: a reply's relevance to the seeker's last turn (eval/metrics/relevance.py), in compare's
report with its paired differences, on hand-written dialogues and the real MiniLM encoder."""

from __future__ import annotations

import json

import pytest
from test_eval_compare import _dataset, _hand_trace_run, _write_config

from data_prep.dialogues import Dialogue, Turn
from eval.__main__ import main
from eval.metrics.relevance import reply_relevance

UNRELATED = "The train to the coast leaves at nine and the tickets are cheap on Tuesdays."


def test_a_reply_that_answers_the_seekers_last_turn_scores_above_an_unrelated_one(tiny_dialogues):
    turns = [d.last_seeker_turn() for d in tiny_dialogues[:4]]
    echoes = reply_relevance(turns, turns)
    unrelated = reply_relevance([UNRELATED] * 4, turns)
    assert echoes["items"] == pytest.approx([1.0] * 4, abs=1e-5)
    assert all(a > b + 0.3 for a, b in zip(echoes["items"], unrelated["items"]))
    assert unrelated["value"] < 0.3 and unrelated["n"] == 4 and unrelated["model"] == "minilm"
    # an empty reply answers nothing (0); a dialogue without a seeker turn is not scored (None)
    odd = reply_relevance(["", "I am sorry you ate mold.", "x"], [turns[0], turns[1], ""])
    assert odd["items"][0] == 0.0 and odd["items"][2] is None and odd["empty_replies"] == 1 and odd["n"] == 2


def test_the_last_seeker_turn_is_the_one_the_reply_answers():
    turns = [Turn(speaker="seeker", text="first"), Turn(speaker="responder", text="ok"),
             Turn(speaker="seeker", text="last"), Turn(speaker="responder", text="trailing")]  # fmt: skip
    d = Dialogue(id="a#1", conv_id="a", turns=turns, situation="s", emotion="joy")
    assert d.last_seeker_turn() == "last"
    assert d.model_copy(update={"turns": turns[1:2]}).last_seeker_turn() == ""


def test_compare_reports_relevance_per_system_for_the_humans_and_paired(tmp_path, tiny_dialogues):
    test = tiny_dialogues[:4]
    answering = [f"Oh no, {d.last_seeker_turn().lower()} That must be hard." for d in test]
    systems = [
        {"name": "answers", "traces": _hand_trace_run(tmp_path / "a", test, None, split="test", replies=answering)},
        {
            "name": "drifts",
            "traces": _hand_trace_run(tmp_path / "d", test, None, split="test", replies=[UNRELATED] * 4),
        },
    ]
    cfg = {"dialogues": _dataset(tmp_path, "ds", test), "ppl": None, "bertscore": None, "systems": systems}
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    answers, drifts = report["systems"]
    assert answers["relevance"]["value"] > drifts["relevance"]["value"] + 0.3
    assert answers["relevance"]["ci_low"] <= answers["relevance"]["value"] <= answers["relevance"]["ci_high"]
    assert report["human_gold"]["relevance"]["n"] == 4  # the human replies get the row too
    (paired,) = [p for p in report["paired"] if p["metric"] == "relevance"]
    assert paired["pair"] == ["answers", "drifts"] and paired["diff"] > 0.3 and paired["ci_low"] > 0
    markdown = (out / "report.md").read_text()
    assert "relevance ↑" in markdown and "Relevance: per dialogue, the cosine of `minilm`" in markdown
    cfg["relevance"] = None  # off: no figure, no pair
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(tmp_path / "off")]) == 0
    off = json.loads((tmp_path / "off" / "report.json").read_text())
    assert "relevance" not in off["systems"][0] and not any(p["metric"] == "relevance" for p in off["paired"])
