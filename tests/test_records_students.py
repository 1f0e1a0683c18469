"""`eval records write --students <out>`: the record of an `eval students` run (eval/records/students.py), rendered
into a doc's block and its README `summary` line. One real run (the tiny fixture of test_students.py, the random
2-layer model, BERTScore and relevance on MiniLM) is recorded and rendered, its figures, stop epochs and stages
checked against the run's own files; a hand-made run folder checks the words, and bad input is one line, exit 2,
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_records import _compare_report
from test_records_bad_input import WRITE, _records, _write_refused
from test_students import students, tiny_config

from eval.__main__ import main as eval_main
from eval.compare.markdown import interval
from eval.records.blocks import render_blocks, stale_blocks
from eval.records.compare import PAIRED_METRICS

MACHINE = "2-core test CPU"
BLOCKS = "<!-- record: {name} -->\n<!-- /record -->\n\nREADME:\n\n<!-- record: {name} summary -->\n<!-- /record -->\n"


@pytest.fixture(scope="module")
def students_run(tmp_path_factory, tiny_model_dir) -> Path:
    """`eval students` on the tiny fixture (2 test dialogues, 2 epochs at most), scoring the reply's BERTScore and
    relevance so that each student has a paired reply figure against `direct`."""
    from test_import import REPO

    tmp = tmp_path_factory.mktemp("students-run")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)  # the shipped configs name their files relative to the repository
        config = tiny_config(tmp, tiny_model_dir)
        data = yaml.safe_load(config.read_text())
        data["compare"].update(bertscore={"model": "minilm"}, relevance={"model": "minilm"})
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        assert students(config, tmp / "out") == 0
    return tmp / "out"


def _write(run: Path, rec: Path, name: str = "escot-students") -> dict:
    argv = ["records", "write", "--students", str(run), "--name", name, "--command", "python -m eval students",
            "--commit", "abc1234", "--machine", MACHINE, "--out", str(rec)]  # fmt: skip
    assert eval_main(argv) == 0
    return json.loads((rec / f"{name}.json").read_text())


def _rendered(rec: Path, tmp_path: Path, name: str = "escot-students") -> tuple[Path, str, str]:
    """A doc holding the record's full block and its summary block, rendered; (doc, full block, summary in one line)."""
    doc = tmp_path / "doc.md"
    doc.write_text(render_blocks(BLOCKS.format(name=name), rec, str(doc)))
    full, summary = doc.read_text().split("README:")
    body = summary.split(" summary -->", 1)[1].split("<!-- /record -->")[0]
    return doc, full, " ".join(body.split())


def _verdict(p: dict) -> str:
    if p["ci_low"] <= 0 <= p["ci_high"]:
        return "no finding: CI spans 0"
    if not p.get("survives_holm"):  # a win is the primary comparison or a row that survives Holm
        return "no finding"
    return f"{p['pair'][0] if p['diff'] > 0 else p['pair'][1]} ahead"


