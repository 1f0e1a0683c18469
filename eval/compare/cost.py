"""Cost and speed of a system, read off its traces: latency, throughput, tokens per role, dollars, memory; and what
an imported teacher's chains would have cost through an API (`imported_chain_cost`)."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Sequence
from typing import Optional

from distill.backends.pricing import estimate_cost
from distill.pipeline.trace import Trace
from eval.metrics.stats import mean_with_ci, percentile


def cost_and_speed(
    traces: Sequence[Trace], wall_s: Optional[float] = None, peak_rss_mb: Optional[float] = None, price_table=None
) -> dict:
    """Latency per dialogue (sum of its steps' latencies) p50/p95/mean, throughput, tokens per role, $ per 1k.

    Throughput is dialogues / wall-clock seconds of the run when the run was timed here, else
    dialogues / summed latency (an upper bound on time for a batched run read from disk). Cost uses
    `distill.backends.pricing.estimate_cost` on the traces' model id (self-hosted models cost 0).
    """
    n = len(traces)
    latencies = [sum(s.latency_s for s in t.steps) for t in traces]
    tokens: dict[str, dict[str, float]] = {}
    usd = 0.0
    for t in traces:
        for s in t.steps:
            slot = tokens.setdefault(s.role, {"prompt": 0.0, "completion": 0.0})
            slot["prompt"] += s.prompt_tokens
            slot["completion"] += s.completion_tokens
            usd += estimate_cost(t.model, s.prompt_tokens, s.completion_tokens, price_table)
    per_role = (
        {
            r: {"prompt_per_dialogue": v["prompt"] / n, "completion_per_dialogue": v["completion"] / n}
            for r, v in tokens.items()
        }
        if n
        else {}
    )
    seconds = wall_s if wall_s else sum(latencies)
    return {
        "n": n,
        "latency_s": mean_with_ci(latencies),
        "latency_p50_s": percentile(latencies, 50),
        "latency_p95_s": percentile(latencies, 95),
        "throughput_dps": n / seconds if seconds else None,
        "throughput_source": "wall clock" if wall_s else "summed step latency",
        "tokens_per_role": per_role,
        "usd_per_1k": usd / n * 1000 if n else None,
        "peak_rss_mb": peak_rss_mb,
    }


def imported_chain_cost(traces: Sequence[Trace], model: str, encoding: str = "cl100k_base") -> dict:
    """What an imported run's chains would cost from `model` over its API: per dialogue, the tokens of the teacher
    prompt this toolkit renders for each link (its upstream answers the chain's own) and of the link's answer as
    JSON, counted with the OpenAI encoding, at `model`'s list price. An estimate: the chains' real prompts (ESD-CoT's
    authors') are not stored, and a chain corrected by hand cost more than one call."""
    from distill.roles.roles import RoleInput
    from eval.metrics.diversity import resolve_tokenizer

    encode, _ = resolve_tokenizer(encoding, None)
    prompt = completion = 0
    for trace in traces:
        upstream, roles = {}, trace.roles
        for step in trace.steps:
            if step.parsed is None:
                continue
            spec = roles[step.role]
            messages = spec.render(RoleInput(dialogue=trace.dialogue, upstream=dict(upstream)), "teacher")
            prompt += sum(len(encode(m["content"])) + 4 for m in messages)  # + the chat format's few per message
            completion += len(encode(json.dumps(step.parsed, ensure_ascii=False)))
            upstream[step.role] = spec.schema.model_validate(step.parsed)
    n = max(len(traces), 1)
    return {
        "model": model,
        "encoding": encoding,
        "prompt_tokens_per_dialogue": prompt / n,
        "completion_tokens_per_dialogue": completion / n,
        "usd_per_1k": estimate_cost(model, prompt, completion) / n * 1000,
    }


class PeakRSS:
    """Peak resident memory of this process while the block runs, in MiB.

    Samples /proc/self/statm every ``interval`` seconds from a thread (Linux); elsewhere falls back to
    ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, which is the process's lifetime peak. The number
    covers the whole process (weights of every model loaded so far), not only this system.
    """

    method = "RSS sampled from /proc/self/statm every 0.1 s during generation (whole process)"

    def __init__(self, interval: float = 0.1):
        self.interval, self.peak_mb = interval, 0.0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def _sample(self) -> float:
        try:
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * self._page / 2**20
        except OSError:
            self.method = "resource.getrusage ru_maxrss (process lifetime peak)"
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self._sample())
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self.peak_mb = self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, self._sample())
