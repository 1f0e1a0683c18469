"""`distill serve` over real HTTP on 127.0.0.1 with the embedded model: answers, batching, 4xx on bad input."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fault_proxy import ServeProcess

from data_prep.taxonomy import EKMAN
from distill.roles.roles import ROLES, RoleInput

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(smollm_path, tmp_path_factory):
    proc = ServeProcess(
        "smollm2-135m",
        tmp_path_factory.mktemp("serve") / "serve.log",
        "--max-batch",
        "8",
        "--max-input-tokens",
        "400",
        "--max-new-tokens",
        "128",
    )
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


# The emotion alone: a few tokens, so the real model answers quickly even on a busy CPU.
EMOTION_ONLY = {
    "type": "object",
    "properties": {"emotion": {"type": "string", "enum": list(EKMAN)}},
    "required": ["emotion"],
    "additionalProperties": False,
}


def _asi_body(dialogue, **overrides):
    body = {
        "model": "smollm2-135m",
        "messages": ROLES["asi"].render(RoleInput(dialogue=dialogue), "student"),
        "temperature": 0,
        "max_tokens": 16,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "Emotion", "schema": EMOTION_ONLY, "strict": True},
        },
    }
    body.update(overrides)
    return body


def test_models_and_health(server):
    models = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["smollm2-135m"]
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_concurrent_json_schema_requests_are_batched_and_valid(server, tiny_dialogues):
    before = server.metrics()
    bodies = [_asi_body(d) for d in tiny_dialogues[:4]]
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda b: httpx.post(server.url + "/v1/chat/completions", json=b, timeout=600), bodies))
    for reply in replies:
        assert reply.status_code == 200, reply.text
        data = reply.json()
        assert data["choices"][0]["finish_reason"] == "stop"
        assert json.loads(data["choices"][0]["message"]["content"])["emotion"] in EKMAN  # constrained decoding held
        assert data["usage"]["prompt_tokens"] > 10 and data["usage"]["completion_tokens"] > 0
    after = server.metrics()
    assert after["by_model"]["smollm2-135m"] - before["by_model"].get("smollm2-135m", 0) == 4
    assert after["batches"] - before["batches"] < 4, "concurrent requests should share generate calls"


BAD_REQUESTS = {
    "unknown model": (lambda d: _asi_body(d, model="no-such-role"), 404, "does not exist"),
    "invalid schema": (
        lambda d: _asi_body(
            d,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "X", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}},
            },
        ),
        400,
        "JSON schema",
    ),
    "schema not an object": (
        lambda d: _asi_body(d, response_format={"type": "json_schema", "json_schema": {"schema": 3}}),
        400,
        "must be a JSON object",
    ),
    "unknown response_format": (lambda d: _asi_body(d, response_format={"type": "yaml"}), 400, "not supported"),
    "oversized input": (
        lambda d: _asi_body(d, messages=[{"role": "user", "content": "word " * 2000}]),
        400,
        "max-input-tokens",
    ),
    "no messages": (lambda d: _asi_body(d, messages=[]), 400, "messages"),
    "bad role": (lambda d: _asi_body(d, messages=[{"role": "robot", "content": "hi"}]), 400, "messages"),
    "streaming": (lambda d: _asi_body(d, stream=True), 400, "stream"),
    "n > 1": (lambda d: _asi_body(d, n=3), 400, "n"),
    "max_tokens too large": (lambda d: _asi_body(d, max_tokens=100000), 400, "max_tokens"),
    "negative temperature": (lambda d: _asi_body(d, temperature=-1), 400, "temperature"),
}


def test_bad_requests_get_4xx_and_the_server_stays_up(server, tiny_dialogues):
    d = tiny_dialogues[0]
    for name, (make, status, needle) in BAD_REQUESTS.items():
        reply = httpx.post(server.url + "/v1/chat/completions", json=make(d), timeout=60)
        assert reply.status_code == status, f"{name}: {reply.status_code} {reply.text}"
        assert needle in reply.json()["error"]["message"], f"{name}: {reply.text}"
    for raw in (b"{not json", b"[]", b""):
        reply = httpx.post(
            server.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}, timeout=60
        )
        assert 400 <= reply.status_code < 500, f"{raw!r}: {reply.status_code} {reply.text}"
        assert reply.json()["error"]["message"]
    assert server.metrics()["bad_requests"] >= len(BAD_REQUESTS) + 3
    # Still serving: a good request after all of that succeeds.
    good = httpx.post(
        server.url + "/v1/chat/completions", json=_asi_body(d, max_tokens=8, response_format=None), timeout=600
    )
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] > 0


def test_model_field_routes_to_role_adapters(smollm_path, tmp_path):
    """vLLM-style multi-LoRA: `model: asi` runs the asi adapter, the base name runs the bare model."""
    from fault_proxy import make_tiny_model
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = make_tiny_model(smollm_path, tmp_path / "tiny")
    for role in ("asi", "ers"):
        lora = get_peft_model(
            AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
        )
        lora.save_pretrained(tmp_path / "adapters" / role)
    proc = ServeProcess(str(base), tmp_path / "serve.log", "--adapters", str(tmp_path / "adapters")).wait_ready()
    try:
        names = [m["id"] for m in httpx.get(proc.url + "/v1/models").json()["data"]]
        assert names == [str(base), "asi", "ers"]
        for model in ("asi", "ers", str(base)):
            body = {
                "model": model,
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 3,
                "temperature": 0,
            }
            reply = httpx.post(proc.url + "/v1/chat/completions", json=body, timeout=600)
            assert reply.status_code == 200 and reply.json()["model"] == model
        reply = httpx.post(proc.url + "/v1/chat/completions", json={**body, "model": "cae"}, timeout=60)
        assert reply.status_code == 404 and "asi, ers" in reply.json()["error"]["message"]
        assert proc.metrics()["by_model"] == {"asi": 1, "ers": 1, str(base): 1}
    finally:
        proc.stop()


def test_shipped_student_openai_config_runs_against_distill_serve(smollm_path, tmp_path, tiny_dialogues):
    """configs/eval/student-openai.yaml's student, pointed at `distill serve --adapters`: every stage goes out
    under its role's name, gets its adapter, and parses (vLLM multi-LoRA is the same API)."""
    import yaml
    from fault_proxy import make_tiny_model
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from distill.backends.openai_backend import OpenAIBackend
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline
    from eval.compare.compare import load_config

    base = make_tiny_model(smollm_path, tmp_path / "tiny")
    roles = ("asi", "cae", "srp", "ers")
    for role in roles:
        lora = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"]))
        lora.save_pretrained(tmp_path / "adapters" / role)
    config_path = Path(__file__).resolve().parents[1] / "configs" / "eval" / "student-openai.yaml"
    load_config(str(config_path))  # the shipped file as eval compare reads it
    student = next(s for s in yaml.safe_load(config_path.read_text())["systems"] if s["name"] == "student-api")
    proc = ServeProcess(str(base), tmp_path / "serve.log", "--adapters", str(tmp_path / "adapters")).wait_ready()
    try:
        options = {k: v for k, v in student["backend"].items() if k != "type"}
        backend = OpenAIBackend(**{**options, "base_url": proc.url + "/v1", "timeout_s": 600})
        pipeline_cfg = PipelineConfig(**{**student["pipeline"], "rag": False})
        traces = Pipeline(pipeline_cfg, backend).run(tiny_dialogues[:2], progress=False)
        assert all(s.parsed is not None for t in traces for s in t.steps), [s.error for t in traces for s in t.steps]
        # one request per attempt: a step whose random-model answer fails its check is retried (once in a full CI
        # run, cae asked 3 times for 2 dialogues), and every retry goes out under its role's name too
        spent = {role: sum(s.attempts for t in traces for s in t.steps if s.role == role) for role in roles}
        assert proc.metrics()["by_model"] == spent and all(n >= 2 for n in spent.values()), spent
    finally:
        proc.stop()