@pytest.mark.slow
def test_a_students_run_is_recorded_with_its_figures_where_each_role_stopped_and_its_stages(students_run, tmp_path):
    record = _write(students_run, tmp_path / "rec")
    report = json.loads((students_run / "eval" / "report.json").read_text())
    ran = json.loads((students_run / "students.json").read_text())
    assert record["kind"] == "students" and record["points"][0]["point"] == "4" and record["machine"] == MACHINE
    point = record["points"][0]
    assert [s["name"] for s in point["systems"]] == [s["name"] for s in report["systems"]]
    asked = {(tuple(p["pair"]), p["metric"]) for p in point["paired"]}
    for pair in (("traces", "direct"), ("joint", "direct")):  # each student against direct, on the reply
        assert {(pair, "bertscore_f1"), (pair, "relevance")} <= asked
    assert (("traces", "joint"), "label_accuracy") in asked
    assert {name for pair, _ in asked for name in pair} == {"traces", "direct", "joint"}  # not prompted, not oracle
    doc, full, summary = _rendered(tmp_path / "rec", tmp_path)

    rows = {row["name"]: row for row in report["systems"]}
    for name in ("traces", "direct", "joint"):  # the report's own figures, with their CIs
        f1 = rows[name]["bertscore"]["f1"]
        assert f"| {name} |" in full and interval(f1["value"], f1["ci_low"], f1["ci_high"]) in full
    for student in ran["students"]:  # where each role stopped, as its adapter recorded it
        for role, c in student["seeds"][0]["roles"].items():
            epoch, best = int(c["stopped_at_epoch"]), int(c["best_epoch"])
            stop = "early" if c["stopped_early"] else "flat at the cap" if best < epoch else "not converged at the cap"
            assert f"| {student['name']} | 42 | {role} | {epoch} | 2 | {stop} | {c['steps']} | {best} | " in full
    for stage, cost in ran["stages"].items():
        assert f"| {stage} | {cost['seconds']:.0f} | {cost['peak_rss_mb']} | " in full
    assert "`abc1234`" in full and MACHINE in full

    for p in (p for p in point["paired"] if p["pair"][1] == "direct"):  # who won against direct, in words
        said = f"{' − '.join(p['pair'])} {PAIRED_METRICS[p['metric']]} {interval(p['diff'], p['ci_low'], p['ci_high'])}"
        assert f"{said} ({_verdict(p)}" in summary, summary
    majority = rows["traces"]["label_accuracy"]["majority"]["rate"]
    accuracy = {name: rows[name]["label_accuracy"]["accuracy"]["value"] for name in ("traces", "joint")}
    assert (
        f"traces {accuracy['traces']:.3f}, joint {accuracy['joint']:.3f}; the majority class {majority:.3f}" in summary
    )
    stops = {s["name"]: s["seeds"][0]["roles"] for s in ran["students"]}

    def said(c: dict) -> tuple[int, str]:  # the epoch a role stopped at, and how its training ended
        epoch, best = int(c["stopped_at_epoch"]), int(c["best_epoch"])
        return epoch, "early" if c[
            "stopped_early"
        ] else "flat at the cap" if best < epoch else "not converged at the cap"

    ended = {name: {role: said(c) for role, c in roles.items()} for name, roles in stops.items()}
    t, d, j = ({role: f"{e} ({k})" for role, (e, k) in ended[name].items()} for name in ("traces", "direct", "joint"))
    every = {pair for roles in ended.values() for pair in roles.values()}
    expected = ("Every role stopped at epoch {} (of at most 2), {}.".format(*every.pop()) if len(every) == 1 else
                f"Each role stopped at epoch (of at most 2): traces em {t['em']}, sr {t['sr']}, re {t['re']}; direct "
                f"reply {d['reply']}; joint chain {j['chain']}.")  # fmt: skip
    assert f"{expected} Run on {MACHINE}" in summary, summary
    assert "prompted 0" not in summary and "oracle" not in summary  # the students alone

    assert stale_blocks([doc], tmp_path / "rec") == []  # `records render --check` knows the kind
    doc.write_text(doc.read_text().replace("| traces | 42 | em | ", "| traces | 42 | em | 9"))
    assert stale_blocks([doc], tmp_path / "rec")


# --- a hand-made run folder: the words, and bad input ----------------------------------------------


def _convergence(stopped: float, best: float, loss: float) -> dict:
    return {"stopped_at_epoch": stopped, "stopped_at_step": 40, "stopped_early": stopped < 5, "best_epoch": best,
            "best_eval_loss": loss, "max_epochs": 5.0, "steps": 40, "train_seconds": 310.5}  # fmt: skip


def _run_folder(folder: Path, report: bool = True) -> Path:
    """An `eval students` --out folder as the run leaves it: students.json, and the compare's eval/report.json (the
    one test_records builds: traces ahead of direct on nothing, joint ahead of direct on BERTScore)."""

    def student(name, **roles):
        seed = {"seed": 42, "system": name, "roles": roles, "train_stage": {}, "figures": {}}
        return {"name": name, "learns": ", ".join(roles), "roles": list(roles), "seeds": [seed], "spread": None}

    traces = {"em": _convergence(3.0, 2.0, 1.234), "sr": _convergence(2.0, 1.0, 0.9), "re": _convergence(4.0, 3.0, 2.5)}
    stages = {"traces seed 42: train": {"seconds": 930.4, "peak_rss_mb": 2100, "reused": True},
              "compare": {"seconds": 1200.0, "peak_rss_mb": 3100, "reused": False}}  # fmt: skip
    ran = {"n": 150, "seeds": [42], "stages": stages, "students": [
        student("traces", **traces), student("direct", reply=_convergence(5.0, 5.0, 2.1)),
        student("joint", chain=_convergence(2.0, 1.0, 1.7))]}  # fmt: skip
    folder.mkdir()
    (folder / "students.json").write_text(json.dumps(ran))
    if report:
        (folder / "eval").mkdir()
        (folder / "eval" / "report.json").write_text(json.dumps(_compare_report(0.0)))
    return folder


