"""A compare or students record says which rows Holm's family held: the report's `paired_family` (rows whose two
systems score identically on every dialogue left out, each such row marked), or, for a record written before that
rule, that those rows were in it."""

from __future__ import annotations

import json

from test_records import _compare_report

from eval.records.blocks import render_blocks
from eval.records.compare import record_from_compares
from eval.records.curve import RECORDS, render_record


def _record(family: dict | None) -> dict:
    report = _compare_report(0.0)
    if family is not None:
        report["settings"]["paired_family"] = family
    report["paired"][1] |= {"identical": True, "p_holm": None, "diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    return record_from_compares({"150": report}, [], "escot-test", "cmd", "abc1234", "2-core test")


def _text(record: dict) -> str:
    return " ".join("\n".join(render_record(record)).split())


def test_a_record_states_the_family_its_report_adjusted_over_and_marks_an_identical_row():
    record = _record({"rows": 4, "identical_rows": 1, "correction": "holm", "alpha": 0.05})
    point = record["points"][0]
    assert point["paired_family"]["identical_rows"] == 1
    assert [p.get("identical", False) for p in point["paired"] if p["pair"] == ["joint", "direct"]] == [True]
    text = _text(record)
    assert (
        "Holm's family: every paired row of the run's report (4) but a declared primary comparison; 1 row whose two "
        "systems score identically on every dialogue left out." in text
    )
    row = next(line for line in render_record(record) if line.startswith("| joint − direct | BERTScore F |"))
    assert row.endswith("| 4 | – (identical: left out) | no |"), row


def test_a_record_written_before_identical_rows_were_left_out_says_its_family_held_them():
    text = _text(_record(None))
    assert "rows whose two systems score identically on every dialogue included (this record predates" in text
    shipped = json.loads((RECORDS / "escot-students.json").read_text(encoding="utf-8"))
    assert all("paired_family" not in point for point in shipped["points"])  # written before the rule: say so
    block = render_blocks("<!-- record: escot-students systems=traces,joint,direct -->\n<!-- /record -->", RECORDS)
    assert "this record predates their leaving out" in " ".join(block.split())
