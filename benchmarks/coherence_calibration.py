"""Calibrate the coherence guard: the human replies' relevance to their own dialogue against the same replies
shuffled across dialogues.

    python benchmarks/coherence_calibration.py --out benchmarks/coherence_calibration.json

Relevance (`eval.metrics.relevance`) is the MiniLM cosine of a reply with the seeker's last turn. A guard must fall
when a reply stops answering the dialogue: here every human reply of the ED dev file is scored against its own
dialogue, then against another dialogue's (a fixed-seed shuffle in which no reply keeps its dialogue), with the
metric's own code. The JSON holds each mean with its bootstrap 95% CI, their paired difference, and what the
target's allowance is as a share of that gap; no text of the data.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_flags, cpu_model  # noqa: E402
from data_prep.loaders import load_dialogues  # noqa: E402
from eval.curve.target import GUARDS  # noqa: E402
from eval.metrics.relevance import DEFAULT_RELEVANCE_MODEL, relevance_items  # noqa: E402
from eval.metrics.stats import mean_with_ci, paired_bootstrap  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ed_ekman_dev.csv"


def deranged(n: int, seed: int) -> list[int]:
    """A fixed-seed order of 0..n-1 in which no index keeps its place: a random cycle through all of them."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    moved = [0] * n
    for i, at in enumerate(order):
        moved[at] = order[(i + 1) % n]  # dialogue `at` gets the reply of the next one in the cycle
    return moved


def calibrate(replies: list[str], turns: list[str], model: str, seed: int) -> dict:
    """Relevance of the replies to their own seeker turns and to shuffled ones, and the paired difference."""
    n, moved = len(replies), deranged(len(replies), seed)
    # one call: the encoder embeds each distinct text once, so the shuffled pairs cost no second encoding
    items = relevance_items([*replies, *(replies[j] for j in moved)], [*turns, *turns], model)
    own, shuffled = items[:n], items[n:]
    keep = [i for i, (a, b) in enumerate(zip(own, shuffled)) if a is not None and b is not None]
    own_kept, shuffled_kept = [own[i] for i in keep], [shuffled[i] for i in keep]
    gap = paired_bootstrap(own_kept, shuffled_kept)
    below = sum(b >= a for a, b in zip(own_kept, shuffled_kept))
    return {
        "own": mean_with_ci(own_kept),
        "shuffled": mean_with_ci(shuffled_kept),
        "own_minus_shuffled": gap,
        "shuffled_at_or_above_own": below,  # dialogues where another's reply scores as high as its own
    }


def _print(figures: dict, allowance: float) -> None:
    for name in ("own", "shuffled"):
        s = figures[name]
        print(f"{name}: {s['value']:.4f} [{s['ci_low']:.4f}, {s['ci_high']:.4f}] (n {s['n']})")
    gap = figures["own_minus_shuffled"]
    low, high = gap["ci_low"], gap["ci_high"]
    share = allowance / gap["diff"]
    print(f"own − shuffled: {gap['diff']:.4f} [{low:.4f}, {high:.4f}]; the allowance {allowance} is {share:.1%} of it")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="TRACE-format ED CSV (or any ED source)")
    p.add_argument("--model", default=DEFAULT_RELEVANCE_MODEL, help="the relevance encoder")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    p.add_argument("--limit", type=int, default=None, help="the file's first N dialogues with a reply; default all")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"error: {args.data} does not exist (pass --data)", file=sys.stderr)
        return 2
    dialogues = [d for d in next(iter(load_dialogues(args.data).splits.values())) if (d.gold_response or "").strip()]
    dialogues = dialogues[: args.limit]
    start = time.perf_counter()
    replies, turns = [d.gold_response for d in dialogues], [d.last_seeker_turn() for d in dialogues]
    figures = calibrate(replies, turns, args.model, args.seed)
    seconds = time.perf_counter() - start
    allowance = next(g.allowance for g in GUARDS if g.key == "relevance")
    given = argv if argv is not None else sys.argv[1:]
    result = {
        "command": "python " + shlex.join(["benchmarks/coherence_calibration.py", *given]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "cpu_flags": cpu_flags()},
        "data": str(args.data),
        "dialogues": len(dialogues),
        "model": args.model,
        "seed": args.seed,
        "limit": args.limit,
        "seconds": round(seconds, 1),
        **figures,
        # the target's allowance as a share of this gap: the share of replies that, answering another dialogue
        # instead of their own, would cost as much relevance as the allowance
        "target_allowance": allowance,
        "allowance_as_share_of_gap": allowance / figures["own_minus_shuffled"]["diff"],
    }
    _print(figures, allowance)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
