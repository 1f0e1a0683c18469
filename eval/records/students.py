"""A record made from an `eval students` run: its students.json and the compare report beside it (`eval/report.json`).

The record (`docs/records/<name>.json`, `kind: students`) holds what a compare record holds for its one point (the
systems' figures with their 95% CIs, the majority class, the paired differences: each student against `direct`,
and the students against each other, at each seed), plus per student, seed and role where its training stopped
(the epoch, its steps, the epoch it kept and that epoch's validation loss, its seconds) and every stage's seconds,
peak RSS and whether the run reused it. It renders as a full block (`render_students_record`) and as the README's
`summary` line (`render_students_summary`); reading, checking and the tables are `eval.records.compare`'s.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any, Optional

from eval.compare.markdown import fmt, stages_lines, wrap_paragraph
from eval.records.compare import (
    COMPARE_RECORD_FIELDS,
    REPORT,
    REPORT_FIELDS,
    CompareRecordError,
    RecordFileError,
    family_line,
    labels_in_words,
    paired_in_words,
    paired_table,
    read_json_object,
    record_from_compares,
    require_fields,
    run_line,
    systems_table,
)
from eval.students.report import STUDENTS_JSON, epoch_text, own_runs, stop_kind, stopped_table

STUDENTS = "an `eval students` run's students.json"
# what the record reads from students.json (`eval.students.report` writes it), and from each of its stages
STUDENTS_FIELDS = {"n": "number", "seeds": "list", "students[].name": "text", "students[].seeds[].seed": "number",
                   "students[].seeds[].system": "text", "students[].seeds[].roles": "object",
                   "stages": "object"}  # fmt: skip
STAGE_FIELDS = {"seconds": "number", "peak_rss_mb": "any"}
# what rendering reads from a students record: a compare record's, plus where each role stopped
STUDENTS_RECORD_FIELDS = {**COMPARE_RECORD_FIELDS, "students[].name": "text", "students[].seeds[].seed": "number",
                          "students[].seeds[].system": "text", "students[].seeds[].roles": "object"}  # fmt: skip
BASELINE = "direct"  # the student every other is asked against: the dialogue to the reply alone, fine-tuned
REPLY_METRICS = ("bertscore_f1", "relevance")  # the paired figures of the reply the summary states
CONVERGENCE = ("stopped_at_epoch", "max_epochs", "stopped_early", "steps", "best_epoch", "best_eval_loss",
               "train_seconds")  # fmt: skip


# --- reading and writing ---------------------------------------------------------------------------


def read_students_run(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """An `eval students` --out folder's students.json and its compare report, each checked for what the record
    reads, or one line naming the file and what is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        said = "a file" if folder.exists() else "no such folder"
        raise RecordFileError(f"--students {folder}: {said}, not an `eval students` run's folder (its --out)")
    path = folder / STUDENTS_JSON
    if not path.exists():
        raise RecordFileError(f"{path}: no such file: --students {folder} is no finished `eval students` run")
    students = read_json_object(path, STUDENTS)
    require_fields(students, path, STUDENTS, STUDENTS_FIELDS)
    for name, stage in students["stages"].items():
        require_fields(stage if isinstance(stage, dict) else {}, path, f"{STUDENTS} (stage '{name}')", STAGE_FIELDS)
    _each_once(students, path)
    report_path = folder / "eval" / "report.json"
    if not report_path.exists():
        raise RecordFileError(f"{path}: its compare report {report_path} is missing (the run writes it first)")
    report = read_json_object(report_path, REPORT)
    require_fields(report, report_path, REPORT, REPORT_FIELDS)
    scored = {row["name"] for row in report["systems"]}
    unscored = [s["system"] for student in students["students"] for s in student["seeds"] if s["system"] not in scored]
    if unscored:
        raise CompareRecordError(f"{report_path} scores no {', '.join(unscored)}, which {path} trained: not its report")
    return students, report


