"""A new metric is its module plus one registry entry: the toy metric below (the share of replies with an
exclamation mark) appears in compare's report.json and report.md, in the paired table, in the human
row, and in `eval score`, with nothing else changed."""

from __future__ import annotations

import csv
import json

import pytest
from test_eval_compare import _dataset, _hand_trace_run, _write_config

from eval.__main__ import main
from eval.metrics.registry import METRICS, MetricSpec
from eval.metrics.stats import mean_with_ci


def exclaim(replies, gold, contexts, mark: str = "!") -> dict:
    """The toy metric's module: a per-dialogue 0/1, its mean with a CI, and the items to pair."""
    items = [float(mark in r) for r in replies]
    return {**mean_with_ci(items), "items": items}


@pytest.fixture
def toy_metric(monkeypatch):
    spec = MetricSpec("exclaim", "exclaimed", "dialogue", "higher", True, True, {"mark": "!"}, exclaim)
    monkeypatch.setitem(METRICS, spec.name, spec)  # the one registry entry
    return spec


def test_a_registered_metric_reaches_compare_paired_report_and_score(tmp_path, tiny_dialogues, toy_metric, capsys):
    test = tiny_dialogues[:4]
    loud = {"name": "loud", "traces": _hand_trace_run(tmp_path / "l", test, reply="wow!", split="test")}
    calm = {"name": "calm", "traces": _hand_trace_run(tmp_path / "c", test, reply="I see.", split="test")}
    cfg = {"dialogues": _dataset(tmp_path, "ds", test), "ppl": None, "bertscore": None, "systems": [loud, calm]}
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    loud, calm = report["systems"]
    assert loud["exclaim"]["value"] == 1.0 and calm["exclaim"]["value"] == 0.0
    assert report["human_gold"]["exclaim"]["n"] == 4
    assert report["settings"]["registered_metrics"]["exclaim"] == {"mark": "!"}
    row = next(p for p in report["paired"] if p["metric"] == "exclaim")
    assert row["pair"] == ["loud", "calm"] and row["diff"] == 1.0 and row["reading"] == "higher is better"
    markdown = (out / "report.md").read_text()
    assert "exclaimed ↑" in markdown and "| exclaim |" in markdown

    responses = tmp_path / "r.csv"
    with open(responses, "w", newline="") as fh:
        csv.writer(fh).writerows([["response"], ["hi!"], ["hello"]])
    capsys.readouterr()
    assert main(["score", "--responses", str(responses), "--column", "response"]) == 0
    assert json.loads(capsys.readouterr().out)["exclaim"]["value"] == 0.5
