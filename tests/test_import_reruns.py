"""`distill import` into an --out that already holds something: the import is a stage under the reuse rule
(distill.pipeline.stage_key). Another data file, split or mapping makes it again, saying which input changed; the
same inputs reuse it; a run that is not an import is refused and left as it was; an --out that cannot be written,
or a run.json that cannot be read, ends in one line.

The fixtures are test_import's small ESD-CoT-like files.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import yaml
from test_import import CHAINS, FULL_CHAIN, REPO, run_import, write_full_chain

from distill.__main__ import main as distill
from distill.pipeline.store import RunInfo, TraceStore
from distill.pipeline.trace import Step, Trace

OTHER_CHAINS = [
    (["I got the job!", "I start on Monday."], "The seeker feels joy.", "A new job.", "They earned it.",
     "Affirmation and Reassurance", "Congratulations, you earned it."),
    (["My flight got cancelled.", "I will miss the wedding."], "The seeker feels upset.", "A lost flight.",
     "They can do nothing.", "Question", "Is there a later flight?"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the shipped mappings name the pipeline as configs/pipelines/escot.yaml


def _summary(capsys) -> tuple[dict, str]:
    captured = capsys.readouterr()
    return json.loads(captured.out.strip().splitlines()[-1]), captured.err


def _error(capsys) -> str:
    """The one line a refused import ends with (datasets' loading bars may come before it), never a traceback."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.splitlines()[-1].startswith("python -m distill import: error: "), err
    return err.splitlines()[-1]


def _replies(out: Path) -> set[str]:
    return {t.response for t in TraceStore(out).read()[0]}


def test_another_data_file_into_the_same_out_makes_the_import_again(tmp_path, capsys):
    first, second = write_full_chain(tmp_path / "a.json"), write_full_chain(tmp_path / "b.json", OTHER_CHAINS)
    out = tmp_path / "run"
    assert run_import(first, FULL_CHAIN, out, "--split", "test") == 0
    capsys.readouterr()
    assert run_import(second, FULL_CHAIN, out, "--split", "test") == 0
    summary, err = _summary(capsys)
    assert f"regenerating {out}: its data changed" in err.splitlines()
    assert summary["written"] == 2 and summary["already_stored"] == 0
    assert _replies(out) == {c[5] for c in OTHER_CHAINS}  # the first file's traces are gone, not mixed in
    assert TraceStore(out).run_info().source["data"] == str(second.resolve())


def test_another_split_makes_the_import_again(tmp_path, capsys):
    data, out = write_full_chain(tmp_path / "d.json"), tmp_path / "run"
    assert run_import(data, FULL_CHAIN, out, "--split", "train") == 0
    capsys.readouterr()
    assert run_import(data, FULL_CHAIN, out, "--split", "test") == 0
    summary, err = _summary(capsys)
    assert f"regenerating {out}: its split changed" in err.splitlines() and summary["written"] == 4
    assert TraceStore(out).run_info().split == "test"


def test_a_test_split_imported_over_a_train_split_builds_datasets_of_the_test_rows_alone(tmp_path, capsys):
    """The issue's case: a train file, then a test file, into one --out; `datasets --split test` read both."""
    out = tmp_path / "run"
    assert run_import(write_full_chain(tmp_path / "train.json"), FULL_CHAIN, out, "--split", "train") == 0
    assert run_import(write_full_chain(tmp_path / "test.json", OTHER_CHAINS), FULL_CHAIN, out, "--split", "test") == 0
    capsys.readouterr()
    datasets = tmp_path / "datasets"
    argv = ["datasets", "--traces", str(out), "--out", str(datasets), "--split", "test", "--eval-fraction", "0"]
    assert distill([*argv, "--roles", "re"]) == 0
    from datasets import load_from_disk

    rows = load_from_disk(str(datasets / "re"))["train"]
    assert sorted(json.loads(r["completion"][0]["content"])["response"] for r in rows) == sorted(
        c[5] for c in OTHER_CHAINS
    )


def test_a_mapping_edit_makes_the_import_again_and_a_comment_does_not(tmp_path, capsys):
    data, out = write_full_chain(tmp_path / "d.json"), tmp_path / "run"
    assert run_import(data, FULL_CHAIN, out, "--split", "test") == 0
    commented = tmp_path / "commented.yaml"
    commented.write_text(FULL_CHAIN.read_text() + "# a note that changes nothing the import reads\n")
    capsys.readouterr()
    assert run_import(data, commented, out, "--split", "test") == 0
    assert _summary(capsys)[0]["written"] == 0  # the validated mapping is the same: reused

    mapping = yaml.safe_load(FULL_CHAIN.read_text())
    mapping["answers"]["re"]["response"] = {"field": "cot_data.emotion"}  # the answer from another field
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(mapping))
    assert run_import(data, edited, out, "--split", "test") == 0
    summary, err = _summary(capsys)
    assert f"regenerating {out}: its mapping changed" in err.splitlines() and summary["written"] == 4
    assert _replies(out) == {c[1] for c in CHAINS}  # the new answers, not the old ones kept
    assert TraceStore(out).run_info().source["mapping"] == str(edited)


