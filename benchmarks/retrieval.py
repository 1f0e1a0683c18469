"""Benchmark the exemplar index on the real ED dev file: build time, query latency, where time goes.

    python benchmarks/retrieval.py --out retrieval_bench.json

Builds an index over ``ed_ekman_dev.csv`` (1,263 dialogues), then runs 1,000 queries with the
situations of the same file, the gold emotion as the query emotion and each dialogue's own
conversation excluded, as the pipeline does. Query time is split into embedding the situations and
scoring (the matrix product plus the precise/fuzzy selection), measured on the same batches.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from data_prep.loaders import read_csv  # noqa: E402
from data_prep.retrieval import ExemplarIndex, build_index, shared_embedder  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ed_ekman_dev.csv"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="TRACE-format ED CSV")
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--batch", type=int, default=100, help="situations per query call")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--tau", type=float, default=0.5)
    p.add_argument("--single", type=int, default=50, help="extra one-situation calls to time interactive latency")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0: torch's default). On a shared, oversubscribed CPU 1 thread is far "
        "faster, because waiting OpenMP threads spin while their partner is descheduled",
    )
    return p.parse_args(argv)


def timed_queries(index: ExemplarIndex, dialogues, batch: int, k: int, tau: float) -> tuple[list, float, float]:
    """Run the queries in batches; return the results and the embedding and scoring seconds."""
    embedder, results, embed_s, score_s = index.embedder(), [], 0.0, 0.0
    for start in range(0, len(dialogues), batch):
        part = dialogues[start : start + batch]
        t0 = time.perf_counter()
        vectors = embedder.encode([d.situation for d in part], progress=False)
        t1 = time.perf_counter()
        results += index.query_vectors(
            vectors,
            [d.emotion for d in part],
            [d.conv_id for d in part],
            k=k,
            tau=tau,
            exclude_dialogue_ids=[d.id for d in part],
        )
        score_s += time.perf_counter() - t1
        embed_s += t1 - t0
    return results, embed_s, score_s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    dialogues = read_csv(args.data)
    t0 = time.perf_counter()
    shared_embedder("minilm")
    load_s = time.perf_counter() - t0
    t0, cpu0 = time.perf_counter(), time.process_time()
    index = build_index(dialogues)
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0

    queries = dialogues[: args.queries]
    # The end-to-end call the pipeline makes, on the same batches, to check the split adds up.
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, len(queries), args.batch):
        part = queries[start : start + args.batch]
        index.query(
            [d.situation for d in part], [d.emotion for d in part], [d.conv_id for d in part], k=args.k, tau=args.tau
        )
    end_to_end_s, query_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    results, embed_s, score_s = timed_queries(index, queries, args.batch, args.k, args.tau)
    _, single_embed_s, single_score_s = timed_queries(index, queries[: args.single], 1, args.k, args.tau)

    leaks = sum(h.conv_id == d.conv_id for d, hits in zip(queries, results) for h in hits)
    searches = Counter(hits[0].search if hits else "none" for hits in results)
    report = {
        "data": str(args.data),
        "dialogues": len(dialogues),
        "indexed": len(index),
        "skipped": index.skipped,
        # CPU seconds barely depend on how many other jobs share the machine; wall seconds do.
        "embedder_load_s": round(load_s, 3),
        "build_s": round(build_s, 3),
        "build_cpu_s": round(build_cpu_s, 3),
        "queries": len(queries),
        "batch": args.batch,
        "k": args.k,
        "tau": args.tau,
        "query_total_s": round(end_to_end_s, 3),
        "query_total_cpu_s": round(query_cpu_s, 3),
        "query_ms_per_query": round(1000 * end_to_end_s / len(queries), 3),
        "split_total_s": round(embed_s + score_s, 3),
        "embed_s": round(embed_s, 3),
        "score_s": round(score_s, 3),
        "embed_share": round(embed_s / (embed_s + score_s), 4),
        "score_ms_per_query": round(1000 * score_s / len(queries), 4),
        "single_query_ms": round(1000 * (single_embed_s + single_score_s) / max(args.single, 1), 2),
        "first_hit_search": dict(searches),
        "mean_hits": round(float(np.mean([len(h) for h in results])), 3),
        "leaks": leaks,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            # Other jobs on a shared machine inflate every time above; this says how busy it was.
            "load_avg_1m_start": round(load_before, 2),
            "load_avg_1m_end": round(os.getloadavg()[0], 2),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0 if leaks == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
