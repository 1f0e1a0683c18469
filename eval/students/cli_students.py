"""`python -m eval students --config configs/eval/escot-students.yaml --out <dir>`: the command; `recipe.py` does the
work, `report.py` writes students.json/.md beside the compare's report.

    python -m eval students --config configs/eval/escot-students.yaml --out runs/escot-students \\
        [--n 200] [--epochs 2] [--seeds 42 43 44] [--limit 20] [--student traces direct]

A rerun with the same inputs reuses every stage; an edited mapping, data file or train setting remakes what
depends on it, saying why in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.compare.systems import CompareError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="students YAML, e.g. configs/eval/escot-students.yaml")
    parser.add_argument("--out", required=True, help="run folder; a rerun reuses every stage whose inputs held")
    parser.add_argument("--n", type=int, default=None, help="the first N train rows (the config's `n`)")
    parser.add_argument("--epochs", type=int, default=None, help="the most epochs a role trains (`num_train_epochs`)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="one training run per seed")
    parser.add_argument(
        "--limit", type=int, default=None, help="score the first K test dialogues (`compare.test_limit`)"
    )
    parser.add_argument("--student", nargs="+", default=None, help="train only these of the config's students")
    parser.add_argument(
        "--eval-fraction", type=float, default=None,
        help="hold out this share of the train conversations as validation (when the data has no validation file)",
    )  # fmt: skip


USER_ERRORS = (CompareError, ValueError)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    from eval.students.config import load_students_config
    from eval.students.recipe import run_students
    from eval.students.report import STUDENTS_MD, write_students

    overrides = {"n": args.n, "num_train_epochs": args.epochs, "seeds": args.seeds, "student": args.student,
                 "test_limit": args.limit}  # fmt: skip
    if args.eval_fraction is not None:  # instead of a validation file
        overrides.update(eval_fraction=args.eval_fraction, data=_without_validation(args.config))
    config = load_students_config(args.config, **overrides)
    out = Path(args.out)
    report, ran = run_students(config, out)
    write_students(out, config, report, ran)
    print(f"report: {report.with_suffix('.md')}")
    print(f"students: {out / STUDENTS_MD}")
    return 0


def _without_validation(path: str) -> dict:
    from data_prep.config_file import read_mapping

    data = dict(read_mapping(path, CompareError).get("data") or {})
    return {**data, "validation": None}
