"""`python -m data_prep <command>`: normalise EmpatheticDialogues and build the exemplar index.

    python -m data_prep dialogues --source <csv | dir | hub id> --out data/ed [--format auto] [--seed 0]
    python -m data_prep index --dialogues data/ed --split train --out data/ed-index [--embedder minilm]

Bad input prints one line naming the file, row and column and exits 2; ``--skip-invalid`` instead
leaves those rows out and lists each of them in ``<out>/skipped.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from data_prep.ed_formats import FORMATS, DataError, report_error
from data_prep.models import ModelNotAvailable

SKIPPED_FILE = "skipped.jsonl"


def _ratios(text: str) -> tuple[float, float, float]:
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 3 or any(p < 0 for p in parts) or sum(parts) <= 0:
        raise argparse.ArgumentTypeError("give three non-negative numbers with a positive sum, e.g. 0.8,0.1,0.1")
    return parts[0], parts[1], parts[2]


def _add_dialogues_args(p: argparse.ArgumentParser) -> None:
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
        "--skip-invalid",
        action="store_true",
        help=f"skip bad rows/conversations and list them in <out>/{SKIPPED_FILE} instead of failing",
    )


def _add_index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dialogues", required=True, help="directory written by `data_prep dialogues`")
    p.add_argument("--split", default="train", help="which split becomes the exemplar memory")
    p.add_argument("--out", required=True, help="directory for the saved index")
    p.add_argument("--embedder", default="minilm", help="embedding model alias, path or hub id")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_dialogues_args(sub.add_parser("dialogues", help="normalise an ED source into train/validation/test"))
    _add_index_args(sub.add_parser("index", help="embed one split's situations into an exemplar index"))
    return parser


def _write_skip_report(out: Path, skipped: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / SKIPPED_FILE, "w", encoding="utf-8") as handle:
        for record in skipped:
            handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
    print(f"skipped {len(skipped)} invalid rows/conversations: see {out / SKIPPED_FILE}", file=sys.stderr)


def run_dialogues(args: argparse.Namespace) -> int:
    from data_prep.loaders import load_dialogues, save_dialogues, split_dialogues

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise DataError(str(out), None, None, "--out exists and is not a directory")
    loaded = load_dialogues(args.source, fmt=args.format, skip_invalid=args.skip_invalid)
    if loaded.has_splits:
        splits = loaded.splits
    else:
        splits = split_dialogues(loaded.splits["all"], seed=args.seed, ratios=args.split_ratios)
    if not any(splits.values()):
        if loaded.skipped:  # every row was bad: the report says why, and nothing else is written
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


def run_index(args: argparse.Namespace) -> int:
    from data_prep.loaders import load_split
    from data_prep.retrieval import build_index

    dialogues = load_split(args.dialogues, args.split)
    if not dialogues:
        raise DataError(args.dialogues, None, None, f"split '{args.split}' is empty")
    try:
        index = build_index(dialogues, embedder=args.embedder)
    except ValueError as err:  # retrieval's own checks already read as one line naming the dialogue
        raise DataError(args.dialogues, None, None, str(err)) from None
    index.save(args.out)
    print(f"indexed {len(dialogues)} {args.split} dialogues into {args.out}")
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m data_prep") -> int:
    args = build_parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_dialogues(args) if args.command == "dialogues" else run_index(args)
    except DataError as err:
        return report_error(err)
    except ModelNotAvailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
