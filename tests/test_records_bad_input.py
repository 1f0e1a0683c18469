"""Bad input to `python -m eval records` and `python -m eval.reference`: each is one line on stderr that names the
file and what is wrong, exit 2, no traceback, and nothing written (issue 68). `records write` runs as a user runs
it, in a subprocess from a scratch folder; `records render` and `eval.reference write` run in this process through
the same dispatch, pointed at scratch docs, records and reference folders."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_records import _compare_report, _curve

from eval import reference
from eval.__main__ import main as eval_main
from eval.records import cli as cli_records
from eval.records.blocks import stale_blocks
from eval.records.curve import record_from_curve

WRITE = ["--command", "bash run.sh", "--commit", "abc1234", "--machine", "test CPU", "--out", "rec"]


def _records(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "eval", "records", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(err: str, *names: str) -> str:
    """The one line a refusal prints, checked to name each of `names`."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(name in lines[0] for name in names), lines[0]
    return lines[0]


def _write_refused(cwd: Path, *args: str, names: tuple[str, ...] = ()) -> str:
    """Run `records write` and check it refuses in one line naming `names`, leaving `cwd` as it was."""
    before = _files(cwd)
    result = _records(cwd, "write", *args)
    assert result.returncode == 2, result.stderr
    assert _files(cwd) == before  # nothing written, nothing changed
    return _refused(result.stderr, *names)


def _report_file(folder: Path, name: str, change=None) -> str:
    report = _compare_report(0.0)
    if change:
        change(report)
    (folder / name).write_text(json.dumps(report))
    return name


def test_a_good_write_from_a_scratch_folder_works(tmp_path):
    """The control for the refusals below: the same command with good input writes the record."""
    a = _report_file(tmp_path, "a.json")
    result = _records(tmp_path, "write", "--compare", f"150={a}", "--name", "demo", *WRITE)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "rec" / "demo.json").read_text())["points"][0]["point"] == "150"


def test_a_point_given_twice_is_refused_not_overwritten(tmp_path):
    a, b = _report_file(tmp_path, "a.json"), _report_file(tmp_path, "b.json")
    line = _write_refused(tmp_path, "--compare", f"150={a}", f"150={b}", "--name", "demo", *WRITE, names=(a, b))
    assert "point 150 is given twice" in line


def _set(path: str, value):
    def change(report):
        *parents, leaf = path.split(".")
        node = report
        for part in parents:
            node = node[part]
        node[leaf] = value

    return change


@pytest.mark.parametrize(
    "change, said",
    [
        (_set("test.dialogues", "runs/other/test"), "runs/other/test (test, 4 dialogues)"),
        (_set("test.split", "validation"), "(validation, 4 dialogues)"),
        (_set("test.n", 3), "(test, 3 dialogues)"),
        (_set("test.ids", ["0", "1", "2", "9"]), "with other dialogue ids"),
        (_set("settings.reference_system", "traces"), "reference system is traces"),
    ],
)
def test_points_scored_on_different_test_sets_are_refused_naming_both(tmp_path, change, said):
    """The record states one test set (and one reference): a point scored on another is refused, not dropped."""
    a, b = _report_file(tmp_path, "a.json"), _report_file(tmp_path, "b.json", change)
    line = _write_refused(tmp_path, "--compare", f"150={a}", f"400={b}", "--name", "demo", *WRITE, names=(a, b))
    assert said in line


@pytest.mark.parametrize("name", ["../escaped", "", ".", "..", "sub/demo", "Demo"])
def test_the_name_is_a_plain_file_name_a_block_can_name(tmp_path, name):
    a = _report_file(tmp_path, "a.json")
    line = _write_refused(tmp_path, "--compare", f"150={a}", "--name", name, *WRITE, names=(f"--name {name!r}",))
    assert "plain file name" in line and not (tmp_path / "escaped.json").exists()


def test_stages_must_be_a_folder_of_stage_records(tmp_path):
    a = _report_file(tmp_path, "a.json")
    args = ["--compare", f"150={a}", "--name", "demo", *WRITE]
    assert "no such folder" in _write_refused(tmp_path, *args, "--stages", "nosuch", names=("nosuch",))
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "import.json").write_text(json.dumps({"stage": "import", "seconds": 3.0}))
    line = _write_refused(tmp_path, *args, "--stages", "stages", names=("import.json",))
    assert "not a stage record: `peak_rss_mb` is missing" in line
    (tmp_path / "curve.json").write_text(json.dumps(_curve()))
    args = ["--curve", "curve.json", "--stages", "stages", "--name", "demo", *WRITE]
    assert "--stages goes with --compare" in _write_refused(tmp_path, *args, names=("--stages",))


def _bad_input(folder: Path, kind: str) -> str:
    path = folder / "input.json"
    if kind == "a folder":
        path.mkdir()
    elif kind == "Latin-1":
        path.write_bytes('{"test": "café"}'.encode("latin-1"))
    elif kind == "truncated":
        path.write_text(json.dumps(_compare_report(0.0))[:50])
    else:
        path.write_text(kind)
    return path.name


BAD_INPUTS = [("[]", "holds an array"), ("{}", "is missing"), ("a folder", "a folder"), ("Latin-1", "not UTF-8"),
              ("truncated", "line 1 column 51")]  # fmt: skip


