"""The quality checks' false-positive rates on human text: the real ED dev file's gold replies and turns.

    python benchmarks/quality_fp.py --out quality_fp.json [--thresholds my_thresholds.yaml]

Every check runs on text people wrote (distill.quality.calibration says which text each check reads), so
every flag is a false positive. docs/quality.md quotes the table this prints; tests/test_quality.py holds
each rate to 1% or less. Runs in a few seconds on CPU and loads no model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from data_prep.loaders import load_dialogues
from distill.quality.calibration import human_false_positives
from distill.quality.thresholds import QualityThresholds

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ed_ekman_dev.csv"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="TRACE-format ED CSV (or any ED source)")
    p.add_argument("--thresholds", type=Path, default=None, help="YAML of QualityThresholds fields to change")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"error: {args.data} does not exist (pass --data)", file=sys.stderr)
        return 2
    dialogues = next(iter(load_dialogues(args.data).splits.values()))
    thresholds = QualityThresholds.from_file(args.thresholds)
    rates = human_false_positives(dialogues, thresholds)
    print(f"{len(dialogues)} dialogues from {args.data}")
    print(f"{'check':<20} {'flagged':>13} {'rate':>7}  on")
    for check, r in rates.items():
        print(f"{check:<20} {r['flagged']:>6}/{r['texts']:<6} {r['rate']:>7.2%}  {r['on']}")
    if args.out:
        record = {"data": str(args.data), "dialogues": len(dialogues), "thresholds": thresholds.model_dump()}
        args.out.write_text(json.dumps({**record, "rates": rates}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
