"""`data_prep dialogues`: normalise an EmpatheticDialogues source into train/validation/test.

Bad input is a `DataError` (one line naming the file, row and column, exit 2); ``--skip-invalid``
instead leaves those rows out and lists each of them in ``<out>/skipped.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from data_prep.ed_formats import FORMATS, DataError, SizeLimits

SKIPPED_FILE = "skipped.jsonl"


def _ratios(text: str) -> tuple[float, float, float]:
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 3 or any(p < 0 for p in parts) or sum(parts) <= 0:
        raise argparse.ArgumentTypeError("give three non-negative numbers with a positive sum, e.g. 0.8,0.1,0.1")
    return parts[0], parts[1], parts[2]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source",
        required=True,
        help="ED release CSV or directory (train/valid/test.csv), TRACE CSV, `datasets` directory, or hub id",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="ed = original release columns, trace = TRACE-prepared CSV; auto reads the header",
    )
    p.add_argument("--out", required=True, help="directory for the DatasetDict (train/validation/test)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split when the source has none")
    p.add_argument(
        "--split-ratios",
        type=_ratios,
        default=(0.8, 0.1, 0.1),
        metavar="TRAIN,VAL,TEST",
        help="split proportions when the source has no splits (default 0.8,0.1,0.1)",
    )
    p.add_argument(
        "--max-chars",
        type=int,
        default=SizeLimits.max_chars,
        help="longest dialogue accepted, in characters of its turns (longer ones are refused, or skipped)",
    )
    p.add_argument("--max-turns", type=int, default=SizeLimits.max_turns, help="most turns a dialogue may have")
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help=f"skip bad rows/conversations and list them in <out>/{SKIPPED_FILE} instead of failing",
    )


def _write_skip_report(out: Path, skipped: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / SKIPPED_FILE, "w", encoding="utf-8") as handle:
        for record in skipped:
            handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
    print(f"skipped {len(skipped)} invalid rows/conversations: see {out / SKIPPED_FILE}", file=sys.stderr)


def _print_skip_report(out: Path, skipped: list, shown: int = 20) -> None:
    """A failed run leaves an existing --out as it was: its skip report goes to stderr instead."""
    for record in skipped[:shown]:
        where = record.file + (f" row {record.row}" if record.row is not None else "")
        print(f"skipped: {where}: {record.reason}", file=sys.stderr)
    more = f" ({len(skipped) - shown} more not shown)" if len(skipped) > shown else ""
    print(f"skipped {len(skipped)} invalid rows/conversations{more}; {out} was left as it was", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from data_prep.loaders import load_dialogues, save_dialogues, split_dialogues

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise DataError(str(out), None, None, "--out exists and is not a directory")
    if args.max_chars < 1 or args.max_turns < 1:
        raise DataError(str(args.source), None, None, "--max-chars and --max-turns must be >= 1")
    limits = SizeLimits(max_chars=args.max_chars, max_turns=args.max_turns)
    loaded = load_dialogues(args.source, fmt=args.format, skip_invalid=args.skip_invalid, limits=limits)
    if loaded.has_splits:
        splits = loaded.splits
    else:
        splits = split_dialogues(loaded.splits["all"], seed=args.seed, ratios=args.split_ratios)
    if not any(splits.values()):
        if loaded.skipped and out.exists() and any(out.iterdir()):
            _print_skip_report(out, loaded.skipped)
        elif loaded.skipped:  # every row was bad: the report says why, and nothing else is written
            _write_skip_report(out, loaded.skipped)
        raise DataError(str(args.source), None, None, "no valid dialogues to write")
    save_dialogues(splits, out)
    (out / SKIPPED_FILE).unlink(missing_ok=True)  # never leave an earlier run's report beside new output
    if loaded.skipped:
        _write_skip_report(out, loaded.skipped)
    for name, dialogues in splits.items():
        counts = Counter(d.emotion for d in dialogues)
        convs = len({d.conv_id for d in dialogues})
        print(
            f"{name:<10} {len(dialogues):>6} dialogues from {convs:>6} conversations  "
            + " ".join(f"{e}={n}" for e, n in sorted(counts.items()))
        )
    print(f"wrote {out}")
    return 0