def test_an_import_made_before_keys_is_made_again(tmp_path, capsys):
    """An --out without a stage key (an earlier version's import, or one killed midway) cannot be trusted to hold
    one import: it is made again, once, and reused after."""
    data, out = write_full_chain(tmp_path / "d.json"), tmp_path / "run"
    assert run_import(data, FULL_CHAIN, out, "--split", "test") == 0
    (out / "stage-key.json").unlink()
    (out / "quality.json").write_text("{}")  # what `distill inspect` found in the old traces
    capsys.readouterr()
    assert run_import(data, FULL_CHAIN, out, "--split", "test") == 0
    summary, err = _summary(capsys)
    assert "no stage key recorded" in err and summary["written"] == 4 and not (out / "quality.json").exists()
    assert run_import(data, FULL_CHAIN, out, "--split", "test") == 0
    assert _summary(capsys)[0]["written"] == 0


def _generated_run(out: Path) -> dict[str, bytes]:
    """A run `distill generate` could have written (paid teacher traces): run.json and one trace."""
    from data_prep.dialogues import Dialogue, Turn

    store = TraceStore(out)
    store.claim(RunInfo(pipeline={"reflection": False}, backend_name="openai", model="gpt-4o", prompt_version="v3"))
    turns = [Turn(speaker="seeker", text="I lost my keys.")]
    d = Dialogue(id="d#1", conv_id="d", turns=turns, situation="", emotion="")
    store.append(Trace(key="k1", dialogue=d, backend="openai", model="gpt-4o", prompt_version="v3",
                       prompt_style="teacher", config={}, steps=[Step(role="ers", messages=[])],
                       outputs={"ers": {"response": "Oh no, where did you see them last?"}}))  # fmt: skip
    return {p.name: p.read_bytes() for p in out.iterdir()}


@pytest.mark.parametrize("run_json", [True, False], ids=["generated-run", "traces-without-run-json"])
def test_an_out_holding_anything_but_an_import_is_refused_and_left_as_it_was(tmp_path, capsys, run_json):
    out = tmp_path / "run"
    before = _generated_run(out)
    if not run_json:
        (out / "run.json").unlink()
        before.pop("run.json")
    assert run_import(write_full_chain(tmp_path / "d.json"), FULL_CHAIN, out, "--split", "test") == 2
    assert str(out / ("run.json" if run_json else "traces.jsonl")) in _error(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def _unwritable(tmp_path: Path) -> Path:
    """A folder this process cannot create anything in. chmod does not stop root (the tests' user in the dev
    container), so root gets /sys, where creating a folder is not permitted to anyone."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    try:
        (Path("/sys") / "trace-distill-probe").mkdir()
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES, errno.EROFS):
            return Path("/sys")
    pytest.skip("running as root with no folder it cannot write to")


def test_an_out_that_cannot_be_written_is_one_line_naming_it(tmp_path, capsys):
    folder = _unwritable(tmp_path)
    out = folder / "trace-distill-run"
    try:
        code = run_import(write_full_chain(tmp_path / "d.json"), FULL_CHAIN, out, "--split", "test")
    finally:
        if folder.parent == tmp_path:
            folder.chmod(0o755)  # so pytest can clean tmp_path
    assert code == 2 and str(out) in _error(capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    "content, words",
    [('{"pipeline": {}, "backend_na', "not valid JSON"), ("[1, 2]", "a JSON object is expected")],
    ids=["truncated", "not-an-object"],
)
def test_a_run_json_that_is_not_a_run_record_is_one_line_naming_it(tmp_path, capsys, content, words):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(content)
    assert run_import(write_full_chain(tmp_path / "d.json"), FULL_CHAIN, out, "--split", "test") == 2
    line = _error(capsys)
    assert str(out / "run.json") in line and words in line, line
    assert sorted(p.name for p in out.iterdir()) == ["run.json"] and (out / "run.json").read_text() == content