def test_a_hand_made_run_says_who_won_against_direct_the_labels_and_the_stops(tmp_path):
    record = _write(_run_folder(tmp_path / "out"), tmp_path / "rec", "demo")
    assert [s["stage"] for s in record["stages"]] == ["traces seed 42: train", "compare"]
    _, full, summary = _rendered(tmp_path / "rec", tmp_path, "demo")
    assert (
        "**150 train dialogues, each student trained to early stopping or its epoch cap** (majority class 0.185):"
        in full
    )
    assert "| joint − direct | BERTScore F | 0.020 [0.010, 0.040] | 4 | 0.500 | no |" in full  # turned round
    assert "| traces | 42 | re | 4 | 5 | early | 40 | 3 | 2.5000 | 310.5 |" in full
    assert "| traces seed 42: train | 930 | 2100 | yes |" in full and "| compare | 1200 | 3100 | no |" in full
    assert summary.startswith(
        "150 train dialogues, each student trained to early stopping or its epoch cap, against direct on the reply: "
        "traces − direct "
        "BERTScore F 0.010 [-0.010, 0.020] (no finding: CI spans 0); traces − direct relevance -0.040 [-0.060, -0.030] "
        "(no finding after Holm); joint − direct BERTScore F 0.020 [0.010, 0.040] (no finding after Holm)."
    ), summary
    assert (
        "Strategy accuracy at 150: traces 0.400, joint 0.300; the majority class 0.185: traces, joint above it"
        in summary
    )
    assert (
        "Each role stopped at epoch (of at most 5): traces em 3 (early), sr 2 (early), re 4 (early); direct reply 5 "
        "(not converged at the cap); joint chain 2 (early)." in summary
    )
    assert "Run on 2-core test CPU (95% CIs; record `docs/records/demo.json`)." in summary
    from eval.records.students import _stops_in_words

    one = {"seed": 1, "roles": {"em": _convergence(2.0, 2.0, 1.0)}}
    capped = [{"name": "a", "seeds": [{**one, "system": "a"}]}, {"name": "b", "seeds": [{**one, "system": "b"}]}]
    assert _stops_in_words(capped) == "Every role stopped at epoch 2 (of at most 5), early."
    flat = {"seed": 1, "roles": {"em": _convergence(5.0, 3.0, 1.0)}}  # best before the cap: the loss had turned
    assert _stops_in_words([{"name": "a", "seeds": [{**flat, "system": "a"}]}]) == (
        "Every role stopped at epoch 5 (of at most 5), flat at the cap."
    )


def test_systems_renders_those_systems_the_paired_rows_between_them_and_their_stops_in_a_sentence(tmp_path):
    """`systems=direct,traces`: those two rows in that order, only the rows pairing the two, where their roles
    stopped in one sentence (not the stopped and stages tables), and the run; a name the record lacks is one line."""
    _write(_run_folder(tmp_path / "out"), tmp_path / "rec", "demo")
    block = render_blocks("<!-- record: demo systems=direct,traces -->\n<!-- /record -->\n", tmp_path / "rec")
    rows = [line.split(" | ")[0] for line in block.splitlines() if line.startswith("| ")]
    assert rows == ["| system", "| direct", "| traces", "| first − second", "| traces − direct", "| traces − direct"]
    said = " ".join(block.split())
    assert "traces em 3 (early), sr 2 (early), re 4 (early); direct reply 5 (not converged at the cap)." in said
    assert "joint" not in said and "| stage |" not in said and "Where each student stopped" not in said
    assert "record `docs/records/demo.json`" in said
    with pytest.raises(ValueError, match=r"doc.md:1: record 'demo' has no system oracle \(it has chatgpt, traces, "):
        render_blocks("<!-- record: demo systems=traces,oracle -->\n<!-- /record -->\n", tmp_path / "rec", "doc.md")
    with pytest.raises(ValueError, match="`summary` renders"):
        render_blocks("<!-- record: demo systems=traces summary -->\n<!-- /record -->\n", tmp_path / "rec")


