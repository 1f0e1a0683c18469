"""Throughput of `distill serve`, and whether the pipeline keeps it as busy as a plain load test.

    python benchmarks/serve_throughput.py --model smollm2-135m --dialogues 16 --out runs/bench/serve_throughput.json

1. Load test: 1, 4 and 16 concurrent clients replay ASI requests (student prompts, JSON schema)
   against one server; requests/s and completion tokens/s per level.
2. Concurrency check: the pipeline over the `openai` backend with N dialogues in flight
   (max_concurrency = N), then a direct load test of the same server at the same concurrency
   replaying exactly the requests the pipeline sent (same prompts, schemas and lengths, greedy, so
   the same completions). The ratio of the two token rates should be >= 0.9: the pipeline's
   stage barriers and bookkeeping should cost little next to generation.

Writes one JSON file; the numbers quoted in reports come from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from fault_proxy import ServeProcess  # noqa: E402  (the same subprocess launcher the tests use)

from distill.roles.roles import ROLES, RoleInput  # noqa: E402


def _format(schema) -> dict:
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": False},
    }


async def load_test(url: str, model: str, bodies: list[dict], concurrency: int) -> dict:
    """Send `bodies` with `concurrency` clients pulling from one queue; rates over the wall time."""
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    tokens = 0
    async with httpx.AsyncClient(base_url=url, timeout=1800) as client:

        async def worker() -> None:
            nonlocal tokens
            while not queue.empty():
                body = queue.get_nowait()
                reply = await client.post("/v1/chat/completions", json={**body, "model": model})
                reply.raise_for_status()
                tokens += reply.json()["usage"]["completion_tokens"]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "requests": len(bodies),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(bodies) / wall, 3),
        "completion_tokens_per_s": round(tokens / wall, 2),
    }


def warm_up(url: str, model: str, dialogue) -> None:
    """One short request per core role, so no measurement pays for first-use grammar compilation."""
    for role in ("asi", "cae", "srp", "ers"):
        spec = ROLES[role]
        body = {
            "model": model,
            "messages": spec.render(RoleInput(dialogue=dialogue), "student"),
            "temperature": 0.0,
            "max_tokens": 2,
            "response_format": _format(spec.schema),
        }
        httpx.post(url + "/v1/chat/completions", json=body, timeout=1800).raise_for_status()


def asi_bodies(dialogues, n: int) -> list[dict]:
    spec = ROLES["asi"]
    return [
        {
            "messages": spec.render(RoleInput(dialogue=dialogues[i % len(dialogues)]), "student"),
            "temperature": 0.0,
            "max_tokens": spec.max_new_tokens,
            "response_format": _format(spec.schema),
        }
        for i in range(n)
    ]


def pipeline_run(url: str, model: str, dialogues, concurrency: int) -> tuple[dict, list[dict]]:
    """The pipeline over the openai backend; returns its rates and the request bodies it sent."""
    from distill.backends.openai_backend import OpenAIBackend
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline

    backend = OpenAIBackend(
        model=model, base_url=url + "/v1", max_concurrency=concurrency, timeout_s=1800, strict_schema=False
    )
    config = PipelineConfig(rag=False, prompt_style="student", max_attempts=1)
    started = time.perf_counter()
    traces = Pipeline(config, backend).run(dialogues, progress=False)
    wall = time.perf_counter() - started
    steps = [s for t in traces for s in t.steps]
    tokens = sum(s.completion_tokens for s in steps)
    bodies = [
        {
            "messages": s.messages,
            "temperature": ROLES[s.role].temperature,
            "max_tokens": ROLES[s.role].max_new_tokens,
            "seed": config.seed,
            "response_format": _format(ROLES[s.role].schema),
        }
        for s in steps
    ]
    return (
        {
            "concurrency": concurrency,
            "dialogues": len(dialogues),
            "requests": len(steps),
            "wall_s": round(wall, 2),
            "requests_per_s": round(len(steps) / wall, 3),
            "completion_tokens_per_s": round(tokens / wall, 2),
            "ok_traces": sum(t.status == "ok" for t in traces),
        },
        bodies,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dialogues", type=int, default=16, help="dialogues in flight for the concurrency check")
    parser.add_argument("--levels", default="1,4,16", help="client counts for the load test")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--out", default="runs/bench/serve_throughput.json")
    args = parser.parse_args()

    from data_prep.loaders import load_sample

    dialogues = load_sample()[: args.dialogues]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    server = ServeProcess(args.model, out.with_suffix(".serve.log"), "--max-batch", str(args.max_batch)).wait_ready()
    try:
        model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        warm_up(server.url, model, dialogues[0])
        levels = [int(x) for x in args.levels.split(",")]
        load = [
            asyncio.run(load_test(server.url, model, asi_bodies(dialogues, c * args.requests_per_client), c))
            for c in levels
        ]
        for row in load:
            print("load", row, flush=True)
        piped, bodies = pipeline_run(server.url, model, dialogues, args.dialogues)
        print("pipeline", piped, flush=True)
        direct = asyncio.run(load_test(server.url, model, bodies, args.dialogues))
        print("direct", direct, flush=True)
        metrics = server.metrics()
    finally:
        server.stop()
    ratio = piped["completion_tokens_per_s"] / direct["completion_tokens_per_s"]
    report = {
        "model": args.model,
        "max_batch": args.max_batch,
        "platform": platform.platform(),
        "load_test": load,
        "concurrency_check": {
            "pipeline": piped,
            "direct": direct,
            "pipeline_over_direct": round(ratio, 3),
            "target": 0.9,
        },
        "server": {k: metrics[k] for k in ("batches", "requests", "largest_batch", "busy_s")},
        "command": " ".join(sys.argv),
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"pipeline / direct = {ratio:.3f} (target >= 0.9); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