def _each_once(students: dict[str, Any], path: Path) -> None:
    """Refuse a students.json the record cannot represent: no student, a student without a seed run, or a student,
    a system or a seed listed twice (each would be recorded, and its rows rendered, twice)."""
    if not students["students"]:
        raise RecordFileError(f"{path}: `students` lists no student; a students record needs the students it trained")
    for student in students["students"]:
        if not student["seeds"]:
            raise RecordFileError(f"{path}: student {student['name']} lists no seed run (`students[].seeds` is empty)")
    listed = {
        "student": [student["name"] for student in students["students"]],
        "system": [s["system"] for student in students["students"] for s in student["seeds"]],
        "seed": students["seeds"],
    }
    for what, names in listed.items():
        if twice := next((name for i, name in enumerate(names) if name in names[:i]), None):
            raise RecordFileError(f"{path}: {what} {twice} is listed twice; a record keeps each {what} once")


def record_from_students(
    students: dict[str, Any], report: dict[str, Any], name: str, command: str, commit: str, machine: str
) -> dict[str, Any]:
    """The record of one `eval students` run: its compare at N train dialogues, where each role stopped, its stages."""
    stages = [{"stage": stage, **{k: s.get(k) for k in ("seconds", "peak_rss_mb", "reused")}}
              for stage, s in students["stages"].items()]  # fmt: skip
    point = {str(students["n"]): report}
    record = record_from_compares(point, stages, name, command, commit, machine, _pairs(students["students"]))
    return {
        **record,
        "kind": "students",
        "seeds": students["seeds"],
        "baseline": BASELINE,
        "students": [
            {"name": student["name"], "learns": student.get("learns"), "varies": student.get("varies"), "seeds": [
                {"seed": s["seed"], "system": s["system"],
                 "roles": {role: {k: (c or {}).get(k) for k in CONVERGENCE} for role, c in s["roles"].items()}}
                for s in student["seeds"]]}
            for student in students["students"]
        ],
    }  # fmt: skip


