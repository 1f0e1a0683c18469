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


def test_run_folder_of_other_data_is_refused(tmp_path):
    out = tmp_path / "qs"
    out.mkdir()
    (out / "quickstart.json").write_text(json.dumps({"source": "/data/other.csv", "split_ratios": "0.8,0,0.2", "seed": 0}))
    with pytest.raises(SystemExit, match=r"made with other data \(source '/data/other.csv' -> .*ed_sample.csv'"):
        main(["--out", str(out), *SMALL])
    assert not (out / "dialogues").exists()  # refused before any stage ran


def test_source_and_split_reach_the_dialogue_stage(tmp_path, monkeypatch):
    """The real-data experiment is the quickstart with --source/--split-ratios/--seed: they must be used."""
    import data_prep.__main__ as data_prep_main

    seen = []

    def fake_data_main(argv):
        seen.append(argv)
        raise SystemExit("stop after the first stage")

    monkeypatch.setattr(data_prep_main, "main", fake_data_main)
    src = tmp_path / "ed.csv"
    src.write_text("utterances,prompt,emotion_id,gold_response\n")
    with pytest.raises(SystemExit, match="stop after the first stage"):
        main(["--out", str(tmp_path / "qs"), "--source", str(src), "--split-ratios", "0.8,0,0.2", "--seed", "3", *SMALL])
    argv = seen[0]
    assert argv[:2] == ["dialogues", "--source"] and argv[2] == str(src.resolve())
    assert argv[argv.index("--split-ratios") + 1] == "0.8,0,0.2" and argv[argv.index("--seed") + 1] == "3"
    stamp = json.loads((tmp_path / "qs" / "quickstart.json").read_text())
    assert stamp == {"source": str(src.resolve()), "split_ratios": "0.8,0,0.2", "seed": 3}
