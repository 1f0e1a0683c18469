"""The README's main command, end to end on a reduced size: every stage runs, and a rerun reuses them."""

from __future__ import annotations

import json

import pytest

from eval.quickstart import main

SMALL = ["--train-limit", "4", "--test-limit", "2", "--max-tokens-budget", "300", "--no-judge"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_quickstart_runs_every_stage_then_reuses_them(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["--out", str(out), *SMALL]) == 0
    first = capsys.readouterr().out
    for role in ("asi", "cae", "srp", "ers"):
        meta = json.loads((out / "adapters" / role / "trace_distill_adapter.json").read_text())
        assert meta["role"] == role
        assert (out / "datasets" / role / "dataset_dict.json").is_file()
    report = json.loads((out / "eval" / "report.json").read_text())
    assert {s["name"] if isinstance(s, dict) else s for s in report["systems"]} >= {"teacher", "student", "base"}
    assert (out / "eval" / "report.md").is_file()
    assert f"report: {out / 'eval' / 'report.md'}" in first
    assert "reusing" not in first

    assert main(["--out", str(out), *SMALL]) == 0
    second = capsys.readouterr().out
    for stage in ("dialogues", "index", "datasets", "adapters"):
        assert f"reusing {out / stage}" in second
    assert "wrote 0 traces" in second  # the trace store skipped every finished dialogue
