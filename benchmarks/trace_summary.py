"""What a trace run shows about its server: per role, calls, first-attempt validity, invalid-output
retries, transport retries, errors, tokens and latency; plus the run's traces ok / failed. Reads the run
through the trace store, the one owner of traces.jsonl and run.json.

    python benchmarks/trace_summary.py runs/llamacpp/traces > runs/llamacpp/summary.json
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict

from distill.pipeline.store import TraceStore
from distill.pipeline.trace import Trace


def role_figures(traces: list[Trace]) -> dict[str, dict]:
    figures: dict[str, Counter] = defaultdict(Counter)
    errors: dict[str, Counter] = defaultdict(Counter)
    for trace in traces:
        for step in trace.steps:
            row = figures[step.role]
            row["calls"] += 1
            row["valid"] += step.valid
            row["valid_first_attempt"] += step.valid and step.attempts == 1
            row["invalid_retries"] += step.attempts - 1
            row["transport_retries"] += step.transport_retries
            row["prompt_tokens"] += step.prompt_tokens
            row["completion_tokens"] += step.completion_tokens
            row["latency_ms"] += round(1000 * step.latency_s)
            if step.error:
                errors[step.role][step.error[:80]] += 1
    return {role: {**row, "errors": dict(errors[role])} for role, row in figures.items()}


def main() -> None:
    store = TraceStore(sys.argv[1])
    traces, problems = store.read()
    info = store.run_info()
    summary = {
        "traces": len(traces),
        "ok": sum(t.status == "ok" for t in traces),
        "failures": dict(Counter(t.failure[:80] for t in traces if t.failure)),
        "roles": role_figures(traces),
        "unreadable_lines": problems,
        "run": {"backend": info.backend_name, "model": info.model, "split": info.split} if info else None,
    }
    json.dump(summary, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
