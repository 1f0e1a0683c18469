"""`python -m eval curve --config configs/eval/curve.yaml --out <dir>`: the command; `eval.curve` does the work."""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.curve import load_curve_config, run_curve
from eval.curve_report import CURVE_MD, headline
from eval.systems import CompareError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="curve YAML, e.g. configs/eval/curve.yaml")
    parser.add_argument("--out", required=True, help="run folder; rerunning resumes it (finished points are reused)")


USER_ERRORS = (CompareError, ValueError)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    curve = run_curve(load_curve_config(args.config), Path(args.out), args.config)
    print("\n".join(headline(curve)))
    print(f"report: {Path(args.out) / CURVE_MD}")
    return 0
