"""`python -m eval compare --config configs/eval/<name>.yaml --out <dir>`: the command; `compare.py` does the work."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from distill.adapters.adapters import AdapterError
from eval.compare.compare import REPORT_JSON, build_report, load_config
from eval.compare.systems import CompareError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="compare YAML, e.g. configs/eval/sample.yaml")
    parser.add_argument("--out", required=True, help="directory for report.json, report.md and the plots")


# one line, exit 2 (data_prep.commands); an adapters folder is first read for the report's key, before any system
USER_ERRORS = (CompareError, AdapterError)


def run(args: argparse.Namespace) -> int:
    from eval.compare.report import write_report_files

    report = build_report(load_config(args.config), args.config, Path(args.out))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_JSON).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    written = write_report_files(out / REPORT_JSON, out)
    print(f"wrote {out / REPORT_JSON}, " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0