def test_the_declared_primary_comparison_is_said_to_be_tested_alone(tmp_path):
    """The config's `primary` row (traces − direct relevance here) reads as the primary comparison, in the summary
    and in the table; the other rows still read by Holm."""
    folder = _run_folder(tmp_path / "out")
    report = json.loads((folder / "eval" / "report.json").read_text())
    for row in report["paired"]:
        if row["pair"] == ["traces", "direct"] and row["metric"] == "relevance":
            row.update(primary=True, p_holm=0.0001, survives_holm=True)
    (folder / "eval" / "report.json").write_text(json.dumps(report))
    _write(folder, tmp_path / "rec", "demo")
    _, full, summary = _rendered(tmp_path / "rec", tmp_path, "demo")
    assert "traces − direct relevance -0.040 [-0.060, -0.030] (direct ahead, the primary comparison, holds)" in summary
    assert "(no finding after Holm)" in summary
    assert "| traces − direct | relevance | -0.040 [-0.060, -0.030] | 4 | < 0.001 | yes (primary, alone) |" in full


@pytest.mark.parametrize("as_written", ["declared", "systems' order"])
def test_a_primary_declared_against_the_records_order_keeps_its_declared_order(tmp_path, as_written):
    """The config declares `direct − traces` on relevance, the record asks traces − direct: the primary row reads
    direct − traces in the record, its table and the summary, whether the report wrote it as declared or (a report
    made before reports kept the declared order) the other way round."""
    folder = _run_folder(tmp_path / "out")
    report = json.loads((folder / "eval" / "report.json").read_text())
    report["config"]["primary"] = {"pair": ["direct", "traces"], "metric": "relevance"}
    for row in report["paired"]:
        if row["pair"] == ["traces", "direct"] and row["metric"] == "relevance":  # -0.040 [-0.060, -0.030]
            row.update(primary=True, p_holm=0.0001, survives_holm=True)
            if as_written == "declared":
                row.update(pair=["direct", "traces"], diff=0.04, ci_low=0.03, ci_high=0.06)
    (folder / "eval" / "report.json").write_text(json.dumps(report))
    record = _write(folder, tmp_path / "rec", "demo")
    [primary] = [p for p in record["points"][0]["paired"] if p.get("primary")]
    assert (primary["pair"], primary["diff"], primary["ci_low"], primary["ci_high"]) == (
        ["direct", "traces"], 0.04, 0.03, 0.06)  # fmt: skip
    others = [p["pair"] for p in record["points"][0]["paired"] if not p.get("primary")]
    assert ["traces", "direct"] in others and ["direct", "traces"] not in others  # the other rows as the record asks
    _, full, summary = _rendered(tmp_path / "rec", tmp_path, "demo")
    assert "| direct − traces | relevance | 0.040 [0.030, 0.060] | 4 | < 0.001 | yes (primary, alone) |" in full
    assert "direct − traces relevance 0.040 [0.030, 0.060] (direct ahead, the primary comparison, holds)" in summary
    assert "traces − direct relevance" not in full + summary


def test_a_students_json_without_students_is_refused_in_one_line(tmp_path):
    """A students.json that lists no student (an `eval students` run whose `student:` list was empty wrote one) is
    no students record, although its report scores traces and direct."""
    _run_folder(tmp_path / "out")
    ran = json.loads((tmp_path / "out" / "students.json").read_text())
    (tmp_path / "out" / "students.json").write_text(json.dumps({**ran, "students": []}))
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=("out/students.json",))
    assert "`students` lists no student" in line
    ran["students"][1]["seeds"] = []
    (tmp_path / "out" / "students.json").write_text(json.dumps(ran))
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=("out/students.json",))
    assert "student direct lists no seed run" in line


