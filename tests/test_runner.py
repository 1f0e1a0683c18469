"""The one stage runner (`eval.runner`): runs or reuses a stage, saying why, keeps its key and its cost."""

from __future__ import annotations

import json
import time

import pytest

from distill.pipeline.stage_key import read_key, stage_key
from eval.runner import STAGES_FILE, Runner, Stage, key_change


def _stage_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[stage] ")]


def test_a_keyed_stage_runs_then_is_reused_then_runs_again_when_its_key_changes(tmp_path, capsys):
    folder, made = tmp_path / "datasets", []

    def build() -> None:
        made.append(1)
        folder.mkdir(exist_ok=True)
        (folder / "rows.json").write_text("[]")
        time.sleep(0.05)

    inputs = {"traces": "abc", "options": {"seed": 1}}
    runner = Runner(tmp_path)
    assert runner.run(Stage("datasets", folder, build, inputs)) == folder
    assert made == [1] and read_key(folder) == stage_key(inputs)  # the stage-key.json every stage keeps
    assert _stage_lines(capsys) == [_line(runner, "datasets", "ran: no stored key")]
    first = json.loads((tmp_path / STAGES_FILE).read_text())["datasets"]
    assert first["seconds"] >= 0.05 and first["peak_rss_mb"] > 0 and first["reused"] is False, first

    again = Runner(tmp_path)  # a rerun, in a new process: the stored records are read back
    again.run(Stage("datasets", folder, build, lambda: dict(inputs)))
    assert made == [1] and _stage_lines(capsys) == [_line(again, "datasets", "reused: key unchanged")]
    kept = json.loads((tmp_path / STAGES_FILE).read_text())["datasets"]
    assert kept == {**first, "reused": True}  # the cost of the run that made it

    Runner(tmp_path).run(Stage("datasets", folder, build, {**inputs, "options": {"seed": 2}}))
    assert made == [1, 1] and ": ran: key changed in options (" in _stage_lines(capsys)[0]
    assert json.loads((tmp_path / STAGES_FILE).read_text())["datasets"]["reused"] is False


def test_a_stage_that_checks_its_own_key_says_why_it_ran(tmp_path, capsys):
    runner = Runner(tmp_path)
    runner.run(Stage("train", tmp_path / "adapters", lambda: "asi: not trained yet"))
    runner.run(Stage("compare", tmp_path / "eval", lambda: None))
    lines = _stage_lines(capsys)
    assert lines[0].startswith("[stage] train: ran: asi: not trained yet (") and "peak RSS" in lines[0]
    assert lines[1].startswith("[stage] compare: reused: key unchanged (")
    records = json.loads((tmp_path / STAGES_FILE).read_text())
    assert list(records) == ["train", "compare"] and records["compare"]["reused"] is True
    assert all(r["seconds"] >= 0 and r["peak_rss_mb"] > 0 and r["finished"] > 0 for r in records.values())
    assert not (tmp_path / "adapters" / "stage-key.json").exists()  # its key is its own, the runner writes none


def test_a_stage_that_fails_leaves_no_key_and_runs_again(tmp_path):
    folder = tmp_path / "datasets"

    def broken() -> None:
        folder.mkdir()
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        Runner(tmp_path).run(Stage("datasets", folder, broken, {"traces": "abc"}))
    assert read_key(folder) is None  # never taken for a finished stage
    ran = []
    Runner(tmp_path).run(Stage("datasets", folder, lambda: ran.append(1), {"traces": "abc"}))
    assert ran == [1]


def test_key_change_names_every_field_that_differs():
    assert key_change({"a": "1", "b": "2"}, {"a": "1", "b": "2"}) is None
    assert key_change(None, {"a": "1"}) == "no stored key"
    assert key_change({"a": "1", "b": "2", "c": "3"}, {"a": "9", "b": "2", "d": "4"}) == "key changed in a, d, c"


def _line(runner: Runner, name: str, what: str) -> str:
    record = runner.records[name]
    return f"[stage] {name}: {what} ({record['seconds']} s, peak RSS {record['peak_rss_mb']} MiB when it ran)"


def test_records_read_the_runners_stages_in_the_order_they_ran(tmp_path):
    from eval.records.compare import RecordFileError, read_stages

    runner = Runner(tmp_path)
    for name in ("n5: direct: datasets", "n5: compare"):
        runner.run(Stage(name, tmp_path / name, lambda: "no report yet"))
    stages = read_stages(tmp_path / STAGES_FILE)
    assert [s["stage"] for s in stages] == ["n5: direct: datasets", "n5: compare"]
    assert all(s["seconds"] >= 0 and s["peak_rss_mb"] > 0 for s in stages)
    records = json.loads((tmp_path / STAGES_FILE).read_text())
    del records["n5: compare"]["peak_rss_mb"]
    (tmp_path / STAGES_FILE).write_text(json.dumps(records))
    with pytest.raises(RecordFileError, match=r"not a stage record \(n5: compare\): `peak_rss_mb` is missing"):
        read_stages(tmp_path / STAGES_FILE)
