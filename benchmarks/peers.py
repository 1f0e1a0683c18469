"""The project's local engine against the engines a CPU user knows, on the same prompts (issue 52).

The prompts are one role's steps of a stored trace run (what `python -m distill generate` writes). Every engine
answers all of them greedily with the same answer cap, each run in a worker process of its own (so its peak RSS is
its own and no engine warms another's caches), A B A B: every engine runs `--repeats` times, the order reversed
each round. A worker loads its engine, answers one short warm-up request, then times the whole batch.

- `project`: `distill.backends.local.LocalBackend.generate`, the pipeline's own path (continuous decoder; with
  `--constrained` the role's JSON schema through `GenerationRequest.schema`, as the pipeline sends it).
- `generate`: transformers' `model.generate` over left-padded chunks of `--batch` sorted by prompt length.
- `generate_batch`: transformers' continuous batching (`generate_batch`, sdpa attention, `--batch` rows).
- `llamacpp-<type>` (f32, f16, q8_0, q4_1): llama.cpp's `llama-server` with `--batch` parallel slots on a GGUF of
  the same weights, driven through the project's OpenAI backend at concurrency `--batch` (with `--constrained`
  the schema as `response_format`). Build the server with `benchmarks/build_llama_server.sh`; the GGUFs are made
  once with its `llama-quantize` from the GGUF the embedded model ships as (or `--gguf-source`). f32 is the
  project's fp32 weights exactly (with an f32 KV cache), so it is the equal-precision row; f16 and q8_0 are what
  llama.cpp users run.

The transformers engines encode prompts, stop and cut answers with LocalBackend's own code on a stock model, so
their outputs can be identical to the project's; they have no grammar, so `--constrained` skips them. Each run
records wall, prompt and completion tokens and their rates over the wall, peak RSS (for llama.cpp the server's),
how many outputs equal the reference run's (the first `project` run; surrounding whitespace ignored) and the share
that validates against the role's schema. The summary gives each engine's medians and their ratios to the
project's, per round too. The issue's setting (32 `ers` prompts of the quickstart's teacher run, fp32, 2 threads):

    python benchmarks/peers.py --traces runs/quickstart/teacher-train --role ers --limit 32 --dtype fp32 \
        --threads 2 --llama-server /work/llamacpp/bin/llama-server --gguf-dir runs/bench/gguf \
        --engines project,generate,generate_batch,llamacpp-f32,llamacpp-f16,llamacpp-q8_0 --out runs/bench/peers.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from machine import cpu_flags, cpu_model  # the script directory is on sys.path
from peer_engines import GGUF_TYPES, LLAMACPP, TRANSFORMERS, prepare_llamacpp, prompt_lengths, run_engine

ENGINES = ("project", *TRANSFORMERS, *(f"{LLAMACPP}{t}" for t in GGUF_TYPES))
# What a reader of the JSON needs before comparing rows; the report carries them.
NOTES = [
    "identical: the same text as the reference run's, surrounding whitespace ignored",
    "rates: token counts over the timed batch's wall (load and one warm-up request excluded); llama.cpp's completion "
    "count less the stop token it counts and the others do not (its own count: completion_tokens_reported)",
    "constrained: llama.cpp's JSON grammar allows whitespace between tokens and llguidance's (the project's) does not, "
    "so constrained answers can differ at equal precision",
    "llamacpp-f32: the project's weights (the embedded GGUF dequantized, as data_prep.models does), f32 KV cache",
    "llamacpp-f16: weights rounded to f16, activations rounded to f16 in those matmuls, f16 KV cache (its default)",
    "llamacpp-q8_0: weights requantized to q8_0, activations to q8_0 in those matmuls, f16 KV cache",
    "peak RSS: the worker process's VmHWM, model load included; for llama.cpp the server's",
]
REPO = Path(__file__).resolve().parents[1]


def engine_list(text: str) -> list[str]:
    """`--engines`: a comma-separated subset of ENGINES, in the order given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown engine {unknown[0] if unknown else '(none)'!r} (known: {', '.join(ENGINES)})"
        )
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", required=True, help="a stored trace run folder (python -m distill generate --out)")
    p.add_argument("--role", default="ers", help="whose steps' messages are the prompts")
    p.add_argument("--limit", type=int, default=32, help="prompts: the role's steps of the first N traces")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--batch", type=int, default=16, help="rows: decoder slots, generate chunk, server slots (-np)")
    p.add_argument(
        "--engines", type=engine_list, default=engine_list("project,generate,generate_batch,llamacpp-f16,llamacpp-q8_0")
    )
    p.add_argument("--repeats", type=int, default=2, help="runs per engine, the engines' order reversed each round")
    p.add_argument("--constrained", action="store_true", help="the role's JSON schema (transformers engines: n/a)")
    p.add_argument("--dtype", default="fp32", help="project and transformers engines: fp32 (the issue's), bf16, auto")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads; llama-server -t and -tb")
    p.add_argument("--model", default="smollm2-135m", help="alias, local folder or hub id (data_prep.models)")
    p.add_argument("--llama-server", default="/work/llamacpp/bin/llama-server", help="the llama-server binary")
    p.add_argument("--llama-quantize", default=None, help="default: llama-quantize beside --llama-server")
    p.add_argument("--gguf-dir", default="runs/bench/gguf", help="where the GGUFs per type are made, once")
    p.add_argument("--gguf-source", default=None, help="the GGUF to requantize (default: the embedded model's)")
    p.add_argument("--llama-response-format", default="json_schema", choices=("json_schema", "json_object_schema"))
    p.add_argument("--run-timeout", type=int, default=3600, help="seconds one run may take")
    p.add_argument("--out", default="runs/bench/peers.json")
    return p


