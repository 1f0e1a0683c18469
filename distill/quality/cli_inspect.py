"""`python -m distill inspect RUN`: the quality checks over a trace run, per role and check, with one example
each; printed as a table and written to RUN/quality.json.

    python -m distill inspect runs/teacher [--thresholds my_thresholds.yaml] [--judge configs/teacher/ollama-qwen.yaml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="trace run directory (holds traces.jsonl)")
    parser.add_argument(
        "--thresholds", default=None, help="YAML of QualityThresholds fields to change (docs/quality.md lists them)"
    )
    parser.add_argument("--no-write", action="store_true", help="print the table only; leave RUN/quality.json alone")
    parser.add_argument(
        "--judge",
        default=None,
        metavar="CONFIG",
        help="also ask a judge model whether each reply is one (reply_judge): a config whose `backend:` names it, "
        "e.g. configs/teacher/ollama-qwen.yaml; off by default",
    )


USER_ERRORS = (ValueError,)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    from distill.pipeline.store import TraceStore
    from distill.quality.audit import check_traces
    from distill.quality.judge import judge_backend
    from distill.quality.thresholds import QualityThresholds

    run_dir = Path(args.run)
    store = TraceStore(run_dir)  # the store owns traces.jsonl's name and format
    if not store.path.is_file():
        raise ValueError(f"{run_dir}: no {store.path.name}; is this a trace run directory?")
    thresholds = QualityThresholds.from_file(args.thresholds)
    judge = judge_backend(args.judge) if args.judge else None  # a bad config fails here, before the checks run
    traces, problems = store.read()
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    if not traces:
        print(f"error: no readable trace in {store.path}", file=sys.stderr)
        return 1
    report = check_traces(traces, thresholds, progress=True, judge=judge)
    print("\n".join(report.table()))
    print(report.summary())
    if not args.no_write:
        print(f"wrote {report.write(run_dir)}", file=sys.stderr)
    return 0
