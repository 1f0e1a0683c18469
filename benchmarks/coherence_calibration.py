"""Calibrate the coherence guards: the human replies scored against their own dialogue and against the same
replies shuffled across dialogues.

    python benchmarks/coherence_calibration.py --out benchmarks/coherence_calibration.json
    python benchmarks/coherence_calibration.py --guard ppl --out benchmarks/coherence_calibration_ppl.json

Relevance (`eval.metrics.relevance`) is the MiniLM cosine of a reply with the seeker's last turn; PPL given the
dialogue (`eval.metrics.perplexity.score_dialogue_ppl`) is the untuned reference LM's perplexity of the reply after
its dialogue. A guard must get worse when a reply stops answering the dialogue: here every human reply of the ED dev
file is scored against its own dialogue, then against another dialogue's (a fixed-seed shuffle in which no reply
keeps its dialogue), with the metric's own code. The JSON holds each figure with its bootstrap 95% CI, their paired
difference (the gap), what the target's allowance is as a share of that gap and, for PPL, the allowance the target's
`GAP_SHARE` of the gap gives; no text of the data.
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
from eval.curve.target import GAP_SHARE, GUARDS  # noqa: E402
from eval.metrics.perplexity import DEFAULT_PPL_MODEL, corpus_figure, corpus_ppl, perplexity  # noqa: E402
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


def _corpus_ppl(items: list[tuple[float, int]]) -> dict:
    """Token-weighted PPL of (summed NLL, tokens) items with its bootstrap 95% CI, as `perplexity` gives it."""
    return {**corpus_figure(items), "n": len(items)}


def calibrate_ppl(replies: list[str], contexts: list[str], model: str, seed: int, batch_size: int = 8) -> dict:
    """PPL of the replies given their own dialogues and given shuffled ones, and the paired rise (shuffled − own,
    token-weighted on each resample of the dialogues, as the paired table compares PPL)."""
    n, moved = len(replies), deranged(len(replies), seed)
    # one call: the reference LM is loaded once for both
    scored = perplexity([*replies, *(replies[j] for j in moved)], model, "dialogue", [*contexts, *contexts],
                        batch_size=batch_size, keep_items=True)["items"]  # fmt: skip
    own, shuffled = scored[:n], scored[n:]
    keep = [i for i in range(n) if own[i][1] and shuffled[i][1]]  # a reply with no scored token says nothing
    own_kept, shuffled_kept = [own[i] for i in keep], [shuffled[i] for i in keep]
    rise = paired_bootstrap(shuffled_kept, own_kept, statistic=corpus_ppl)
    below = sum(s[0] / s[1] <= o[0] / o[1] for o, s in zip(own_kept, shuffled_kept))
    return {
        "own": _corpus_ppl(own_kept),
        "shuffled": _corpus_ppl(shuffled_kept),
        "shuffled_minus_own": rise,
        "shuffled_at_or_below_own": below,  # dialogues where another's reply is as likely per token as its own
    }


# per guard: its target key, the figures' gap, the default model, and the share of the gap the printout reads
CALIBRATED = {
    "relevance": ("relevance", "own_minus_shuffled", DEFAULT_RELEVANCE_MODEL),
    "ppl": ("dialogue_ppl", "shuffled_minus_own", DEFAULT_PPL_MODEL),
}


def _print(figures: dict, gap_key: str, allowance: float) -> None:
    for name in ("own", "shuffled"):
        s = figures[name]
        print(f"{name}: {s['value']:.4f} [{s['ci_low']:.4f}, {s['ci_high']:.4f}] (n {s['n']})")
    gap = figures[gap_key]
    low, high = gap["ci_low"], gap["ci_high"]
    share = allowance / gap["diff"]
    words = gap_key.replace("_minus_", " − ")
    print(f"{words}: {gap['diff']:.4f} [{low:.4f}, {high:.4f}]; the allowance {allowance} is {share:.1%} of it")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="TRACE-format ED CSV (or any ED source)")
    p.add_argument("--guard", choices=tuple(CALIBRATED), default="relevance", help="the coherence guard calibrated")
    p.add_argument(
        "--model", default=None, help=f"relevance's encoder ({DEFAULT_RELEVANCE_MODEL}) or PPL's reference LM "
        f"({DEFAULT_PPL_MODEL}): alias or local dir; default the guard's own",
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, default=8, help="PPL: replies scored per forward pass")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    p.add_argument("--limit", type=int, default=None, help="the file's first N dialogues with a reply; default all")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"error: {args.data} does not exist (pass --data)", file=sys.stderr)
        return 2
    dialogues = [d for d in next(iter(load_dialogues(args.data).splits.values())) if (d.gold_response or "").strip()]
    dialogues = dialogues[: args.limit]
    if len(dialogues) < 2:
        print(f"error: {args.data}: {len(dialogues)} dialogue(s) with a reply; a shuffle needs two", file=sys.stderr)
        return 2
    key, gap_key, default_model = CALIBRATED[args.guard]
    model = args.model or default_model
    start = time.perf_counter()
    replies = [d.gold_response for d in dialogues]
    if args.guard == "ppl":
        figures = calibrate_ppl(replies, [d.render_context() for d in dialogues], model, args.seed, args.batch_size)
    else:
        figures = calibrate(replies, [d.last_seeker_turn() for d in dialogues], model, args.seed)
    seconds = time.perf_counter() - start
    allowance = next(g.allowance for g in GUARDS if g.key == key)
    derived = {"gap_share": GAP_SHARE, "allowance_from_gap": GAP_SHARE * figures[gap_key]["diff"]}
    given = argv if argv is not None else sys.argv[1:]
    result = {
        "command": "python " + shlex.join(["benchmarks/coherence_calibration.py", *given]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "cpu_flags": cpu_flags()},
        "data": str(args.data),
        "dialogues": len(dialogues),
        **({"guard": args.guard} if args.guard != "relevance" else {}),
        "model": model,
        "seed": args.seed,
        "limit": args.limit,
        "seconds": round(seconds, 1),
        **figures,
        # the target's allowance as a share of this gap: the share of replies that, answering another dialogue
        # instead of their own, would cost as much as the allowance
        "target_allowance": allowance,
        "allowance_as_share_of_gap": allowance / figures[gap_key]["diff"],
        # PPL's allowance is derived here: the target's share of the gap (relevance's was set first, then measured)
        **(derived if args.guard == "ppl" else {}),
    }
    _print(figures, gap_key, allowance)
    if args.guard == "ppl":
        print(f"{GAP_SHARE} of the gap: an allowance of {derived['allowance_from_gap']:.4g}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