# --- prompts ---------------------------------------------------------------------------------------------


def load_prompts(traces: str, role: str, limit: int) -> tuple[list[list[dict[str, str]]], dict[str, Any]]:
    """The messages of `role`'s first step in each of the first `limit` traces that have one (the store's reader)."""
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.store import TraceStore
    from distill.roles.roles import ROLES

    if role not in ROLES:
        raise SystemExit(f"--role: unknown role {role!r} (known: {', '.join(ROLES)})")
    store = TraceStore(traces)
    info = store.run_info()
    found, problems = store.read()
    if info is None or not found:
        raise SystemExit(f"{store.path}: no trace run here (run.json and traces.jsonl are written by distill generate)")
    for line in problems:
        print(f"warning: {line}", file=sys.stderr)
    prompts = []
    for trace in found:
        step = next((s for s in trace.steps if s.role == role and s.messages), None)
        if step is not None:
            prompts.append(step.messages)
        if len(prompts) == limit:
            break
    if not prompts:
        raise SystemExit(f"{store.path}: no trace has a '{role}' step")
    known = {k: v for k, v in info.pipeline.items() if k in PipelineConfig.model_fields}  # retired keys dropped
    config = PipelineConfig(**known)
    meta = {"traces": str(traces), "role": role, "n": len(prompts), "prompt_style": config.prompt_style}
    meta.update(stages=config.stages(), model=info.model, backend=info.backend_name, skipped_problems=len(problems))
    return prompts, meta


def schedule(engines: list[str], repeats: int) -> list[tuple[int, str]]:
    """(round, engine) in run order: A B C, C B A, A B C, ..."""
    return [(r, e) for r in range(repeats) for e in (engines if r % 2 == 0 else engines[::-1])]


# --- scoring and summary (no model: tests/test_peers.py checks them on hand-made runs) -------------------


def count_identical(texts: list[str], reference: list[str]) -> int:
    return sum(a.strip() == b.strip() for a, b in zip(texts, reference, strict=True))


def count_valid(texts: list[str], role: str, style: str, stages: list[str]) -> int:
    """Answers the pipeline would accept: `parse_output` against the role's schema for the run's style and stages."""
    from distill.pipeline.reflection import OutputRejected, parse_output
    from distill.roles.roles import ROLES

    ok = 0
    for text in texts:
        try:
            parse_output(ROLES[role], text, stages, style)
            ok += 1
        except OutputRejected:
            pass
    return ok


def rates(run: dict[str, Any]) -> dict[str, Any]:
    """A run's tokens per second over its wall."""
    wall = run["wall_s"]
    return {"completion_tok_s": run["completion_tokens"] / wall, "prompt_tok_s": run["prompt_tokens"] / wall}


def reference_engine(runs: list[dict[str, Any]]) -> Optional[str]:
    """`project` when it ran, else the first engine that did."""
    ran = [r["engine"] for r in runs if "texts" in r]
    return "project" if "project" in ran else (ran[0] if ran else None)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each engine's medians, peak RSS and agreement; ratios to the reference engine's medians and round by round."""
    ref = reference_engine(runs)
    done = [r for r in runs if "texts" in r]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in done:
        by.setdefault(r["engine"], []).append(r)
    out: dict[str, Any] = {"reference": ref, "engines": {}}
    for engine, rs in by.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "completion_tok_s", "prompt_tok_s")}
        row = {"runs": len(rs), "precision": rs[0]["precision"], **{f"median_{k}": v for k, v in med.items()}}
        row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
        row["identical"] = f"{min(r['identical'] for r in rs)}/{rs[0]['n']}"
        row["valid_json"] = f"{min(r['valid'] for r in rs)}/{rs[0]['n']}"
        out["engines"][engine] = row
    if ref is not None:
        base = out["engines"][ref]
        for engine, row in out["engines"].items():
            row["completion_tok_s_ratio"] = row["median_completion_tok_s"] / base["median_completion_tok_s"]
            row["wall_ratio"] = row["median_wall_s"] / base["median_wall_s"]
            ref_rounds = {r["round"]: r for r in by[ref]}
            row["round_wall_ratios"] = [
                r["wall_s"] / ref_rounds[r["round"]]["wall_s"] for r in by[engine] if r["round"] in ref_rounds
            ]
    out["skipped"] = sorted({r["engine"]: r["skipped"] for r in runs if "skipped" in r}.items())
    out["failed"] = [f"{r['engine']} round {r['round']}: {r['error']}" for r in runs if "error" in r]
    return out


def score(runs: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Add each finished run's rates, identical count (against the reference's first run) and valid count."""
    ref = reference_engine(runs)
    reference = next((r["texts"] for r in runs if r["engine"] == ref and "texts" in r), None)
    for run in runs:
        if "texts" not in run:
            continue
        run.update(rates(run), n=len(run["texts"]), identical=count_identical(run["texts"], reference))
        run["valid"] = count_valid(run["texts"], meta["role"], meta["prompt_style"], meta["stages"])


