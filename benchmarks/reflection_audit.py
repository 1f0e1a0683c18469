"""Does a real model's reflection audit flag anything? The reflection figures on real ED dialogues.

    python benchmarks/reflection_audit.py --n 24 --out runs/bench/reflection_audit.json
    python benchmarks/reflection_audit.py --n 24 --reviewer-temperature 1.0 --out runs/bench/reflection_t1.json
    python benchmarks/reflection_audit.py --n 12 --reviewer-temperature 1.0 --dtype fp32 --out runs/bench/t1_fp32.json

Runs the teacher pipeline (TRACE's four roles plus MERG's forecast and plan, reflection on, no exemplars)
with the embedded model on the first `--n` dialogues of the shared ED file, the audit on its own backend
(`reflection_backend`) decoding at `--reviewer-temperature` (0: greedy, the registry's), and writes the
figures `eval compare` reports (`eval.compare.run_figures`) with the blamed stage of every audit. What a sampled
135M audit flags depends on the dtype it runs in and the CPU's kernels, so both are set or recorded here: an
AVX2-only CPU resolves `auto` to fp32 (`--dtype fp32` runs so anywhere). This was a test once; a test whose verdict
depends on what a sampled model says on one CPU class is a benchmark.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SHARED_ED = Path(__file__).resolve().parents[2] / "shared" / "data" / "ed_ekman_dev.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED_ED), help="an ED CSV as TRACE prepared it")
    parser.add_argument("--n", type=int, default=24, help="dialogues (the file's first n)")
    parser.add_argument("--model", default="smollm2-135m", help="the pipeline's and the reviewer's model")
    parser.add_argument("--reviewer-temperature", type=float, default=0.0)
    parser.add_argument("--max-refinements", type=int, default=1)
    parser.add_argument(
        "--dtype", default="auto", help="the model's dtype for pipeline and reviewer (auto, fp32, bf16)"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from machine import cpu_flags, cpu_model  # the script directory is on sys.path

    from data_prep.loaders import load_dialogues
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline
    from eval.compare.run_figures import reflection_figures

    dialogues = load_dialogues(args.data).splits["all"][: args.n]
    config = PipelineConfig(
        caef=True,
        plan=True,
        reflection=True,
        rag=False,
        max_refinements=args.max_refinements,
        reflection_backend={"type": "local", "model": args.model, "batch_size": 16, "dtype": args.dtype},
        temperatures={"gra": args.reviewer_temperature},
    )
    start = time.perf_counter()
    backend = LocalBackend(args.model, batch_size=16, dtype=args.dtype)
    traces = Pipeline(config, backend).run(dialogues, progress=False)
    figures = reflection_figures(traces)
    result = {
        "data": args.data,
        "n": len(traces),
        "failed": sum(t.status == "failed" for t in traces),
        "model": args.model,
        "reviewer_temperature": args.reviewer_temperature,
        "max_refinements": args.max_refinements,
        "dtype": str(backend.torch_dtype).removeprefix("torch."),
        "machine": {"cpu": cpu_model(), "flags": cpu_flags()},
        "wall_s": round(time.perf_counter() - start, 1),
        "reflection": figures,
        "final_iterations": [t.final_iteration for t in traces],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "final_iterations"}, indent=2))


if __name__ == "__main__":
    main()
