"""`data_prep index`: embed one split's situations into the exemplar index retrieval searches."""

from __future__ import annotations

import argparse

from data_prep.ed_formats import DataError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dialogues", required=True, help="directory written by `data_prep dialogues`")
    p.add_argument("--split", default="train", help="which split becomes the exemplar memory")
    p.add_argument("--out", required=True, help="directory for the saved index")
    p.add_argument("--embedder", default="minilm", help="embedding model alias, path or hub id")


def run(args: argparse.Namespace) -> int:
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
