"""The decoding passes of `benchmarks/label_decoding.py`: its imports and pipeline runs, and the three decodings
(greedy from a pass of its own; rank and rank-calibrated from one ranked pass), each with its measured seconds."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Optional

DECODINGS = ("greedy", "rank", "rank-calibrated")


class BenchError(ValueError):
    """A missing input, said in one line."""


# --- runs ---------------------------------------------------------------------------------------------


def imported(data: Path, mapping: Path, split: str, out: Path) -> list:
    """`distill import` in process (a rerun reuses its run), its traces; its summary line goes to stderr."""
    from distill.__main__ import main as distill
    from distill.pipeline.store import TraceStore

    argv = ["import", "--data", str(data), "--mapping", str(mapping), "--split", split, "--out", str(out)]
    with contextlib.redirect_stdout(sys.stderr):
        if distill(argv):
            raise BenchError(f"distill import of {data} with {mapping.name} failed (its error is above)")
    return TraceStore(out).read()[0]


def decode(backend: Any, config: Any, dialogues: list, chunk: int, what: str, keep: Optional[Path] = None):
    """The pipeline over `dialogues`, a chunk at a time under one progress bar; its traces and wall seconds.
    `keep`: a trace run folder to write them to (replaced), for reading the answers behind the figures."""
    from tqdm.auto import tqdm

    from distill.pipeline.pipeline import Pipeline

    pipeline = Pipeline(config, backend)
    traces, start = [], time.perf_counter()
    with tqdm(total=len(dialogues), desc=what, unit="dialogue", file=sys.stderr) as bar:
        for at in range(0, len(dialogues), chunk):
            traces += pipeline.run(dialogues[at : at + chunk], progress=False)
            bar.update(len(dialogues[at : at + chunk]))
    seconds = time.perf_counter() - start
    if keep is not None:
        store = emptied_store(keep)
        for trace in traces:
            store.append(trace)
    return traces, seconds


def emptied_store(folder: Path) -> Any:
    from distill.pipeline.store import TraceStore

    store = TraceStore(folder)  # it reads nothing until asked, so emptying its file after opening it is safe
    store.path.unlink(missing_ok=True)
    return store


def label_answer(trace: Any, role: str, field: str) -> Optional[str]:
    return (trace.outputs.get(role) or {}).get(field)


def timing(seconds: float, n: int) -> dict:
    return {"seconds": round(seconds, 2), "seconds_per_dialogue": round(seconds / max(1, n), 4)}


def pass_labels(traces: list, role: str, field: str) -> tuple[dict[str, list], list[list[dict]]]:
    """Each decoding's labels derived from one ranked pass's traces, and each trace's scores lines (the role's
    step's, every attempt's). A trace whose answer failed has no label in any decoding."""
    from distill.backends.label_rank import decodings_from_scores, parse_scores_events

    lines = [[x for s in t.steps if s.role == role for x in parse_scores_events(s.events)] for t in traces]
    derived = [
        decodings_from_scores(ls[-1]) if ls and label_answer(t, role, field) else {} for t, ls in zip(traces, lines)
    ]
    labels = {mode: [d.get(mode) for d in derived] for mode in DECODINGS}
    stored = [label_answer(t, role, field) for t in traces]
    if labels["rank-calibrated"] != stored:  # the pass's own answers: the derivation must reproduce them
        raise BenchError(f"{role}.{field}: labels derived from the scores lines differ from the pass's answers")
    return labels, lines


def pass_timings(seconds: float, lines: list[list[dict]], greedy: dict) -> dict[str, dict]:
    """Each decoding's seconds, each read off a stopwatch: greedy's from its own pass (`greedy`), rank-calibrated's
    the ranked pass's wall clock, rank's that less its content-free scoring, which the ranker times per scores line
    (as it times the raw ranking: `ranking_seconds_per_dialogue`)."""
    flat = [x["seconds"] for ls in lines for x in ls]
    rank, free = sum(x["rank"] for x in flat), sum(x["content_free"] for x in flat)
    n = max(1, len(lines))
    return {
        "greedy": greedy,
        "rank": {**timing(seconds - free, n), "ranking_seconds_per_dialogue": round(rank / n, 4)},
        "rank-calibrated": {**timing(seconds, n), "ranking_seconds_per_dialogue": round((rank + free) / n, 4)},
    }


def run_decodings(backend: Any, settings: dict, dialogues: list, slot: tuple[str, str], score, args, tag: str):
    """`slot` (role, label field) decoded greedily in a pass of its own, then once ranked with calibration over
    the same `dialogues`: the first pass is the greedy decoding, the second's raw and calibrated rankings (each
    answer's scores line) the other two. Each decoding's figures (`score` of its labels), failures, seconds and its
    labels changed from greedy; greedy's says how many of the ranked pass's drafted labels differ from its own."""
    from distill.pipeline.config import PipelineConfig

    role, field = slot
    greedy, greedy_timing = greedy_pass(backend, settings, dialogues, slot, args, tag)
    config = PipelineConfig(**settings, label_decoding={role: "rank-calibrated"})
    keep = args.work / "decodings" / f"{tag}-pass"
    out, seconds = decode(backend, config, dialogues, args.chunk, f"{tag} greedy draft+rank+calibrated", keep)
    labels, lines = pass_labels(out, role, field)
    if any(x["drafted"] for ls in lines for x in ls):  # else the label is the whole answer: nothing was drafted
        greedy_timing["drafted_label_differs"] = sum(a != b for a, b in zip(labels["greedy"], greedy))
    labels["greedy"] = greedy
    timings = pass_timings(seconds, lines, greedy_timing)
    failed = sum(t.status == "failed" for t in out)
    figures = {}
    for mode in DECODINGS:
        changed = sum(a != b for a, b in zip(labels[mode], labels["greedy"]))
        figures[mode] = {
            **score(labels[mode]),
            "failed": failed,
            **timings[mode],
            **({"versus_greedy": {"label_changed": changed}} if mode != "greedy" else {}),
        }
    return figures


def greedy_pass(backend: Any, settings: dict, dialogues: list, slot: tuple[str, str], args, tag: str):
    """The greedy decoding, a pass of its own: its labels and its wall clock (the ranked pass's draft decodes the
    same answers, but its seconds cannot be told apart from the ranking's by a stopwatch)."""
    from distill.pipeline.config import PipelineConfig

    role, field = slot
    keep = args.work / "decodings" / f"{tag}-greedy"
    out, seconds = decode(backend, PipelineConfig(**settings), dialogues, args.chunk, f"{tag} greedy", keep)
    return [label_answer(t, role, field) for t in out], {**timing(seconds, len(out)), "own_pass": True}


DERIVATION = (
    "two passes per split: greedy (no label_decoding) and label_decoding rank-calibrated; rank is the best raw label "
    "score after the ranked pass's greedy draft of the reason, rank-calibrated the best raw minus content-free score, "
    "both read from the answer's 'label scores:' event (distill.backends.label_rank.scores_event). Seconds, each "
    "from a stopwatch: greedy is its own pass's wall clock (drafted_label_differs: the ranked pass's drafted labels "
    "that differ from it), rank-calibrated the ranked pass's, rank that less its content-free scoring (timed per "
    "answer, once per adapter); ranking_seconds_per_dialogue is the ranking the ranker timed per answer"
)
