"""`python -m eval curve --config configs/eval/curve.yaml --out <dir>`: the command; `curve.py` does the work."""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.compare.systems import CompareError
from eval.curve.config import load_curve_config
from eval.curve.curve import run_curve
from eval.curve.curve_report import CURVE_MD, headline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="curve YAML, e.g. configs/eval/curve.yaml")
    parser.add_argument("--out", required=True, help="run folder; rerunning resumes it (finished points are reused)")
    parser.add_argument(
        "--points", type=_points, default=None, help="comma-separated N, e.g. 20,160: these instead of the config's"
    )


def _points(text: str) -> list[int]:
    try:
        points = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--points: '{text}' is not a comma-separated list of integers") from None
    if not points or min(points) < 1:
        raise argparse.ArgumentTypeError(f"--points: '{text}' needs at least one N of 1 or more")
    return points


USER_ERRORS = (CompareError, ValueError)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    points = getattr(args, "points", None)
    config = load_curve_config(args.config, **({"points": points} if points else {}))  # validated as one
    curve = run_curve(config, Path(args.out), args.config)
    print("\n".join(headline(curve)))
    print(f"report: {Path(args.out) / CURVE_MD}")
    return 0