# --- running ---------------------------------------------------------------------------------------------


def run_worker(spec: dict[str, Any], timeout: int) -> dict[str, Any]:
    """One engine run in a process of its own; its result, or {"error": one line}."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if spec.get("threads"):
        env.update(OMP_NUM_THREADS=str(spec["threads"]), MKL_NUM_THREADS=str(spec["threads"]))
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path), str(out_path)]
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
        if out_path.is_file():
            return json.loads(out_path.read_text(encoding="utf-8"))
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail}"}


def worker_main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    try:
        result = run_engine(spec)
        code = 0
    except Exception as exc:  # one line in the report; the other runs go on
        result, code = {"error": f"{type(exc).__name__}: {exc}"[:500]}, 1
    Path(out_path).write_text(json.dumps(result), encoding="utf-8")
    return code


def machine_info(threads: Optional[int]) -> dict[str, Any]:
    import torch
    import transformers

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        return worker_main(*argv[1:3])
    args = build_parser().parse_args(argv)
    from data_prep.models import resolve_model

    prompts, meta = load_prompts(args.traces, args.role, args.limit)
    model_path = resolve_model(args.model)
    lengths = prompt_lengths(model_path, prompts)
    meta.update(mean_prompt_tokens=statistics.mean(lengths), max_prompt_tokens=max(lengths))
    base = dict(model=args.model, model_path=model_path, messages=prompts, role=args.role, style=meta["prompt_style"])
    base.update(stages=meta["stages"], constrained=args.constrained, max_new_tokens=args.max_new_tokens)
    base.update(batch=args.batch, threads=args.threads, dtype=args.dtype)
    llama = [e for e in args.engines if e.startswith(LLAMACPP)]
    ggufs = prepare_llamacpp(args, llama, max(lengths)) if llama else {}
    runs: list[dict[str, Any]] = []
    for round_, engine in schedule(args.engines, args.repeats):
        if args.constrained and engine in TRANSFORMERS:
            if round_ == 0:
                runs.append({"engine": engine, "round": 0, "skipped": "no grammar: transformers takes no JSON schema"})
            continue
        spec = {**base, "engine": engine, **({"llama": ggufs[engine]} if engine in ggufs else {})}
        print(f"[peers] round {round_ + 1}/{args.repeats}: {engine} on {len(prompts)} prompts", flush=True)
        result = run_worker(spec, args.run_timeout)
        runs.append({"engine": engine, "round": round_, **result})
        if "error" in result:
            print(f"[peers] {engine} failed: {result['error']}", file=sys.stderr, flush=True)
    score(runs, meta)
    report = {
        "command": shlex.join(["python", "benchmarks/peers.py", *argv]),
        "settings": vars(args),
        "machine": machine_info(args.threads),
        "prompts": meta,
        "notes": NOTES,
        "llamacpp": ggufs,  # each engine's GGUF (how it was made, how long it took) and server settings
        "summary": summarise(runs),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print_summary(report["summary"])
    print(f"[peers] wrote {args.out}")
    return 0 if not report["summary"]["failed"] else 1


def print_summary(summary: dict[str, Any]) -> None:
    for engine, row in summary["engines"].items():
        print(
            f"{engine:>16} {row['precision']:>8}  wall {row['median_wall_s']:8.1f} s  "
            f"{row['median_completion_tok_s']:7.1f} completion tok/s (x{row.get('completion_tok_s_ratio', 1):.2f})  "
            f"peak RSS {row['peak_rss_mb']:6.0f} MB  identical {row['identical']}  valid {row['valid_json']}"
        )
    for engine, why in summary["skipped"]:
        print(f"{engine:>16} n/a: {why}")


if __name__ == "__main__":
    sys.exit(main())
