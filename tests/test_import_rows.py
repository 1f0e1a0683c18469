"""`distill import`'s checks on each row's dialogue: an id that is a printable string or an integer, one dialogue
per id, a seeker turn to answer, and a reference reply that is not already in the dialogue it answers (a failed trace,
counted, and the `leaked_reference` quality check, which `distill inspect` reports for an imported run as for a
generated one).

The fixtures are test_import's small ESD-CoT-like files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_import import CHAINS, FULL_CHAIN, INSTRUCTION, REPO, run_import, write_full_chain, write_instruction

from distill.__main__ import main as distill
from distill.pipeline.store import TraceStore


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the shipped mappings name the pipeline as configs/pipelines/escot.yaml


def _rows(tmp_path: Path, change) -> Path:
    """test_import's full-chain rows, changed by `change(rows)`, as a new file."""
    path = write_full_chain(tmp_path / "d.json")
    rows = json.loads(path.read_text())
    change(rows)
    path.write_text(json.dumps(rows))
    return path


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.splitlines()[-1].startswith("python -m distill import: error: "), err
    return err.splitlines()[-1]


def test_an_id_that_names_a_record_is_refused(tmp_path, capsys):
    """`id: original_data` names a dict: every row fails, and the import is refused naming the field."""
    mapping = yaml.safe_load(FULL_CHAIN.read_text())
    mapping["id"] = "original_data"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mapping))
    out = tmp_path / "run"
    assert run_import(write_full_chain(tmp_path / "d.json"), tmp_path / "m.yaml", out) == 2
    assert "id field 'original_data' holds a dict, not a string or an integer" in _error(capsys)
    assert not out.exists()


@pytest.mark.parametrize("bad_id", [{"n": 1}, [1], True, None], ids=["dict", "list", "bool", "null"])
def test_a_row_whose_id_is_not_a_string_or_an_integer_is_counted_and_left_out(tmp_path, capsys, bad_id):
    data = _rows(tmp_path, lambda rows: rows[1].update(id=bad_id))
    out = tmp_path / "run"
    assert run_import(data, FULL_CHAIN, out, "--max-failed-share", "0.25") == 0
    err = capsys.readouterr().err
    assert "failed 1: dialogue: " in err and "(e.g. row 2)" in err
    assert sorted(t.dialogue.id for t in TraceStore(out).read()[0]) == ["0", "2", "3"]


@pytest.mark.parametrize(
    "bad_id, code",
    [("4\n5", "U+000A"), ("4\t5", "U+0009"), ("\x1b[31m4", "U+001B"), ("4\x00", "U+0000"), ("4\x85", "U+0085")],
    ids=["newline", "tab", "escape", "nul", "c1-next-line"],
)
def test_an_id_with_a_control_character_is_refused_naming_the_row_and_field(tmp_path, capsys, bad_id, code):
    """An id is shown as it is (file names, log lines, reports): a line break forges a line, an escape recolours."""
    out = tmp_path / "run"
    data = _rows(tmp_path, lambda rows: rows[1].update(id=bad_id))
    assert run_import(data, FULL_CHAIN, out, "--max-failed-share", "1") == 2
    error = _error(capsys)
    assert f"{data} row 2, field 'id': control character {code} in the id" in error and bad_id not in error
    assert not out.exists()


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda rows: rows[2].update(id=0), "rows 1 and 3 share the id '0' with different dialogues"),
        (lambda rows: rows.append(rows[1]), "rows 2 and 5 share the id '1' with the same content (a repeated row)"),
        (
            lambda rows: rows.append({**rows[1], "cot_data": {**rows[1]["cot_data"], "emotion": "Fear."}}),
            "rows 2 and 5 share the id '1' with different chains",
        ),
    ],
    ids=["other-dialogue", "repeated-row", "other-chain"],
)
def test_one_id_given_to_two_rows_is_refused_naming_both(tmp_path, capsys, change, words):
    out = tmp_path / "run"
    assert run_import(_rows(tmp_path, change), FULL_CHAIN, out, "--max-failed-share", "1") == 2
    assert words in _error(capsys)
    assert not out.exists()


def test_a_dialogue_without_a_seeker_turn_is_counted_and_left_out(tmp_path, capsys):
    def supporter_only(rows):
        rows[3]["original_data"]["dialog"] = [{"speaker": "supporter", "content": "Hi, how are you today?"}]

    out = tmp_path / "run"
    assert run_import(_rows(tmp_path, supporter_only), FULL_CHAIN, out, "--max-failed-share", "0.25") == 0
    err = capsys.readouterr().err
    assert "failed 1: dialogue: no seeker turn (nothing for the reply to answer) (e.g. row 4)" in err
    assert sorted(t.dialogue.id for t in TraceStore(out).read()[0]) == ["0", "1", "2"]


def test_a_reference_reply_already_in_its_dialogue_is_a_failed_trace_that_inspect_reports(tmp_path, capsys):
    """Row 2's dialogue runs on into its own reply (the supporter's last turn, in other case and spacing)."""

    def leak(rows):
        reply = rows[1]["original_data"]["response"]
        rows[1]["original_data"]["dialog"].append({"speaker": "supporter", "content": f"  {reply.upper()} "})

    out = tmp_path / "run"
    assert run_import(_rows(tmp_path, leak), FULL_CHAIN, out, "--max-failed-share", "0.25") == 0
    captured = capsys.readouterr()
    assert "failed 1: dialogue: reference reply leaked into the dialogue (e.g. id 1)" in captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert (summary["ok"], summary["failed"], summary["written"]) == (3, 1, 4)
    leaked = next(t for t in TraceStore(out).read()[0] if t.dialogue.id == "1")
    assert leaked.status == "failed" and leaked.failure.startswith("dialogue: reference reply leaked")
    assert leaked.outputs["re"]["response"] == CHAINS[1][5]  # its answers stored: inspect reads them

    assert distill(["inspect", str(out)]) == 0
    quality = json.loads((out / "quality.json").read_text())
    check = quality["roles"]["re"]["checks"]["leaked_reference"]
    assert check["count"] == 1 and check["example"]["dialogue_id"] == "1"
    assert "re leaked_reference 1/4" in capsys.readouterr().out


@pytest.mark.parametrize(
    "edit, message",
    [
        (("teacher: chatgpt-esdcot", "teacher: '  '"), "field 'teacher': String should have at least 1 character"),
        (("id: dialog_id", "id: ''"), "field 'id': String should have at least 1 character"),
    ],
)
def test_a_blank_teacher_or_id_in_the_mapping_is_refused(tmp_path, capsys, edit, message):
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(INSTRUCTION.read_text(encoding="utf-8").replace(*edit), encoding="utf-8")
    data = write_instruction(tmp_path / "train.json")
    assert run_import(data, mapping, tmp_path / "run", "--split", "train") == 2
    assert message in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_a_blank_split_is_refused(tmp_path, capsys):
    data = write_instruction(tmp_path / "train.json")
    assert run_import(data, INSTRUCTION, tmp_path / "run", "--split", " ") == 2
    assert "--split: blank" in capsys.readouterr().err and not (tmp_path / "run").exists()
