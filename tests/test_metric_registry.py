"""A metric is its module plus one registry entry, and nothing else names it: the toy metric below (the
share of replies with an exclamation mark) appears in compare's report.json and report.md, in the paired
table, in the human row, and in `eval score`, with nothing else changed; and a built-in whose entry is
removed vanishes from all of them."""

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


def _compare_and_score(tmp_path, test, capsys) -> tuple[dict, str, dict, str]:
    """A compare of two hand-made trace runs (no model: PPL and BERTScore off), and `eval score` on a file
    with every column it reads: report.json, report.md, the score JSON and the score's --help."""
    first = {"name": "first", "traces": _hand_trace_run(tmp_path / "a", test, "sadness", "so sad", "test")}
    second = {"name": "second", "traces": _hand_trace_run(tmp_path / "b", test, "anger", "hmm", "test")}
    cfg = {"dialogues": _dataset(tmp_path, "ds", test), "ppl": None, "bertscore": None, "systems": [first, second]}
    cfg["paper_reference"] = "trace-table1"
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    responses = tmp_path / "r.csv"
    rows = [["response", "pred", "gold"], ["so sad", "sadness", "sad"], ["hmm", "anger", "proud"]]
    with open(responses, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    capsys.readouterr()
    argv = ["score", "--responses", str(responses), "--column", "response"]
    assert main([*argv, "--emotion-column", "pred", "--gold-emotion-column", "gold"]) == 0
    scored = json.loads(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    report = json.loads((out / "report.json").read_text())
    return report, (out / "report.md").read_text(), scored, capsys.readouterr().out


def _places(spec: MetricSpec, report: dict, markdown: str, scored: dict, usage: str) -> dict[str, bool]:
    """Each place a metric shows in, and whether it is there."""
    places = {
        "report.json rows": any(spec.row_key in row for row in [*report["systems"], report["human_gold"]]),
        "report.json settings": spec.name in report["settings"]["registered_metrics"],
        "eval score": spec.row_key in scored,
    }
    if spec.config:
        places["report.json config section"] = spec.config in report["settings"]
    for metric in (spec.paired_figures or (spec.name,)) if spec.paired else ():  # a row per figure, or its own
        places[f"paired table {metric}"] = any(p["metric"] == metric for p in report["paired"])
        places[f"report.md paired table {metric}"] = f"| {metric} |" in markdown
    for figure in (*spec.shown, *spec.paper):
        places[f"report.md column {figure.header}"] = f"| {figure.header} |" in markdown
    for setting in spec.settings:
        flag = f"--{spec.prefix()}-{setting.replace('_', '-')}"
        places[f"eval score {flag}"] = flag in usage
    return places


@pytest.mark.parametrize("name", ["diversity", "i_acc"])
def test_a_removed_builtin_vanishes_from_compare_paired_report_and_score(tmp_path, tiny_dialogues, capsys, name):
    spec, test = METRICS[name], tiny_dialogues[:4]
    kept = _places(spec, *_compare_and_score(tmp_path / "kept", test, capsys))
    order = list(METRICS)
    with pytest.MonkeyPatch.context() as patch:
        patch.delitem(METRICS, name)  # the one registry entry
        removed = _places(spec, *_compare_and_score(tmp_path / "removed", test, capsys))
    for key in order:  # put back in its place too: later tests read the registry's order (score's warnings)
        METRICS[key] = METRICS.pop(key)
    assert all(kept.values()), kept
    assert not any(removed.values()), removed
