"""The Batch API chain offline: request files per stage, result parsing, traces in the store.

No network: the provider's output files are written here in the Batch API's documented line
format, so every part of our code (replay, request files, parsing, store) runs for real.
"""

from __future__ import annotations

import json

import pytest
from fastapi import Request  # module level: FastAPI resolves the handlers' string annotations here

from distill import __version__
from distill.batch.batch_api import (
    BATCH_DIR,
    NeedsBatch,
    append_results,
    body_digest,
    parse_output_lines,
    replay,
    write_request_file,
)
from distill.pipeline.store import TraceStore
from distill.pipeline.trace import Trace

CONFIG = {
    "backend": {"type": "openai", "model": "gpt-4o-mini", "api_key_env": "TD_TEST_KEY"},
    "pipeline": {"rag": False},
}

ANSWERS = {
    "ASIOutput": {"reasoning": "The seeker describes a loss.", "emotion": "sadness"},
    "CAEOutput": {"triggers": ["sold"], "cause": "Something they loved is gone.", "category": "Loss & Failure"},
    "SRPOutput": {"reasoning": "Acknowledge the feeling first.", "strategy": "ER"},
    "ERSOutput": {"response": "That sounds really hard, I am sorry."},
}


def _output_line(line: dict, content: str) -> str:
    body = {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "model": line["body"]["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }
    return json.dumps(
        {
            "id": "batch_req_x",
            "custom_id": line["custom_id"],
            "response": {"status_code": 200, "request_id": "r", "body": body},
            "error": None,
        }
    )


def _answer(lines: list[dict], bad: set[str], failed: set[str]) -> tuple[str, str]:
    """Provider files for one round: valid answers, except invalid JSON for `bad` ids and errors for `failed`."""
    out, err = [], []
    for line in lines:
        schema = line["body"]["response_format"]["json_schema"]["name"]
        if line["custom_id"] in failed:
            err.append(
                json.dumps(
                    {
                        "id": "batch_req_y",
                        "custom_id": line["custom_id"],
                        "response": {"status_code": 500, "body": {"error": {"message": "server had an error"}}},
                        "error": None,
                    }
                )
            )
        elif line["custom_id"] in bad:
            bad.discard(line["custom_id"])  # only the first attempt is invalid
            out.append(_output_line(line, '{"emotion": "joyful"}'))
        else:
            out.append(_output_line(line, json.dumps(ANSWERS[schema])))
    return "\n".join(out) + "\n", "\n".join(err) + ("\n" if err else "")


def test_request_file_per_stage_and_results_become_traces(tmp_path, tiny_dialogues):
    dialogues = tiny_dialogues[:3]
    run_dir = tmp_path / "run"
    (run_dir / BATCH_DIR).mkdir(parents=True)
    rounds = []
    bad: set[str] = set()
    failed: set[str] = set()
    for round_no in range(1, 12):
        needed = replay(run_dir, CONFIG, dialogues, split="train")
        if needed is None:
            break
        assert isinstance(needed, NeedsBatch)
        path = write_request_file(run_dir / BATCH_DIR / f"round-{round_no}.jsonl", needed.lines)
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        rounds.append((needed.role, needed.iteration, len(lines)))
        for line in lines:
            key, role, iteration = line["custom_id"].split(":")
            assert (role, int(iteration)) == (needed.role, needed.iteration) and len(key) == 32
            assert line["url"] == "/v1/chat/completions" and line["body"]["model"] == "gpt-4o-mini"
            assert line["body"]["response_format"]["json_schema"]["strict"] is True
        if round_no == 1:  # first ASI round: one invalid answer (retried next round), one provider error
            bad.add(lines[0]["custom_id"])
            failed.add(lines[1]["custom_id"])
        output, errors = _answer(lines, bad, failed)
        records = parse_output_lines(path, output, errors, batch_id=f"batch_{round_no}")
        assert sorted(r["custom_id"] for r in records) == sorted(x["custom_id"] for x in lines)
        assert {r["digest"] for r in records} == {body_digest(x["body"]) for x in lines}
        append_results(run_dir, records)
    else:
        pytest.fail("the batch chain did not finish")

    # Stage by stage: ASI for all three, the one invalid ASI answer retried alone, then the
    # two surviving dialogues through CAE, SRP and ERS.
    assert rounds == [("asi", 0, 3), ("asi", 0, 1), ("cae", 0, 2), ("srp", 0, 2), ("ers", 0, 2)]
    traces, problems = TraceStore(run_dir).read()
    assert not problems and len(traces) == 3
    info = TraceStore(run_dir).run_info()  # the same run.json as `distill generate`, version included
    assert info.trace_distill_version == __version__ and info.source == {"via": "batch_api"}
    assert info.split == "train"  # so `distill datasets --split train` takes a Batch API run
    by_status = {t.status: t for t in traces}
    ok = [t for t in traces if t.status == "ok"]
    assert len(ok) == 2 and all(Trace.model_validate(t.model_dump()) for t in ok)
    for t in ok:
        assert [s.role for s in t.steps] == ["asi", "cae", "srp", "ers"] and all(s.valid for s in t.steps)
        assert t.response == ANSWERS["ERSOutput"]["response"] and t.backend == "openai" and t.model == "gpt-4o-mini"
    retried = next(t for t in ok if t.steps[0].attempts == 2)
    assert "invalid output" in " ".join(retried.steps[0].events)
    assert by_status["failed"].failure.startswith("asi: transport error: batch batch_1: server had an error")
    # A rerun changes nothing: every trace is stored and no request is missing an answer.
    assert replay(run_dir, CONFIG, dialogues, split="train") is None and len(TraceStore(run_dir).read()[0]) == 3


def test_result_parsing_names_bad_lines_and_fills_missing(tmp_path):
    path = write_request_file(
        tmp_path / "round-1.jsonl",
        [
            {
                "custom_id": "k1:asi:0",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": []},
            },
            {
                "custom_id": "k2:asi:0",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
            },
        ],
    )
    with pytest.raises(ValueError, match="output file line 1: custom_id 'nope:asi:0' is not in round-1.jsonl"):
        parse_output_lines(path, json.dumps({"custom_id": "nope:asi:0", "response": {}}), batch_id="b")
    with pytest.raises(ValueError, match="output file line 2: not a result line"):
        parse_output_lines(
            path, _output_line({"custom_id": "k1:asi:0", "body": {"model": "m"}}, "{}") + "\n{oops", batch_id="b"
        )
    records = {
        r["custom_id"]: r
        for r in parse_output_lines(
            path, _output_line({"custom_id": "k1:asi:0", "body": {"model": "m"}}, "{}"), batch_id="b"
        )
    }
    assert records["k1:asi:0"]["text"] == "{}" and records["k1:asi:0"]["prompt_tokens"] == 100
    assert "no result for this request" in records["k2:asi:0"]["error"]  # an expired batch's missing line
    with pytest.raises(ValueError, match="duplicate custom_id"):
        write_request_file(tmp_path / "dup.jsonl", [{"custom_id": "a", "body": {}}, {"custom_id": "a", "body": {}}])


# --- the CLI and the OpenAI client against a local Batch API endpoint ------------------------------


def _batch_endpoint():
    """A minimal /v1/files + /v1/batches server that answers every line with a schema-valid output.

    It stands in for OpenAI's side only; our CLI, the official client, uploads, polling and parsing
    all run for real.
    """
    import email

    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    app, files, batches = FastAPI(), {}, {}

    @app.post("/v1/files")
    async def upload(request: Request):
        raw = await request.body()
        msg = email.message_from_bytes(b"Content-Type: " + request.headers["content-type"].encode() + b"\r\n\r\n" + raw)
        content = next(p.get_payload(decode=True) for p in msg.get_payload() if p.get_filename())
        files[f"file-{len(files)}"] = content.decode()
        return {
            "id": f"file-{len(files) - 1}",
            "object": "file",
            "bytes": len(content),
            "created_at": 0,
            "filename": "in.jsonl",
            "purpose": "batch",
            "status": "processed",
        }

    @app.post("/v1/batches")
    async def create(body: dict):
        lines = [json.loads(x) for x in files[body["input_file_id"]].splitlines()]
        out = "\n".join(
            _output_line(x, json.dumps(ANSWERS[x["body"]["response_format"]["json_schema"]["name"]])) for x in lines
        )
        files[f"file-{len(files)}"] = out + "\n"
        batch_id = f"batch_{len(batches)}"
        batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "completion_window": "24h",
            "input_file_id": body["input_file_id"],
            "created_at": 0,
            "status": "validating",
            "output_file_id": None,
            "_output": f"file-{len(files) - 1}",
        }
        return {k: v for k, v in batches[batch_id].items() if not k.startswith("_")}

    @app.get("/v1/batches/{batch_id}")
    async def retrieve(batch_id: str):
        batch = batches[batch_id]
        batch.update(status="completed", output_file_id=batch["_output"])  # done by the second look
        return {k: v for k, v in batch.items() if not k.startswith("_")}

    @app.get("/v1/files/{file_id}/content")
    async def content(file_id: str):
        return PlainTextResponse(files[file_id])

    return app, batches


@pytest.fixture
def batch_run(tmp_path, tiny_dialogues, monkeypatch):
    """A local Batch API endpoint, 3 train dialogues and a teacher YAML pointing at it."""
    import threading
    import time

    import uvicorn
    import yaml
    from fault_proxy import free_port

    from data_prep.loaders import save_dialogues

    app, batches = _batch_endpoint()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    save_dialogues({"train": tiny_dialogues[:3]}, tmp_path / "dialogues")
    config = {
        "backend": {**CONFIG["backend"], "base_url": f"http://127.0.0.1:{port}/v1"},
        "pipeline": CONFIG["pipeline"],
    }
    (tmp_path / "teacher.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("TD_TEST_KEY", "sk-local")
    submit = ["batch", "submit", "--config", str(tmp_path / "teacher.yaml"), "--dialogues", str(tmp_path / "dialogues")]
    try:
        yield submit, tmp_path / "run", batches
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.slow
def test_batch_cli_submit_then_poll_to_completion(batch_run):
    from distill.__main__ import main

    submit, out, batches = batch_run
    assert main([*submit, "--split", "train", "--out", str(out)]) == 0
    state = json.loads((out / BATCH_DIR / "state.json").read_text())
    assert state["pending"]["batch_id"] == "batch_0" and state["pending"]["role"] == "asi"
    # A fresh process would resume from state.json alone: poll needs only --out.
    assert main(["batch", "poll", "--out", str(out), "--wait", "--interval", "0"]) == 0
    traces, problems = TraceStore(out).read()
    assert not problems and len(traces) == 3 and all(t.status == "ok" for t in traces)
    assert len(batches) == 4  # one batch per stage: asi, cae, srp, ers
    assert main(["batch", "collect", "--out", str(out)]) == 0


def test_batch_max_cost_refuses_a_round_that_could_pass_it(batch_run, capsys):
    from distill.__main__ import main
    from distill.backends.pricing import estimate_prompt_tokens, worst_case_cost

    submit, out, batches = batch_run
    assert main([*submit, "--out", str(out), "--max-cost", "0.0001"]) == 3
    err = capsys.readouterr().err
    assert "not submitted: round 1 (3 asi requests) could cost up to $" in err and "--max-cost $0.0001" in err
    assert not batches and not (out / BATCH_DIR / "round-1.jsonl").exists()  # nothing was uploaded
    # the refused round, priced by hand: 3 requests at gpt-4o-mini's batch price, every answer at its limit
    state = json.loads((out / BATCH_DIR / "state.json").read_text())
    assert state["max_cost"] == 0.0001 and state["pending"] is None
    assert main(["batch", "poll", "--out", str(out), "--max-cost", "5"]) == 0  # a higher cap goes on
    assert len(batches) == 1
    lines = [json.loads(x) for x in (out / BATCH_DIR / "round-1.jsonl").read_text().splitlines()]
    calls = [(estimate_prompt_tokens(x["body"]["messages"]), x["body"]["max_tokens"]) for x in lines]
    worst = worst_case_cost("gpt-4o-mini", calls, batch=True)
    assert worst == pytest.approx(sum(p * 0.15 + c * 0.60 for p, c in calls) / 1e6 / 2) and worst > 0.0001


def test_batch_max_cost_refuses_an_unpriced_model(batch_run, tmp_path, capsys):
    import yaml

    from distill.__main__ import main

    submit, out, batches = batch_run
    config = yaml.safe_load((tmp_path / "teacher.yaml").read_text())
    config["backend"]["model"] = "gpt-5"
    (tmp_path / "teacher.yaml").write_text(yaml.safe_dump(config))
    assert main([*submit, "--out", str(out), "--max-cost", "5"]) == 2
    assert "no price is known for model 'gpt-5'" in capsys.readouterr().err and not batches


def test_batch_submit_takes_generates_gold_guidance_flags(batch_run, tiny_dialogues):
    """`--gold-emotion` / `--gold-response` reach the requests, as in `distill generate`; without them, nothing."""
    from distill.__main__ import main

    submit, out, _ = batch_run
    assert main([*submit, "--out", str(out / "gold"), "--gold-emotion", "--gold-response"]) == 0
    assert main([*submit, "--out", str(out / "plain")]) == 0
    gold, plain = (
        [json.loads(x) for x in (out / name / BATCH_DIR / "round-1.jsonl").read_text().splitlines()]
        for name in ("gold", "plain")
    )

    def prompt(line: dict) -> str:
        return "\n".join(m["content"] for m in line["body"]["messages"])

    for line in gold:
        dialogue = next(d for d in tiny_dialogues[:3] if d.turns[-1].text in prompt(line))
        assert f"the seeker's true emotion is {dialogue.emotion}." in prompt(line)
        assert f"the human listener actually replied: {dialogue.gold_response}" in prompt(line)
    assert len(gold) == len(plain) == 3
    assert not any("true emotion" in prompt(line) or "actually replied" in prompt(line) for line in plain)
    state = json.loads((out / "gold" / BATCH_DIR / "state.json").read_text())
    assert state["config"]["pipeline"]["gold_emotion"] and state["config"]["pipeline"]["gold_response"]
