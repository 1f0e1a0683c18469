"""Throughput of the stage-batched pipeline against a naive per-dialogue loop, in one process.

Both runs use the same local model, the same `PipelineConfig` and the same dialogues. The naive
loop runs each dialogue's stages one request at a time (one `Pipeline.run([dialogue])` per
dialogue); the batched run gives the pipeline all dialogues at once, so each stage is one
`backend.generate` over the batch. Writes a JSON report:

    python benchmarks/pipeline_throughput.py --n 64 --out benchmarks/pipeline_throughput.json

`--prompt-style student --adapters <dir>` times the distilled student (compact prompts, one LoRA per
stage, merged into the base for its stage); `--device cuda` runs on a GPU; `--random-init` uses random
weights from `--model`'s config (speed only: for a machine that cannot carry the real weights).

`--naive-limit M` times the naive loop on the first M dialogues only (its per-dialogue cost is
flat, so dialogues/s extrapolates); the report says how many dialogues each side ran.
`--compare-batch-sizes 16,32` also times the batched run at those batch sizes, against the same naive
loop (which sends one request at a time whatever the batch size). `--compare-lockstep` also times
the batched run with the local backend's continuous batching off (left-padded `model.generate`
chunks that run until their longest answer ends), against the same naive loop.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from data_prep.loaders import load_sample  # noqa: E402
from distill.backends.local import LocalBackend  # noqa: E402
from distill.pipeline.config import PipelineConfig  # noqa: E402
from distill.pipeline.pipeline import Pipeline  # noqa: E402


def sample_dialogues(n: int):
    """The first n dialogues of the shipped sample, repeated (with fresh ids) if it is shorter."""
    pool = load_sample()
    out = []
    for i in range(n):
        d = pool[i % len(pool)]
        out.append(d if i < len(pool) else d.model_copy(update={"id": f"{d.id}~{i}"}))
    return out


def timed_run(pipeline: Pipeline, batches) -> tuple[float, list]:
    started = time.perf_counter()
    traces = [t for batch in batches for t in pipeline.run(batch, progress=False)]
    return time.perf_counter() - started, traces


def summarise(label: str, seconds: float, traces) -> dict:
    ok = sum(t.status == "ok" for t in traces)
    tokens = sum(s.completion_tokens for t in traces for s in t.steps)
    print(f"{label}: {len(traces)} dialogues in {seconds:.1f}s = {len(traces) / seconds:.3f} dialogues/s ({ok} ok)")
    return {
        "dialogues": len(traces),
        "seconds": round(seconds, 2),
        "dialogues_per_s": len(traces) / seconds,
        "ok": ok,
        "completion_tokens": tokens,
        "requests": sum(len(t.steps) for t in traces),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64, help="dialogues in the batched run")
    parser.add_argument("--naive-limit", type=int, default=None, help="dialogues in the naive loop (default: all n)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--compare-batch-sizes", default="", help="comma-separated batch sizes also timed (batched run only)"
    )
    parser.add_argument(
        "--compare-lockstep",
        action="store_true",
        help="also time the batched run with lockstep model.generate chunks instead of continuous batching",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--prompt-style", choices=("teacher", "student"), default="teacher")
    parser.add_argument(
        "--adapters", default=None, help="role adapters (<dir>/<role>/), used with --prompt-style student"
    )
    parser.add_argument("--random-init", action="store_true", help="random weights from --model's config (speed only)")
    parser.add_argument("--out", default="benchmarks/pipeline_throughput.json")
    args = parser.parse_args()

    dialogues = sample_dialogues(args.n)
    model = args.model
    if args.random_init:
        import tempfile

        from benchmarks.gpu_train import random_base
        from data_prep.models import resolve_model

        model = random_base(resolve_model(args.model), Path(tempfile.mkdtemp()) / "random-base")
    backend = LocalBackend(
        model, adapters=args.adapters, dtype=args.dtype, batch_size=args.batch_size, device=args.device
    )
    # Core TRACE pipeline, no retrieval (it would time the embedder, not generation), one attempt.
    config = PipelineConfig(
        rag=False, max_attempts=1, prompt_style=args.prompt_style, use_adapters=args.adapters is not None
    )
    pipeline = Pipeline(config, backend)
    pipeline.run(dialogues[:1], progress=False)  # warm-up: grammars compiled, kernels loaded

    switch_before = backend.switch_seconds
    batched_s, batched = timed_run(pipeline, [dialogues])
    switch_s = backend.switch_seconds - switch_before
    naive_dialogues = dialogues[: args.naive_limit or args.n]
    switch_before = backend.switch_seconds
    naive_s, naive = timed_run(pipeline, [[d] for d in naive_dialogues])
    naive_switch_s = backend.switch_seconds - switch_before
    others = {}
    for size in [int(x) for x in args.compare_batch_sizes.split(",") if x.strip()]:
        backend.batch_size = size
        seconds, traces = timed_run(pipeline, [dialogues])
        others[size] = summarise(f"batched, batch size {size}", seconds, traces)
    backend.batch_size = args.batch_size
    lockstep = None
    if args.compare_lockstep and backend.continuous:
        backend.continuous = False
        seconds, traces = timed_run(pipeline, [dialogues])
        lockstep = summarise(f"batched, lockstep chunks of {args.batch_size}", seconds, traces)
        backend.continuous = True

    report = {
        "config": config.model_dump(),
        "stages": config.stages(),
        "backend": backend.describe(),
        "torch_threads": __import__("torch").get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "random_init": args.random_init,
        "batched": summarise("batched", batched_s, batched),
        "naive": summarise("naive", naive_s, naive),
    }
    report["speedup"] = report["batched"]["dialogues_per_s"] / report["naive"]["dialogues_per_s"]
    report["naive"]["adapter_switch_seconds"] = round(naive_switch_s, 3)
    # Merged weights built once when the adapters load (the local backend's cache), not per stage.
    report["adapter_prepare_seconds"] = round(getattr(backend, "prepare_seconds", 0.0), 3)
    for label, run in [*((f"batch size {size}", run) for size, run in others.items()), ("lockstep", lockstep)]:
        if run is not None:
            run["speedup"] = run["dialogues_per_s"] / report["naive"]["dialogues_per_s"]
            print(f"{label}: speedup {run['speedup']:.2f}x")
    report["other_batch_sizes"] = others
    if lockstep is not None:
        report["lockstep"] = lockstep
    # Adapter switching (set_adapter + merge + unmerge + restoring the base) in the batched run.
    report["batched"]["adapter_switch_seconds"] = round(switch_s, 3)
    report["batched"]["adapter_switch_share"] = switch_s / batched_s
    print(f"speedup: {report['speedup']:.2f}x; adapter switching {100 * switch_s / batched_s:.2f}% of batched time")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