def _pairs(students: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """At each seed: every student − `direct`; each variant − the student it varies; the other students against
    each other (first − second in the config's order)."""
    varies = {student["name"]: student.get("varies") for student in students}
    by_seed: dict[Any, dict[str, str]] = {}
    for student in students:
        for s in student["seeds"]:
            by_seed.setdefault(s["seed"], {})[student["name"]] = s["system"]
    pairs: list[tuple[str, str]] = []
    for systems in by_seed.values():
        others = [student for student in systems if student != BASELINE]
        pairs += [(systems[student], systems[BASELINE]) for student in others if BASELINE in systems]
        pairs += [(systems[s], systems[varies[s]]) for s in others if varies[s] in systems]
        pairs += list(combinations([systems[s] for s in others if not varies[s]], 2))
    return tuple(pairs)


# --- rendering -------------------------------------------------------------------------------------


def render_students_record(record: dict[str, Any], only: Optional[list[str]] = None) -> list[str]:
    """The systems' figures and cost, the paired differences, where each role stopped, the stages' costs; with
    `only` (a block's `systems=`), those systems in that order, the paired rows between two of them, and where
    their roles stopped in one sentence (the full block has the table and the stages)."""
    point = record["points"][0]
    if only:
        point = _only(record, point, only)
    title = (f"**{point['point']} train dialogues, each student trained to early stopping or its epoch cap** "
             f"(majority class {fmt(point['majority_class'], 3)}):")  # fmt: skip
    lines = [title, "", *systems_table(point["systems"]), ""]
    if point["paired"]:
        lines += [*paired_table(point["paired"]), "", *wrap_paragraph(family_line(point)), ""]
    if only:
        stops = _stops_in_words(record["students"], only)
        return [*lines, *([*wrap_paragraph(stops), ""] if stops else []), *wrap_paragraph(run_line(record))]
    stopped = (
        "Where each student stopped: each role trained until its validation loss stopped improving (or its last "
        "epoch), keeping its best epoch:"
    )
    lines += [*wrap_paragraph(stopped), "", *stopped_table(record["students"]), ""]
    return [*lines, *stages_lines(record["stages"]), *wrap_paragraph(run_line(record))]


def _only(record: dict[str, Any], point: dict[str, Any], only: list[str]) -> dict[str, Any]:
    """The point with `only` these systems, in this order, and the paired rows between two of them; a name the
    record does not hold is an error naming the ones it does."""
    by_name = {s["name"]: s for s in point["systems"]}
    unknown = [name for name in only if name not in by_name]
    if unknown:
        raise CompareRecordError(
            f"record '{record['name']}' has no system {', '.join(unknown)} (it has {', '.join(by_name)})"
        )
    paired = [p for p in point["paired"] if set(p["pair"]) <= set(only)]
    return {**point, "systems": [by_name[name] for name in only], "paired": paired}


def render_students_summary(record: dict[str, Any]) -> list[str]:
    """The README's line: each student against `direct` on the reply (a variant on BERTScore alone; the full block
    has the rest), each student's label accuracy beside the majority class, the epoch each role stopped at, and the
    machine."""
    point = record["points"][0]
    baselines = {s["system"] for student in record["students"] if student["name"] == record["baseline"]
                 for s in student["seeds"]}  # fmt: skip
    variants = {s["system"] for student in record["students"] if student.get("varies") for s in student["seeds"]}
    against = [paired_in_words(p) for p in point["paired"] if _against(p, baselines, variants)]
    said = f": {'; '.join(against)}" if against else f" (no paired reply figure against {record['baseline']})"
    trained = {s["system"] for student in record["students"] for s in student["seeds"]}
    students_only = {**point, "systems": [s for s in point["systems"] if s["name"] in trained]}
    text = (
        f"{point['point']} train dialogues, each student trained to early stopping or its epoch cap, against "
        f"{record['baseline']} on "
        f"the reply{said}{labels_in_words(students_only, record['reference'])}. {_stops_in_words(record['students'])}"
        f" Run on {record['machine']} (95% CIs; record `docs/records/{record['name']}.json`)."
    )
    return wrap_paragraph(text)


def _against(row: dict[str, Any], baselines: set[str], variants: set[str]) -> bool:
    """A student against `direct` on the reply (a variant on BERTScore alone), either side first: a declared primary
    keeps the order it was declared in."""
    others = [name for name in row["pair"] if name not in baselines]
    if len(others) != 1:
        return False
    return row["metric"] in (REPLY_METRICS[:1] if others[0] in variants else REPLY_METRICS)


def _stops_in_words(students: list[dict[str, Any]], only: Optional[list[str]] = None) -> str:
    """`Each role stopped at epoch (of at most 5): traces em 2 (early), sr 2 (early), re 1 (early); ...`, or
    `Every role stopped at epoch 2 (of at most 2), not converged at the cap.` where they all stopped alike (`only`
    these systems' roles, where given; nothing where none of them trained)."""
    runs = [s for s in own_runs(students) if only is None or s["system"] in only]
    if not runs:
        return ""
    roles = [c for s in runs for c in s["roles"].values()]
    most = sorted({epoch_text(c.get("max_epochs")) for c in roles} - {fmt(None)})
    of = f" (of at most {' or '.join(most)})" if most else ""
    stops = {(epoch_text(c.get("stopped_at_epoch")), stop_kind(c)) for c in roles}
    if len(stops) == 1:  # the common case of a capped CPU run: one number says it
        epoch, kind = stops.pop()
        return f"Every role stopped at epoch {epoch}{of}, {kind}."
    each = [f"{s['system']} " + ", ".join(_stops(s["roles"])) for s in runs]
    return f"Each role stopped at epoch{of}: {'; '.join(each)}."


def _stops(roles: dict[str, dict[str, Any]]) -> list[str]:
    """`em 2`, `sr 2`: each role with the epoch it stopped at."""
    return [f"{role} {epoch_text(c.get('stopped_at_epoch'))} ({stop_kind(c)})" for role, c in roles.items()]