@pytest.mark.parametrize("kind, why", BAD_INPUTS)
@pytest.mark.parametrize("source", ["--curve", "--compare"])
def test_an_input_that_is_not_a_json_object_of_its_kind_is_one_line_naming_it(tmp_path, source, kind, why):
    path = _bad_input(tmp_path, kind)
    given = path if source == "--curve" else f"150={path}"
    assert why in _write_refused(tmp_path, source, given, "--name", "demo", *WRITE, names=(path,))


@pytest.mark.parametrize("out", ["taken", "taken/rec"])
def test_an_out_that_is_a_file_is_refused(tmp_path, out):
    (tmp_path / "taken").write_text("mine\n")
    a = _report_file(tmp_path, "a.json")
    args = ["--compare", f"150={a}", "--name", "demo", *WRITE[:-2], "--out", out]
    assert "is a file" in _write_refused(tmp_path, *args, names=("--out taken",))


# --- render --check ------------------------------------------------------------------------------


@pytest.fixture
def scratch_docs(tmp_path, monkeypatch):
    """A records folder holding a curve run's record `demo` and a compare record `escot`, and one doc whose text
    the test sets; `records render` reads these instead of the repository's."""
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "demo.json").write_text(json.dumps(record_from_curve(_curve(), "demo", "bash run.sh", "abc", "cpu")))
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_compare_report(0.0)))
    argv = ["records", "write", "--compare", f"150={report}", "--name", "escot", "--command", "c", "--commit", "abc",
            "--machine", "cpu", "--out", str(folder)]  # fmt: skip
    assert eval_main(argv) == 0
    doc = tmp_path / "doc.md"
    monkeypatch.setattr(cli_records, "RECORDS", folder)
    monkeypatch.setattr(cli_records, "doc_files", lambda: [tmp_path / "README.md", doc])
    (tmp_path / "README.md").write_text("<!-- record: demo -->\nstale\n<!-- /record -->\n")
    return doc


def _render_refused(capsys, scratch_docs, said: str, *names: str) -> str:
    """The doc refused by the blocks' checker with `said`, and by `records render [--check]` in one line naming it,
    `said` and `names`, with nothing written."""
    with pytest.raises(ValueError, match=re.escape(said)):
        stale_blocks([scratch_docs], cli_records.RECORDS)
    capsys.readouterr()
    before = _files(scratch_docs.parent)
    for check in (["--check"], []):  # neither checks nor writes a thing
        assert eval_main(["records", "render", *check]) == 2
        assert _files(scratch_docs.parent) == before
        line = _refused(capsys.readouterr().err, str(scratch_docs), said, *names)
    return line


@pytest.mark.parametrize(
    "text, said",
    [
        ("# A\n\n<!-- /record -->\n", "doc.md:3: a `<!-- /record -->` that closes no block"),
        ("<!-- record: demo -->\n<!-- /record -->\nold\n<!-- /record -->\n", "doc.md:4: a `<!-- /record -->`"),
        ("# A\n<!-- record: demo summary -->\n<!-- /record -->\n", "doc.md:2: record 'demo': `summary` renders"),
        ("<!-- record: escot systems=traces -->\n<!-- /record -->\n", "doc.md:1: record 'escot' is a compare record"),
    ],
)
def test_a_block_without_its_marker_or_of_a_kind_its_record_cannot_render_fails(scratch_docs, capsys, text, said):
    scratch_docs.write_text(text)
    _render_refused(capsys, scratch_docs, said)


@pytest.mark.parametrize(
    "record, said",
    [([], "holds an array, not a record"), ({"kind": "compare", "name": "escot"}, "not a record: `commit` is missing"),
     ("points", "not a record: `points[].point` is missing")],
)  # fmt: skip
def test_a_record_that_is_not_one_is_one_line_naming_it_and_the_block(scratch_docs, capsys, record, said):
    path = cli_records.RECORDS / "escot.json"
    if record == "points":
        record = {k: v for k, v in json.loads(path.read_text()).items() if k != "points"}
        record["points"] = [{}]
    path.write_text(json.dumps(record))
    scratch_docs.write_text("<!-- record: escot -->\n<!-- /record -->\n")
    _render_refused(capsys, scratch_docs, said, "doc.md:1:", str(path))


def test_a_doc_that_is_not_utf8_is_one_line_naming_it(scratch_docs, capsys):
    scratch_docs.write_bytes("# Résultats\n".encode("latin-1"))
    _render_refused(capsys, scratch_docs, "not UTF-8 (byte 0xe9 at offset 3)")


# --- eval.reference ------------------------------------------------------------------------------


def test_the_reference_folder_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    taken = tmp_path / "reference"
    taken.write_text("mine\n")
    monkeypatch.setattr(reference, "REFERENCE", taken)
    assert reference.main(["write"]) == 2
    assert taken.read_text() == "mine\n"
    assert "it is a file" in _refused(capsys.readouterr().err, str(taken))


def test_a_reference_page_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "commands.md").write_bytes(b"# Command r\xe9f\xe9rence\n")
    monkeypatch.setattr(reference, "REFERENCE", tmp_path)
    assert reference.main(["write", "--check"]) == 2
    assert "not UTF-8 (byte 0xe9 at offset 11)" in _refused(capsys.readouterr().err, str(tmp_path / "commands.md"))
