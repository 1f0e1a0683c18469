"""`python -m eval records`: write a run's record, or render the docs' record blocks (`eval/records/blocks.py`) and
inline figures (`eval/records/inline.py`).

python -m eval records write --curve <out>/curve.json --name ed-400-levers --command "<what ran>"
python -m eval records write --compare 150=<out>/150/compare/report.json [...] --stages <out>/stages \
    --name escot-curve --command "<what ran>"
python -m eval records write --students <out> --name escot-students --command "<what ran>"
python -m eval records write --labels benchmarks/label_decoding.json [...] --name label-decoding --command "<what ran>"
python -m eval records render            # rewrite README.md's and docs/*.md's record blocks and inline figures
python -m eval records render --check    # exit 1 when a block or an inline figure differs from its record
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.commands import not_a_directory
from eval.records.blocks import RECORD_NAME, doc_files, rendered_docs, stale_blocks
from eval.records.compare import (
    CompareRecordError,
    RecordFileError,
    read_compare_reports,
    read_stages,
    record_from_compares,
)
from eval.records.curve import (
    RECORDS,
    RecordError,
    git_commit,
    machine_line,
    read_curve,
    record_from_curve,
    repo_relative,
)
from eval.records.labels import read_label_runs, record_from_label_runs
from eval.records.students import read_students_run, record_from_students

# one line, exit 2 (data_prep.commands); OSError: a write the disk refuses, its path in the message
USER_ERRORS = (RecordError, CompareRecordError, RecordFileError, OSError)
# why `--stages` goes with --compare alone: each other source keeps its costs itself, or has none
NO_STAGES = {"curve": "a curve.json keeps no stage records", "students": "students.json keeps its stages",
             "labels": "a label_decoding JSON keeps its own seconds"}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    made_from = "a curve.json, compare reports, an `eval students` run or label_decoding JSONs"
    write = sub.add_parser("write", help=f"a record from a run's output: {made_from}")
    source = write.add_mutually_exclusive_group(required=True)
    source.add_argument("--curve", help="the curve.json an `eval curve` run wrote")
    source.add_argument(
        "--compare", nargs="+", metavar="POINT=REPORT", help="`eval compare` report.json files, one per curve point"
    )
    source.add_argument("--students", metavar="OUT", help="an `eval students` run's --out folder (its students.json)")
    source.add_argument(
        "--labels",
        nargs="+",
        metavar="JSON",
        help="`benchmarks/label_decoding.py` outputs (its --out JSON), one per run: strategy or --emotion",
    )
    write.add_argument(
        "--stages", default=None, help="with --compare: stage records, a run's <out>/stages.json or a folder of them"
    )
    write.add_argument("--name", required=True, help="the record's name: docs/records/<name>.json")
    write.add_argument("--command", required=True, help="the command that made the run, as a reader would rerun it")
    write.add_argument("--commit", default=None, help="the commit the run ran at (default: this checkout's HEAD)")
    write.add_argument("--machine", default=None, help="the machine it ran on (default: this one's CPU)")
    write.add_argument("--out", default=str(RECORDS), help="the records folder")
    render = sub.add_parser("render", help="rewrite the record blocks and inline figures of README.md and docs/*.md")
    render.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 when a block or an inline figure is stale"
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "write":
        return _write(args)
    if args.check:
        stale = stale_blocks(doc_files(), RECORDS)
        print("\n".join(stale) or "every record block and inline figure matches its record")
        return 1 if stale else 0
    for path, (text, rendered) in rendered_docs(doc_files(), RECORDS).items():  # all rendered before any is written
        if rendered != text:
            path.write_text(rendered, encoding="utf-8")
            print(f"rendered {path}")
    return 0


def _write(args: argparse.Namespace) -> int:
    """Every input read and checked, and the record made, before anything is written."""
    if not RECORD_NAME.fullmatch(args.name) or args.name in (".", ".."):
        raise RecordError(
            f"--name {args.name!r}: a record's name is a plain file name of a-z, 0-9, '.', '_' and '-' "
            "(written as <out>/NAME.json; a docs block names it `<!-- record: NAME -->`)"
        )
    why = not_a_directory(args.out)
    if why:
        raise RecordError(f"--out {args.out}: {why}, not the records folder")
    commit, machine = args.commit or git_commit(), args.machine or machine_line()
    if args.stages and not args.compare:
        kept = next(said for source, said in NO_STAGES.items() if getattr(args, source))
        raise RecordError(f"--stages goes with --compare: {kept}")
    if args.curve:
        record = record_from_curve(read_curve(Path(args.curve)), args.name, args.command, commit, machine)
    elif args.students:
        students, report = read_students_run(Path(args.students))
        record = record_from_students(students, report, args.name, args.command, commit, machine)
    elif args.labels:
        record = record_from_label_runs(read_label_runs(args.labels), args.name, args.command, commit, machine)
    else:
        reports = read_compare_reports(args.compare)
        stages = read_stages(Path(args.stages) if args.stages else None)
        record = record_from_compares(reports, stages, args.name, args.command, commit, machine)
    path = Path(args.out) / f"{args.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(repo_relative(record), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0
