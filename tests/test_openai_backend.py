"""The `openai` backend against a real `distill serve` on 127.0.0.1: pipeline traces, faults, cost cap.

Transport tests run the server on a tiny 2-layer random model (constrained decoding still yields
schema-valid JSON), so faults and retries are cheap; the trace-format test uses the embedded model.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from fault_proxy import FaultProxy, ServeProcess, make_tiny_model

from distill.backends.base import GenerationRequest
from distill.backends.openai_backend import OpenAIBackend, client_arguments, schema_for_api
from distill.backends.pricing import CostGuard, CostLimitReached, estimate_cost, lookup_price, price_table
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.pipeline.store import TraceStore
from distill.pipeline.trace import Trace
from distill.roles.roles import ROLES
from distill.roles.schemas import ASIOutput, GRAOutput

STUDENT_CORE = dict(rag=False, prompt_style="student")


# --- offline pieces ------------------------------------------------------------------------------


def test_schema_for_api_is_strict_where_the_schema_allows():
    schema, strict = schema_for_api(ASIOutput, strict=True)
    assert strict and "maxLength" not in str(schema) and set(schema["required"]) == {"reasoning", "emotion"}
    assert schema_for_api(ASIOutput, strict=False) == (ASIOutput.model_json_schema(), False)
    # GRA has optional keys, which strict mode cannot express: sent as-is, non-strict.
    assert schema_for_api(GRAOutput, strict=True) == (GRAOutput.model_json_schema(), False)


def test_prices_and_cost_guard():
    assert estimate_cost("gpt-4o", 1_000_000, 0) == pytest.approx(2.50)
    assert estimate_cost("gpt-4o-mini-2024-07-18", 0, 1_000_000) == pytest.approx(0.60)
    assert lookup_price("gpt-4o-2099-01-01").input_per_m == 2.50  # dated snapshot → family price
    assert estimate_cost("Qwen/Qwen2.5-7B-Instruct", 10**7, 10**7) == 0.0  # self-hosted is free
    assert estimate_cost("gpt-4o", 1_000_000, 0, batch=True) == pytest.approx(1.25)
    table = price_table({"my-model": {"input": 1.0, "output": 2.0}, "gpt-4o": [5, 20]})
    assert estimate_cost("my-model", 10**6, 10**6, table) == pytest.approx(3.0)
    assert estimate_cost("gpt-4o", 10**6, 0, table) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="prices: entry 'x'"):
        price_table({"x": "cheap"})
    guard = CostGuard(max_cost=0.01, table=table)
    assert guard.reserve("my-model", 1000, 1000)  # reserves $0.003
    guard.settle("my-model", (1000, 1000), (1000, 500))  # billed $0.002
    assert guard.spent == pytest.approx(0.002)
    assert not guard.reserve("my-model", 10_000, 10_000) and guard.tripped  # $0.03 would pass $0.01
    assert not guard.reserve("my-model", 1, 1)  # stays tripped: the run is stopping
    assert "--max-cost" in guard.message()


def test_describe_never_contains_the_key(monkeypatch):
    monkeypatch.setenv("TD_SECRET_KEY", "sk-test-do-not-leak-8f3a")
    backend = OpenAIBackend(model="gpt-4o", api_key_env="TD_SECRET_KEY")
    assert "sk-test-do-not-leak" not in str(backend.describe()) and backend.describe()["api_key_env"] == "TD_SECRET_KEY"


def test_rate_limits_gate_every_request_by_count_and_by_tokens(monkeypatch):
    """requests_per_minute / tokens_per_minute: each call waits on both limiters, tokens as estimated."""
    import distill.backends.openai_backend as ob

    log: list[tuple] = []

    class RecordingLimiter:
        def __init__(self, max_rate, time_period):
            self.name = "rpm" if max_rate == 30 else "tpm"
            log.append(("new", self.name, max_rate, time_period))

        async def acquire(self, amount=1):
            log.append(("acquire", self.name, amount))

    async def fake_call(self, client, req, model, events):
        log.append(("call", req.messages[0]["content"]))
        return '{"ok": true}', (7, 3)

    monkeypatch.setattr(ob, "AsyncLimiter", RecordingLimiter)
    monkeypatch.setattr(ob.OpenAIBackend, "_call", fake_call)
    backend = OpenAIBackend(
        model="local-test",
        base_url="http://127.0.0.1:9/v1",
        requests_per_minute=30,
        tokens_per_minute=500,
        max_concurrency=1,
    )
    requests = [
        GenerationRequest(messages=[{"role": "user", "content": "x" * 400}], max_new_tokens=50),
        GenerationRequest(messages=[{"role": "user", "content": "short"}], max_new_tokens=4000),
    ]
    results = backend.generate(requests)
    assert [r.completion_tokens for r in results] == [3, 3] and not any(r.error for r in results)
    assert ("new", "rpm", 30, 60) in log and ("new", "tpm", 500, 60) in log
    calls = [e for e in log if e[0] != "new"]
    # one request at a time (max_concurrency=1): rpm, then tpm, then the call
    assert calls == [
        ("acquire", "rpm", 1),
        ("acquire", "tpm", 400 // 4 + 4 + 50),
        ("call", "x" * 400),
        ("acquire", "rpm", 1),
        ("acquire", "tpm", 500),
        ("call", "short"),
    ]  # capped at the limit


# --- against a tiny server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_server(smollm_path, tmp_path_factory):
    model_dir = make_tiny_model(smollm_path, tmp_path_factory.mktemp("tiny") / "model")
    proc = ServeProcess(str(model_dir), tmp_path_factory.mktemp("serve") / "tiny.log", "--max-batch", "16")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _backend(url: str, **overrides) -> OpenAIBackend:
    options = dict(model=_base_name(url), base_url=url + "/v1", strict_schema=False, timeout_s=60, backoff_base_s=0.05)
    options.update(overrides)
    return OpenAIBackend(**options)


def _base_name(url: str) -> str:
    import httpx

    return httpx.get(url + "/v1/models").json()["data"][0]["id"]


@pytest.mark.slow
def test_faults_every_dialogue_completes_or_fails_with_a_reason(tiny_server, tiny_dialogues, tmp_path):
    proxy = FaultProxy(tiny_server.url, fault_rate=0.3, seed=7, stall_s=5.0).start()
    try:
        backend = _backend(tiny_server.url, base_url=proxy.url + "/v1", timeout_s=4, max_retries=8)
        pipeline = Pipeline(PipelineConfig(**STUDENT_CORE), backend)
        store = TraceStore(tmp_path / "run")
        summary = pipeline.run_into(store, tiny_dialogues, chunk_size=4)
    finally:
        proxy.stop()
    traces, problems = store.read()
    assert not problems and summary.written == len(tiny_dialogues)
    assert sorted(t.key for t in traces) == sorted(pipeline.key(d) for d in tiny_dialogues)  # none lost or duplicated
    for t in traces:
        assert t.status == "ok" or (t.failure and ":" in t.failure)
        for step in t.steps:
            assert step.valid or step.error  # every step says what happened
    steps = [s for t in traces for s in t.steps]
    assert sum(s.transport_retries for s in steps) >= 3
    notes = " ".join(e for s in steps for e in s.events)
    assert "429 retry in" in notes and " retry in " in notes
    assert len(proxy.injected) >= 4, proxy.injected  # several kinds of fault were actually injected


@pytest.mark.slow
def test_exhausted_retries_become_an_error_result_not_an_exception(tiny_server):
    proxy = FaultProxy(tiny_server.url, fault_rate=1.0, seed=1, faults=("500",)).start()
    try:
        backend = _backend(tiny_server.url, base_url=proxy.url + "/v1", max_retries=2)
        [result] = backend.generate([GenerationRequest(messages=[{"role": "user", "content": "hi"}], max_new_tokens=4)])
    finally:
        proxy.stop()
    assert result.error and result.error.startswith("500") and result.text == ""
    assert result.transport_retries == 2 and proxy.injected["500"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("status", [400, 500])  # 500: llama-cpp-python's server (its own validation error)
def test_json_schema_rejection_falls_back_to_json_object(tiny_server, status):
    proxy = FaultProxy(tiny_server.url, fault_rate=0.0, reject_json_schema=True, reject_status=status).start()
    try:
        backend = _backend(tiny_server.url, base_url=proxy.url + "/v1")
        requests = [
            GenerationRequest(messages=[{"role": "user", "content": f"hi {i}"}], schema=ASIOutput, max_new_tokens=8)
            for i in range(3)
        ]
        results = backend.generate(requests)
    finally:
        proxy.stop()
    assert all(r.error is None for r in results)
    assert any("falling back to json_object" in " ".join(r.events) for r in results)
    assert backend.describe()["response_format_used"] == "json_object"
    assert proxy.injected["json_schema rejected"] >= 1 and "500" not in proxy.injected


@pytest.mark.slow
def test_max_cost_stops_before_sending(tiny_server, tiny_dialogues):
    # the served model priced like a paid API (an unpriced model is refused under a cap)
    served = _base_name(tiny_server.url)
    guard = CostGuard(max_cost=0.001, table=price_table({served: {"input": 1000.0, "output": 1000.0}}))
    backend = _backend(tiny_server.url, cost_guard=guard)
    before = tiny_server.metrics()["requests"]
    with pytest.raises(CostLimitReached, match="--max-cost"):
        Pipeline(PipelineConfig(**STUDENT_CORE), backend).run(tiny_dialogues[:2], progress=False)
    assert tiny_server.metrics()["requests"] == before  # nothing was sent past the cap


# --- the embedded model: same traces as the local backend --------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "embedded"])
def test_pipeline_over_serve_matches_the_local_trace_format(which, smollm_path, tiny_dialogues, tmp_path):
    from distill.backends.local import LocalBackend

    # The tiny model compares two dialogues cheaply; the embedded one shows the real model end to end.
    model = str(make_tiny_model(smollm_path, tmp_path / "tiny")) if which == "tiny" else "smollm2-135m"
    dialogues = tiny_dialogues[:2] if which == "tiny" else tiny_dialogues[:1]
    config = PipelineConfig(**STUDENT_CORE)
    server = ServeProcess(model, tmp_path / "serve.log", "--max-batch", "8").wait_ready()
    try:
        remote = Pipeline(config, _backend(server.url, timeout_s=1800)).run(dialogues, progress=False)
        served = server.metrics()
    finally:
        server.stop()
    local = Pipeline(config, LocalBackend(model)).run(dialogues, progress=False)
    for r, loc in zip(remote, local):
        Trace.model_validate_json(r.model_dump_json())
        assert set(r.model_dump()) == set(loc.model_dump())
        assert (r.backend, loc.backend) == ("openai", "local") and r.model == loc.model == model
        # The same prompt, tokenised the same way, whichever side of HTTP the model sits on. (Later
        # stages may differ: batch composition can flip a near-tie in greedy decoding.)
        assert r.steps[0].role == loc.steps[0].role == "asi"
        assert (r.steps[0].messages, r.steps[0].prompt_tokens) == (loc.steps[0].messages, loc.steps[0].prompt_tokens)
        assert [s.role for s in r.steps if s.valid] == list(config.stages())[: sum(s.valid for s in r.steps)]
        for step in r.steps:
            assert step.prompt_tokens > 0 and step.latency_s > 0 and (step.valid or step.error)
            if step.valid:
                ROLES[step.role].schema.model_validate(step.parsed)
        if r.status == "ok":
            assert set(r.outputs) == {"asi", "cae", "srp", "ers"} and r.response
    assert served["requests"] == sum(s.attempts for t in remote for s in t.steps)


# --- the generate CLI against the server: SIGKILL and resume, and the key never written ------------


def _write_generate_inputs(tmp_path: Path, dialogues, url: str, model: str = "") -> tuple[Path, Path]:
    import yaml

    from data_prep.loaders import save_dialogues

    data_dir = tmp_path / "dialogues"
    save_dialogues({"train": list(dialogues)}, data_dir)
    config = {
        "backend": {
            "type": "openai",
            "model": model or _base_name(url),
            "base_url": url + "/v1",
            "api_key_env": "TD_TEST_API_KEY",
            "strict_schema": False,
            "timeout_s": 120,
        },
        "pipeline": STUDENT_CORE,
    }
    config_path = tmp_path / "teacher.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return config_path, data_dir


@pytest.mark.slow
def test_sigkill_resume_repeats_no_finished_call_and_the_key_is_never_written(tiny_server, tiny_dialogues, tmp_path):
    import os
    import secrets
    import signal
    import subprocess
    import time

    from distill.serving.serve import prompt_digest

    secret = "sk-" + secrets.token_hex(16)
    env = {**os.environ, "TD_TEST_API_KEY": secret}
    config_path, data_dir = _write_generate_inputs(tmp_path, tiny_dialogues, tiny_server.url)
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "distill",
        "generate",
        "--config",
        str(config_path),
        "--dialogues",
        str(data_dir),
        "--split",
        "train",
        "--out",
        str(run_dir),
        "--chunk-size",
        "1",
    ]
    before = tiny_server.metrics()["by_prompt"]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            cmd, cwd=Path(__file__).resolve().parents[1], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        traces_file = run_dir / "traces.jsonl"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and first.poll() is None:
            if traces_file.exists() and traces_file.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
    finished = TraceStore(run_dir).read()[0]
    assert 2 <= len(finished) < len(tiny_dialogues), "the kill should land mid-run"
    mid = tiny_server.metrics()["by_prompt"]
    with open(tmp_path / "second.log", "w") as log:
        assert (
            subprocess.run(
                cmd, cwd=Path(__file__).resolve().parents[1], env=env, stdout=log, stderr=subprocess.STDOUT, timeout=900
            ).returncode
            == 0
        )
    after = tiny_server.metrics()["by_prompt"]
    traces, problems = TraceStore(run_dir).read()
    assert not problems and len(traces) == len(tiny_dialogues)
    model = _base_name(tiny_server.url)
    for trace in finished:
        for step in trace.steps:
            digest = prompt_digest(model, step.messages)
            assert mid.get(digest, 0) - before.get(digest, 0) == step.attempts  # sent once per attempt ...
            assert after.get(digest, 0) == mid.get(digest, 0)  # ... and never again after the restart
    # The key went to the server in a header and nowhere else: not in traces, run.json, logs or config.
    written = [p for p in tmp_path.rglob("*") if p.is_file()] + [tiny_server.log_path]
    assert any(p.name == "run.json" for p in written)
    for path in written:
        assert secret.encode() not in path.read_bytes(), f"API key leaked into {path}"


@pytest.mark.slow
def test_generate_cli_max_cost_stops_cleanly(tiny_server, tiny_dialogues, tmp_path, capsys):
    import yaml

    from distill.__main__ import main

    config_path, data_dir = _write_generate_inputs(tmp_path, tiny_dialogues[:2], tiny_server.url)
    config = yaml.safe_load(config_path.read_text())
    config["backend"]["prices"] = {
        config["backend"]["model"]: {"input": 1000.0, "output": 1000.0}
    }  # as if it were paid
    config_path.write_text(yaml.safe_dump(config))
    before = tiny_server.metrics()["requests"]
    code = main(
        [
            "generate",
            "--config",
            str(config_path),
            "--dialogues",
            str(data_dir),
            "--split",
            "train",
            "--out",
            str(tmp_path / "run"),
            "--max-cost",
            "0.01",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3 and "--max-cost $0.0100" in err
    assert "cost estimate: about $" in err and "above --max-cost $0.01, so the run will stop early" in err
    assert tiny_server.metrics()["requests"] == before and not TraceStore(tmp_path / "run").read()[0]

    config["backend"]["prices"] = {config["backend"]["model"]: {"input": 2.5, "output": 10.0}}
    config_path.write_text(yaml.safe_dump(config))
    args = ["generate", "--config", str(config_path), "--dialogues", str(data_dir), "--out", str(tmp_path / "run")]
    assert main([*args, "--split", "train", "--max-cost", "5"]) == 0
    err = capsys.readouterr().err
    assert "cost estimate: about $0.0" in err and "above" not in err
    spent = [float(x) for x in re.findall(r"spent=\$(\d+\.\d+)", err)]
    assert spent and spent[-1] > 0  # the bar shows the running spend, read from the run's cost guard


def test_worst_case_cost_and_prompt_estimate_by_hand():
    from distill.backends.pricing import estimate_prompt_tokens, worst_case_cost

    assert estimate_prompt_tokens([{"role": "system", "content": "a" * 40}, {"role": "user", "content": "b" * 8}]) == 20
    assert worst_case_cost("gpt-4o", [(1000, 100), (2000, 200)]) == pytest.approx((3000 * 2.5 + 300 * 10) / 1e6)
    assert worst_case_cost("gpt-4o", [(1000, 100), (2000, 200)], batch=True) == pytest.approx(0.00525)


def test_credentials_in_base_url_never_reach_the_run_description():
    url = "https://alice:sk-secret@proxy.example.com:8443/v1?api_key=sk-query"
    desc = OpenAIBackend(model="gpt-4o", base_url=url, api_key_env="TD_NO_SUCH_KEY_SET").describe()
    assert desc["base_url"] == "https://<redacted>@proxy.example.com:8443/v1?api_key=<redacted>"
    assert "sk-" not in json.dumps(desc) and "alice" not in json.dumps(desc)


def test_max_cost_needs_a_price_for_the_model():
    from distill.backends.pricing import CostGuard, price_table

    with pytest.raises(ValueError, match="no price is known for model 'o3-mini'"):
        OpenAIBackend(model="o3-mini", cost_guard=CostGuard(max_cost=5.0))
    priced = CostGuard(max_cost=5.0, table=price_table({"o3-mini": {"input": 1.1, "output": 4.4}}))
    backend = OpenAIBackend(model="o3-mini", cost_guard=priced)
    assert backend.cost_guard.reserve("o3-mini", 1_000_000, 0) and priced.spent == pytest.approx(1.1)
    assert OpenAIBackend(model="o3-mini").cost_guard.max_cost is None  # no cap: unpriced is fine (reports say $0)


def test_json_object_schema_sends_the_full_schema_in_json_mode():
    """llama.cpp's servers (configs/teacher/llamacpp.yaml): JSON mode with the schema, which they enforce by
    grammar; maxLength and the label enum survive (no strict-mode copy)."""
    backend = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", response_format="json_object_schema")
    req = GenerationRequest(messages=[{"role": "user", "content": "hi"}], schema=ASIOutput, max_new_tokens=8)
    sent = backend.request_body(req)["response_format"]
    assert sent["type"] == "json_object" and "json_schema" not in sent
    assert sent["schema"]["properties"]["emotion"] == ASIOutput.model_json_schema()["properties"]["emotion"]
    assert sent["schema"]["properties"]["reasoning"]["maxLength"] == 240


def test_generate_exits_1_when_every_dialogue_fails_on_transport(tiny_dialogues, tmp_path, capsys, monkeypatch):
    import socket

    import yaml

    from distill.__main__ import main

    with socket.socket() as sock:  # a port nothing listens on: every request is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config_path, data_dir = _write_generate_inputs(tmp_path, tiny_dialogues[:2], url, model="gpt-4o-mini")
    config = yaml.safe_load(config_path.read_text())
    config["backend"].update(max_retries=1, backoff_base_s=0.01, backoff_max_s=0.01)
    config_path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("TD_TEST_API_KEY", "sk-test")
    args = ["generate", "--config", str(config_path), "--dialogues", str(data_dir), "--split", "train"]
    code = main([*args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1, err[-2000:]
    assert "every trace of this run failed; the first:" in err
    assert len(TraceStore(tmp_path / "run").read()[0]) == 2  # the failures are still recorded, with reasons


def test_top_p_is_sent_below_1_and_min_p_only_when_set():
    backend = OpenAIBackend(model="gpt-4o", base_url="http://127.0.0.1:9/v1")
    m = [{"role": "user", "content": "hi"}]
    unset = backend.request_body(GenerationRequest(m, temperature=0.5))
    assert "top_p" not in unset and "min_p" not in unset  # the body every earlier run sent (and Batch API digests)
    cut = backend.request_body(GenerationRequest(m, temperature=0.5, top_p=0.9, min_p=0.05))
    assert (cut["top_p"], cut["min_p"]) == (0.9, 0.05)
    greedy = backend.request_body(GenerationRequest(m, top_p=0.9, min_p=0.05))
    assert "top_p" not in greedy and "min_p" not in greedy  # temperature 0 has nothing to cut
    # min_p is not one of the client's parameters: it travels in extra_body, which the client merges into the JSON
    assert client_arguments(cut)["extra_body"] == {"min_p": 0.05} and "min_p" not in client_arguments(cut)
    assert client_arguments(unset) == unset


def test_a_pipeline_with_typical_p_is_refused_on_an_api_backend():
    """vLLM would ignore typical_p and OpenAI refuse it mid-run, so the pipeline refuses it before any request."""
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline

    backend = OpenAIBackend(model="gpt-4o", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=r"typical_p \(ers\): the openai backend cannot sample it; the local one can"):
        Pipeline(PipelineConfig(typical_p={"ers": 0.9}), backend)
    Pipeline(PipelineConfig(typical_p={"ers": 1.0}), backend)  # 1 is off: nothing to refuse


@pytest.mark.slow
def test_top_p_and_min_p_reach_a_served_model(tiny_server):
    """The openai backend against `distill serve` (the module's tiny random model): a cut that leaves only the
    most likely token samples the greedy answer, so top_p and min_p (sent as extra_body) reached its sampler."""
    backend = _backend(tiny_server.url, max_retries=0)
    prompts = [[{"role": "user", "content": f"tell me about day {i}"}] for i in range(3)]

    def texts(**sampling):
        results = backend.generate([GenerationRequest(m, max_new_tokens=10, seed=3, **sampling) for m in prompts])
        assert not any(r.error for r in results), [r.error for r in results]
        return [r.text for r in results]

    greedy = texts()
    assert texts(temperature=1.0) != greedy
    assert texts(temperature=1.0, top_p=1e-6) == greedy
    assert texts(temperature=1.0, min_p=1 - 1e-6) == greedy
