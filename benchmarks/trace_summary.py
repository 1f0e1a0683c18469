"""What a trace run shows about its server: per role, calls, first-attempt validity, invalid-output
retries, transport retries, errors, tokens and latency; plus the run's traces ok / failed and its
recorded cost. Reads traces.jsonl and run.json as plain JSON, so it works on any run folder.

    python benchmarks/trace_summary.py runs/llamacpp/traces > runs/llamacpp/summary.json
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def role_figures(traces: list[dict]) -> dict[str, dict]:
    figures: dict[str, Counter] = defaultdict(Counter)
    errors: dict[str, Counter] = defaultdict(Counter)
    for trace in traces:
        for step in trace["steps"]:
            row = figures[step["role"]]
            row["calls"] += 1
            row["valid"] += step["parsed"] is not None
            row["valid_first_attempt"] += step["parsed"] is not None and step["attempts"] == 1
            row["invalid_retries"] += step["attempts"] - 1
            row["transport_retries"] += step["transport_retries"]
            row["prompt_tokens"] += step["prompt_tokens"]
            row["completion_tokens"] += step["completion_tokens"]
            row["latency_ms"] += round(1000 * step["latency_s"])
            if step.get("error"):
                errors[step["role"]][step["error"][:80]] += 1
    return {role: {**row, "errors": dict(errors[role])} for role, row in figures.items()}


def main() -> None:
    run = Path(sys.argv[1])
    traces = [json.loads(line) for line in (run / "traces.jsonl").read_text(encoding="utf-8").splitlines() if line]
    info_path = run / "run.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    summary = {
        "traces": len(traces),
        "ok": sum(t.get("failure") is None for t in traces),
        "failures": dict(Counter((t.get("failure") or "")[:80] for t in traces if t.get("failure"))),
        "roles": role_figures(traces),
        "run_json_keys": sorted(info),
    }
    json.dump(summary, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