@pytest.mark.parametrize("what", ["student", "system", "seed"])
def test_a_student_listed_twice_is_one_line_naming_it(tmp_path, what):
    """`direct` twice (or one system, or one seed) would be recorded, and its rows rendered, twice."""
    _run_folder(tmp_path / "out")
    ran = json.loads((tmp_path / "out" / "students.json").read_text())
    if what == "student":
        ran["students"].append(ran["students"][1])
    elif what == "system":  # joint's seed run names direct's system
        ran["students"][2]["seeds"][0]["system"] = "direct"
    else:
        ran["seeds"] = [42, 42]
    (tmp_path / "out" / "students.json").write_text(json.dumps(ran))
    named = {"student": "student direct", "system": "system direct", "seed": "seed 42"}[what]
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=("out/students.json", named))
    assert line.endswith(f"{named} is listed twice; a record keeps each {what} once")


def test_a_variant_is_set_against_the_student_it_varies_and_shows_only_the_roles_it_trained():
    """traces-rank (a decoding of traces' adapters) and traces-first (its own sr): each against direct and against
    traces; the stop table keeps traces-first's sr alone and leaves traces-rank out."""
    from eval.records.students import _pairs
    from eval.students.report import own_runs

    def student(name, varies=None, **roles):
        return {"name": name, "varies": varies, "seeds": [{"seed": 42, "system": name, "roles": roles}]}

    same, own = _convergence(2.0, 2.0, 1.0), _convergence(1.0, 1.0, 0.5)
    students = [
        student("traces", em=same, sr=same),
        student("direct", reply=own),
        student("joint", chain=own),
        student("traces-rank", "traces", em=same, sr=same),
        student("traces-first", "traces", em=same, sr=own),
    ]
    assert _pairs(students) == (("traces", "direct"), ("joint", "direct"), ("traces-rank", "direct"),
                                ("traces-first", "direct"), ("traces-rank", "traces"), ("traces-first", "traces"),
                                ("traces", "joint"))  # fmt: skip
    runs = [(s["system"], list(s["roles"])) for s in own_runs(students)]
    assert runs == [("traces", ["em", "sr"]), ("direct", ["reply"]), ("joint", ["chain"]), ("traces-first", ["sr"])]


def test_a_folder_without_students_json_is_one_line(tmp_path):
    (tmp_path / "out").mkdir()
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=("out/students.json",))
    assert "no such file" in line
    line = _write_refused(tmp_path, "--students", "nowhere", "--name", "demo", *WRITE, names=("--students nowhere",))
    assert "no such folder" in line


def test_a_students_json_whose_report_is_missing_is_one_line(tmp_path):
    _run_folder(tmp_path / "out", report=False)
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE,
                          names=("out/students.json", "out/eval/report.json"))  # fmt: skip
    assert "is missing" in line


@pytest.mark.parametrize("which", ["students.json", "eval/report.json"])
def test_corrupt_json_is_one_line_naming_the_file(tmp_path, which):
    _run_folder(tmp_path / "out")
    (tmp_path / "out" / which).write_text('{"n": 150, "students": [')
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=(f"out/{which}",))
    assert "not valid JSON" in line


def test_a_students_json_without_a_field_the_record_reads_is_one_line_naming_it(tmp_path):
    _run_folder(tmp_path / "out")
    ran = json.loads((tmp_path / "out" / "students.json").read_text())
    del ran["students"][1]["seeds"][0]["system"]
    (tmp_path / "out" / "students.json").write_text(json.dumps(ran))
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=("out/students.json",))
    assert "`students[].seeds[].system` is missing" in line


def test_a_report_that_scores_none_of_a_trained_student_is_not_its_report(tmp_path):
    _run_folder(tmp_path / "out")
    ran = json.loads((tmp_path / "out" / "students.json").read_text())
    ran["students"][2]["seeds"][0]["system"] = "joint-s43"
    (tmp_path / "out" / "students.json").write_text(json.dumps(ran))
    line = _write_refused(tmp_path, "--students", "out", "--name", "demo", *WRITE, names=("out/eval/report.json",))
    assert "scores no joint-s43" in line
    args = ["--students", "out", "--stages", "out", "--name", "demo", *WRITE]
    assert "students.json keeps its stages" in _write_refused(tmp_path, *args, names=("--stages",))


def test_the_control_write_from_a_scratch_folder_works(tmp_path):
    _run_folder(tmp_path / "out")
    result = _records(tmp_path, "write", "--students", "out", "--name", "demo", *WRITE)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "rec" / "demo.json").read_text())["kind"] == "students"
