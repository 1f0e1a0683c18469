"""`python -m distill batch submit|poll|collect`: the teacher pipeline through OpenAI's Batch API.

The Batch API answers a file of requests within 24 hours at half price. The pipeline is stage by
stage, so a run is a chain of batches: all ASI requests, then all CAE requests built from the ASI
answers, and so on (invalid-output retries and reflection rounds become further batches).

Rather than re-implementing the pipeline, every step replays the real `Pipeline` over the split
with a backend that answers from the results downloaded so far. The first stage whose answers are
missing stops the replay and becomes the next batch file, one line per request with
`custom_id = <trace key>:<role>:<iteration>`. When nothing is missing the traces are written into
the run's `TraceStore`: the same keys, steps and validation as a synchronous `openai` run.

Run directory additions:

    batch/state.json             the YAML config, dialogue source and the batch in flight (resume point)
    batch/round-<n>.jsonl        request file of round n, exactly as uploaded
    batch/results.jsonl          every answer received, keyed by request digest
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from distill.backends.base import GenerationRequest, GenerationResult
from distill.backends.openai_backend import OpenAIBackend
from distill.backends.pricing import (
    CostLimitReached,
    estimate_cost,
    estimate_prompt_tokens,
    price_table,
    worst_case_cost,
)
from distill.pipeline.pipeline import Pipeline
from distill.pipeline.store import TraceStore

BATCH_DIR = "batch"
ENDPOINT = "/v1/chat/completions"
_TERMINAL = {"completed", "failed", "expired", "cancelled"}


class NeedsBatch(Exception):
    """Raised mid-replay: these request lines have no answer yet and must go out as a batch."""

    def __init__(self, lines: list[dict[str, Any]], role: str, iteration: int):
        super().__init__(f"{len(lines)} {role} requests (iteration {iteration}) need answers")
        self.lines, self.role, self.iteration = lines, role, iteration


def body_digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:24]


class BatchReplayBackend:
    """Answers from downloaded batch results; the first unanswered stage raises `NeedsBatch`."""

    name = "openai"  # same trace keys as a synchronous run of the same teacher

    def __init__(self, api: OpenAIBackend, results: dict[str, dict[str, Any]]):
        self.api = api
        self.model = api.model
        self.results = results
        self.stage: tuple[str, int, dict[str, str]] = ("", 0, {})  # role, iteration, messages → trace key

    def describe(self) -> dict[str, Any]:
        return {**self.api.describe(), "via": "batch_api"}

    def generate(self, requests: Sequence[GenerationRequest], progress=None) -> list[GenerationResult]:
        role, iteration, keys = self.stage
        bodies = [self.api.request_body(r) for r in requests]
        missing = [b for b in bodies if body_digest(b) not in self.results]
        if missing:
            lines = [
                {
                    "custom_id": f"{keys[_messages_id(b['messages'])]}:{role}:{iteration}",
                    "method": "POST",
                    "url": ENDPOINT,
                    "body": b,
                }
                for b in missing
            ]
            raise NeedsBatch(lines, role, iteration)
        if progress:
            progress(len(requests))
        return [_to_result(self.results[body_digest(b)]) for b in bodies]


class _BatchPipeline(Pipeline):
    """The pipeline, telling the replay backend which role, iteration and dialogue each request is for."""

    def _generate(self, spec, inputs, iteration, progress):
        keys = {_messages_id(spec.render(inp, self.config.prompt_style)): self.key(inp.dialogue) for inp in inputs}
        self.backend.stage = (spec.name, iteration, keys)
        return super()._generate(spec, inputs, iteration, progress)


def _messages_id(messages: list[dict[str, str]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def _to_result(rec: dict[str, Any]) -> GenerationResult:
    return GenerationResult(
        text=rec.get("text", ""),
        prompt_tokens=rec.get("prompt_tokens", 0),
        completion_tokens=rec.get("completion_tokens", 0),
        error=rec.get("error"),
        events=[f"batch {rec.get('batch_id', '?')}"],
    )


# --- request files and result files ---------------------------------------------------------------


def write_request_file(path: Path, lines: list[dict[str, Any]]) -> Path:
    ids = [line["custom_id"] for line in lines]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate custom_id in one batch (repeated dialogues?)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def parse_output_lines(
    request_file: Path, output_text: str, error_text: str = "", batch_id: str = ""
) -> list[dict[str, Any]]:
    """Batch output (and error) file lines → result records keyed by the digest of the request body.

    A request with no line at all (an expired batch) gets an error record, so its dialogue is
    recorded as failed instead of waiting forever.
    """
    requests = {}
    for raw in request_file.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        requests[line["custom_id"]] = body_digest(line["body"])
    records: dict[str, dict[str, Any]] = {}
    for source, text in (("output", output_text), ("error", error_text)):
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
                custom_id = line["custom_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(
                    f"batch {batch_id} {source} file line {number}: not a result line (no JSON custom_id)"
                ) from None
            if custom_id not in requests:
                raise ValueError(
                    f"batch {batch_id} {source} file line {number}: custom_id '{custom_id}' "
                    f"is not in {request_file.name}"
                )
            records[custom_id] = _result_record(line, batch_id)
    for custom_id in requests.keys() - records.keys():
        records[custom_id] = {"error": f"batch {batch_id}: no result for this request", "batch_id": batch_id}
    return [{"digest": requests[cid], "custom_id": cid, **rec} for cid, rec in records.items()]


def _result_record(line: dict[str, Any], batch_id: str) -> dict[str, Any]:
    response = line.get("response") or {}
    body = response.get("body") or {}
    if line.get("error") or response.get("status_code") != 200:
        reason = (line.get("error") or body.get("error") or {}).get(
            "message"
        ) or f"status {response.get('status_code')}"
        return {"error": f"batch {batch_id}: {reason}", "batch_id": batch_id}
    try:
        text = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return {"error": f"batch {batch_id}: response without choices[0].message.content", "batch_id": batch_id}
    usage = body.get("usage") or {}
    return {
        "text": text or "",
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
        "batch_id": batch_id,
    }


def load_results(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / BATCH_DIR / "results.jsonl"
    if not path.exists():
        return {}
    return {rec["digest"]: rec for rec in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if rec}


def append_results(run_dir: Path, records: list[dict[str, Any]]) -> None:
    with open(run_dir / BATCH_DIR / "results.jsonl", "a", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


# --- one step of the chain ------------------------------------------------------------------------


def replay(
    run_dir: Path, config: dict[str, Any], dialogues, index=None, split: Optional[str] = None
) -> Optional[NeedsBatch]:
    """Run the pipeline over `dialogues` from stored answers; write traces when complete, else return the next batch."""
    from distill.pipeline.config import PipelineConfig

    backend_cfg = {k: v for k, v in config["backend"].items() if k != "type"}
    api = OpenAIBackend(**backend_cfg)
    pipeline = _BatchPipeline(
        PipelineConfig(**config.get("pipeline", {})), BatchReplayBackend(api, load_results(run_dir)), index
    )
    store = TraceStore(run_dir)
    # The same identity as `distill generate` writes, so a batch run and a synchronous run of one
    # teacher can share (and resume) a run directory.
    store.claim(pipeline.run_info(split=split, source={"via": "batch_api"}))
    try:
        pipeline.run_into(store, dialogues, chunk_size=max(1, len(dialogues)))
    except NeedsBatch as needed:
        return needed
    return None


def _state_path(run_dir: Path) -> Path:
    return run_dir / BATCH_DIR / "state.json"


def load_state(run_dir: Path) -> dict[str, Any]:
    path = _state_path(run_dir)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no batch run here (start one with `python -m distill batch submit`)")
    return json.loads(path.read_text(encoding="utf-8"))


def save_state(run_dir: Path, state: dict[str, Any]) -> None:
    path = _state_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # atomic: a restart always finds a whole state file


def advance(run_dir: Path, state: dict[str, Any], client, dialogues, index=None) -> str:
    """Collect the batch in flight if it has finished, then submit the next one or write the traces."""
    pending = state.get("pending")
    if pending:
        batch = client.batches.retrieve(pending["batch_id"])
        if batch.status not in _TERMINAL:
            counts = getattr(batch, "request_counts", None)
            done = f" ({counts.completed}/{counts.total} done)" if counts else ""
            return f"batch {batch.id} round {pending['round']}: {batch.status}{done}"
        output = client.files.content(batch.output_file_id).text if batch.output_file_id else ""
        errors = client.files.content(batch.error_file_id).text if batch.error_file_id else ""
        records = parse_output_lines(run_dir / pending["file"], output, errors, batch.id)
        append_results(run_dir, records)
        state["history"].append({**pending, "status": batch.status})
        state["pending"] = None
        save_state(run_dir, state)
    needed = replay(run_dir, state["config"], dialogues, index, split=state.get("split"))
    if needed is None:
        state["complete"] = True
        save_state(run_dir, state)
        return f"complete: traces written to {run_dir / 'traces.jsonl'} ({_spend(run_dir, state)})"
    round_no = len(state["history"]) + 1
    check_budget(run_dir, state, needed, round_no)
    file = f"{BATCH_DIR}/round-{round_no}.jsonl"
    write_request_file(run_dir / file, needed.lines)
    with open(run_dir / file, "rb") as fh:
        uploaded = client.files.create(file=fh, purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h")
    state["pending"] = {
        "batch_id": batch.id,
        "input_file_id": uploaded.id,
        "file": file,
        "round": round_no,
        "role": needed.role,
        "iteration": needed.iteration,
        "requests": len(needed.lines),
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    save_state(run_dir, state)
    return (
        f"submitted batch {batch.id}: round {round_no}, {len(needed.lines)} {needed.role} requests "
        f"(iteration {needed.iteration})"
    )


def _spent_usd(run_dir: Path, state: dict[str, Any]) -> float:
    """What the answers received so far cost, at batch prices."""
    backend = state["config"]["backend"]
    recs = load_results(run_dir).values()
    return estimate_cost(
        backend["model"],
        sum(r.get("prompt_tokens", 0) for r in recs),
        sum(r.get("completion_tokens", 0) for r in recs),
        price_table(backend.get("prices")),
        batch=True,
    )


def _spend(run_dir: Path, state: dict[str, Any]) -> str:
    return f"estimated cost ${_spent_usd(run_dir, state):.4f} at batch prices"


def check_budget(run_dir: Path, state: dict[str, Any], needed: NeedsBatch, round_no: int) -> None:
    """Refuse to submit a round that could take the run past `--max-cost` (every answer at its token limit)."""
    cap = state.get("max_cost")
    if cap is None:
        return
    backend = state["config"]["backend"]
    calls = [(estimate_prompt_tokens(line["body"]["messages"]), line["body"]["max_tokens"]) for line in needed.lines]
    worst = worst_case_cost(backend["model"], calls, price_table(backend.get("prices")), batch=True)
    spent = _spent_usd(run_dir, state)
    if spent + worst > cap:
        raise CostLimitReached(
            f"not submitted: round {round_no} ({len(needed.lines)} {needed.role} requests) could cost up to "
            f"${worst:.4f} at batch prices on top of ${spent:.4f} spent, past --max-cost ${cap:.4f}; "
            f"`batch poll --out {run_dir} --max-cost <higher>` continues"
        )
