"""Calibrate the coherence guards: the human replies scored against their own dialogue and against the same
replies shuffled across dialogues.

    python benchmarks/coherence_calibration.py --out benchmarks/coherence_calibration.json
    python benchmarks/coherence_calibration.py --guard ppl --out benchmarks/coherence_calibration_ppl.json
    python benchmarks/coherence_calibration.py --guard ppl --traces <compare out>/systems/<system> [--human]

Relevance (`eval.metrics.relevance`) is the MiniLM cosine of a reply with the seeker's last turn; PPL given the
dialogue (`eval.metrics.perplexity.score_dialogue_ppl`) is the untuned reference LM's perplexity of the reply after
its dialogue. A guard must get worse when a reply stops answering the dialogue: here every human reply of the ED dev
file is scored against its own dialogue, then against another dialogue's (a fixed-seed shuffle in which no reply
keeps its dialogue), with the metric's own code. The JSON holds each figure with its bootstrap 95% CI, their paired
difference (the gap), what the target's allowance is as a share of that gap and, for PPL, the allowance the target's
`GAP_SHARE` of the gap gives; no text of the data.

With `--traces`, the replies are a trace run's (a compare's system folder) on its own dialogues, or with `--human`
those dialogues' human replies: how much a system's replies owe to their dialogue, beside the human replies' on the
same dialogues. For PPL, `shuffled_over_own` is that as a ratio with its CI, which a reply's plain predictability (the
decoding temperature) moves far less than the difference.
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
from data_prep.dialogues import Dialogue  # noqa: E402
from data_prep.loaders import load_dialogues  # noqa: E402
from data_prep.models import ModelNotAvailable, check_causal_lm  # noqa: E402
from distill.pipeline.store import TRACES_FILE, TraceStore  # noqa: E402
from eval.curve.target import GAP_SHARE, GUARDS  # noqa: E402
from eval.metrics.perplexity import DEFAULT_PPL_MODEL, corpus_figure, corpus_ppl, perplexity  # noqa: E402
from eval.metrics.relevance import DEFAULT_RELEVANCE_MODEL, relevance_items  # noqa: E402
from eval.metrics.stats import bootstrap_ci, mean_with_ci, paired_bootstrap  # noqa: E402

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
        "shuffled_over_own": _ratio(list(zip(own_kept, shuffled_kept))),
        "shuffled_at_or_below_own": below,  # dialogues where another's reply is as likely per token as its own
    }


def _ratio(pairs: list[tuple[tuple[float, int], tuple[float, int]]]) -> dict:
    """PPL after a shuffled dialogue over PPL after the reply's own, with its bootstrap 95% CI over dialogues: what
    a reply owes its dialogue, which a reply's plain predictability moves far less than the difference."""

    def ratio(drawn: list) -> float:
        return corpus_ppl([s for _, s in drawn]) / corpus_ppl([o for o, _ in drawn])

    low, high = bootstrap_ci(pairs, statistic=ratio)
    return {"value": ratio(pairs), "ci_low": low, "ci_high": high, "n": len(pairs)}


# per guard: its target key, the figures' gap, the default model, and the share of the gap the printout reads
CALIBRATED = {
    "relevance": ("relevance", "own_minus_shuffled", DEFAULT_RELEVANCE_MODEL),
    "ppl": ("dialogue_ppl", "shuffled_minus_own", DEFAULT_PPL_MODEL),
}


def _share(allowance: float, gap: float) -> float | None:
    """The allowance as a share of the gap; None for no gap (replies that score the same after any dialogue)."""
    return allowance / gap if gap else None


def _print(figures: dict, gap_key: str, allowance: float) -> None:
    for name in ("own", "shuffled"):
        s = figures[name]
        print(f"{name}: {s['value']:.4f} [{s['ci_low']:.4f}, {s['ci_high']:.4f}] (n {s['n']})")
    gap = figures[gap_key]
    low, high = gap["ci_low"], gap["ci_high"]
    share = _share(allowance, gap["diff"])
    words = gap_key.replace("_minus_", " − ")
    of_it = f"the allowance {allowance} is {share:.1%} of it" if share is not None else "no gap to share"
    print(f"{words}: {gap['diff']:.4f} [{low:.4f}, {high:.4f}]; {of_it}")


def _human(data: Path) -> tuple[list[Dialogue], list[str]]:
    """An ED file's dialogues with a human reply, and those replies."""
    if not data.is_file():
        raise ValueError(f"{data} does not exist (pass --data)")
    dialogues = [d for d in next(iter(load_dialogues(data).splits.values())) if (d.gold_response or "").strip()]
    return dialogues, [d.gold_response for d in dialogues]


def _replies(run: Path, human: bool) -> tuple[list[Dialogue], list[str]]:
    """A trace run's dialogues with a non-empty reply (its own, or with `human` the dialogue's human one)."""
    if not (run / TRACES_FILE).is_file():
        raise ValueError(f"{run}: no {TRACES_FILE}; pass a trace run (a compare's systems/<system> folder)")
    traces, _ = TraceStore(run).read()
    pairs = [(t.dialogue, t.dialogue.gold_response if human else t.response) for t in traces]
    kept = [(d, r) for d, r in pairs if (r or "").strip()]
    return [d for d, _ in kept], [r for _, r in kept]


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
    p.add_argument("--traces", type=Path, default=None, help="a trace run's replies and dialogues, not --data's")
    p.add_argument("--human", action="store_true", help="with --traces: its dialogues' human replies")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if args.human and not args.traces:
        print("error: --human scores a trace run's dialogues: pass --traces", file=sys.stderr)
        return 2
    try:
        dialogues, replies = _replies(args.traces, args.human) if args.traces else _human(args.data)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dialogues, replies = dialogues[: args.limit], replies[: args.limit]
    source = args.traces or args.data
    if len(dialogues) < 2:
        print(f"error: {source}: {len(dialogues)} dialogue(s) with a reply; a shuffle needs two", file=sys.stderr)
        return 2
    key, gap_key, default_model = CALIBRATED[args.guard]
    model = args.model or default_model
    try:
        if args.guard == "ppl":
            check_causal_lm(model)  # an encoder's LM head is random: another PPL every run
    except ModelNotAvailable as e:
        print(f"error: --model {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
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
        "data": str(source),
        **({"replies": "human" if args.human else "the trace run's"} if args.traces else {}),
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
        "allowance_as_share_of_gap": _share(allowance, figures[gap_key]["diff"]),
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
