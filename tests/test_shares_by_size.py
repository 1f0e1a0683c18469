"""Dist/EAD shares of the human replies against corpus size (`shares_by_size`): nested seeded sub-corpora, each share
with its half-sampled interval, in compare's report.json and report.md."""

from __future__ import annotations

import json
import random

import pytest
from report_checks import unbacked_numbers
from test_eval_compare import _dataset, _hand_trace_run, _write_config

from eval.__main__ import main
from eval.metrics.diversity_ci import corpus_sizes, human_ratio_by_size, human_ratio_intervals, reply_tokens


def _replies(n: int, words: int) -> list[str]:
    """n replies of six words drawn (seeded) from a vocabulary of `words`: a small vocabulary is soon used up."""
    rng = random.Random(words)
    return [" ".join(f"w{rng.randrange(words)}" for _ in range(6)) for _ in range(n)]


def test_corpus_sizes_double_up_to_the_whole_test_set():
    assert corpus_sizes(32, 253) == [32, 64, 128, 253]
    assert corpus_sizes(32, 256) == [32, 64, 128, 256] and corpus_sizes(300, 253) == [253]


def test_shares_at_each_size_come_from_nested_subcorpora_and_the_whole_set_is_the_report_figure():
    mine, human = (
        reply_tokens(_replies(40, 10), "cl100k_base", None),
        reply_tokens(_replies(40, 500), "cl100k_base", None),
    )
    rows = human_ratio_by_size(mine, human, corpus_sizes(8, 40), resamples=200)
    assert [r["n"] for r in rows] == [8, 16, 32, 40]
    assert rows[-1] == {"n": 40, **human_ratio_intervals(mine, human, resamples=200)}
    for row in rows:
        for key in ("dist1", "dist2", "ead1", "ead2"):
            assert row[key]["ci_low"] <= row[key]["ci_high"] and row[key]["n"] == row["n"]
    # a poorer vocabulary's share falls as the corpus grows: the trend the sizes are there to show
    assert rows[0]["dist1"]["value"] > rows[-1]["dist1"]["value"]
    again = human_ratio_by_size(mine, human, [8, 40], resamples=200)
    assert again == [rows[0], rows[-1]]  # the same seed: the same sub-corpus of 8 whatever else is asked
    with pytest.raises(ValueError, match="40 replies against 39 human ones"):
        human_ratio_by_size(mine, human[:39], [8])


def test_compare_reports_the_shares_at_each_size_when_asked(tmp_path, tiny_dialogues):
    test = tiny_dialogues[:8]
    runs = {
        "plain": _hand_trace_run(tmp_path / "plain", test, None, split="test", replies=["I am so sorry."] * 8),
        "rich": _hand_trace_run(tmp_path / "rich", test, None, split="test", replies=_replies(8, 500)),
    }
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test), "ppl": None, "bertscore": None, "relevance": None,
        "systems": [{"name": name, "traces": path} for name, path in runs.items()], "shares_by_size": 2,
        "paper_reference": "trace-table1",
    }  # fmt: skip
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["shares_by_size"] == {"sizes": [2, 4, 8], "subsets": "nested", "seed": 0}
    plain, rich = report["systems"]
    assert [r["n"] for r in plain["human_ratio_by_size"]] == [2, 4, 8]
    assert {k: v for k, v in plain["human_ratio_by_size"][-1].items() if k != "n"} == plain["human_ratio"]
    assert rich["human_ratio_by_size"][-1]["dist1"]["value"] > plain["human_ratio_by_size"][-1]["dist1"]["value"]
    md = (out / "report.md").read_text()
    table = md.split("## Shares of the human replies against corpus size")[1].split("\n## ")[0]
    assert "| plain | 2 |" in table and "| rich | 8 |" in table and "2,465 conversations" in table
    assert not unbacked_numbers(table, report)  # every share printed is one report.json holds
    cfg["shares_by_size"] = None  # not asked: the whole test set alone
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(tmp_path / "off")]) == 0
    off = json.loads((tmp_path / "off" / "report.json").read_text())
    assert "human_ratio_by_size" not in off["systems"][0] and off["settings"]["shares_by_size"] is None
    assert "against corpus size" not in (tmp_path / "off" / "report.md").read_text()


def test_a_curve_passes_shares_by_size_to_each_points_compare(tmp_path):
    from eval.compare.systems import CompareConfig
    from eval.curve.config import CurveConfig
    from eval.curve.point_systems import point_compare

    config = CurveConfig(traces="t", dialogues="d", points=[5], shares_by_size=32)
    compare = point_compare(tmp_path, [{"name": "student-traces", "traces": "t"}], config)
    assert CompareConfig.model_validate(compare).shares_by_size == 32
