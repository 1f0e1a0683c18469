"""`distill serve` under abuse: poisoned requests in a batch, huge bodies, bad text, unsupported fields,
API keys, and a few hundred randomly mutated requests. A tiny random model keeps it fast; the server
runs over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fault_proxy import ServeProcess, make_tiny_model

pytestmark = pytest.mark.slow

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 2**20
REQUEST_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def server(smollm_path, tmp_path_factory):
    model = make_tiny_model(smollm_path, tmp_path_factory.mktemp("tiny") / "model")
    env = {**os.environ, "SERVE_TEST_KEY": KEY}
    proc = ServeProcess(
        str(model),
        tmp_path_factory.mktemp("serve") / "serve.log",
        "--api-key-env",
        "SERVE_TEST_KEY",
        "--max-body-bytes",
        str(MAX_BODY),
        "--max-new-tokens",
        "16",
        "--max-input-tokens",
        "256",
        "--request-timeout",
        str(REQUEST_TIMEOUT_S),
        env=env,
    )
    try:
        yield proc.wait_ready(), str(model)
    finally:
        proc.stop()


def _body(model: str, **overrides) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "I lost my keys today."}], "max_tokens": 4}
    body.update(overrides)
    return body


def _post(url: str, body: dict, headers=AUTH) -> httpx.Response:
    # json.dumps escapes a lone surrogate as \\ud800, which a client library's UTF-8 encoder would refuse
    raw = json.dumps(body).encode()
    headers = {**headers, "content-type": "application/json"}
    return httpx.post(url + "/v1/chat/completions", content=raw, headers=headers, timeout=120)


def test_a_poisoned_request_never_fails_its_batch(server):
    proc, model = server
    bodies = [_body(model, seed=i) for i in range(5)] + [_body(model, seed=2**64)]
    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(lambda b: _post(proc.url, b), bodies))
    assert [r.status_code for r in replies] == [200] * 5 + [400], [r.text for r in replies]
    assert "seed" in replies[-1].json()["error"]["message"]
    assert _post(proc.url, _body(model, seed=2**63 - 1)).status_code == 200  # the largest seed decodes


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ({"messages": [{"role": "user", "content": "\ud800"}]}, "surrogate"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "'tools' is not supported"),
        ({"tool_choice": "auto"}, "'tool_choice' is not supported"),
        ({"stop": ["\n"]}, "'stop' is not supported"),
        ({"logprobs": True}, "'logprobs' is not supported"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": 1}, "min_p"),
        ({"seed": -1}, "seed"),
    ],
)
def test_unsupported_or_malformed_fields_get_400(server, overrides, needle):
    proc, model = server
    reply = _post(proc.url, _body(model, **overrides))
    assert reply.status_code == 400, reply.text
    assert needle in reply.json()["error"]["message"]


def test_api_key_is_required_except_for_health(server):
    proc, model = server
    assert _post(proc.url, _body(model), headers={}).status_code == 401
    wrong = _post(proc.url, _body(model), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    assert httpx.get(proc.url + "/v1/models", timeout=30).status_code == 401
    assert httpx.get(proc.url + "/health", timeout=30).status_code == 200
    assert _post(proc.url, _body(model)).status_code == 200
    for scheme in ("bearer", "BEARER"):  # the scheme is case-insensitive; the key is not
        assert _post(proc.url, _body(model), headers={"Authorization": f"{scheme} {KEY}"}).status_code == 200
    assert _post(proc.url, _body(model), headers={"Authorization": f"Bearer {KEY.upper()}"}).status_code == 401


def _stalled_connections(port: int) -> dict[str, socket.socket]:
    """One connection that sends nothing, one that sends its headers a byte at a time (slow loris), one
    that sends its headers and half its body."""
    socks = {name: socket.create_connection(("127.0.0.1", port)) for name in ("silent", "loris", "half_body")}
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    socks["half_body"].sendall(f"{head}Content-Length: 100\r\n\r\n{{".encode())
    return socks


def test_stalled_connections_are_closed_after_the_timeout_while_health_stays_fast(server):
    proc, _ = server
    socks = _stalled_connections(proc.port)
    start, received, closed_after, health_s = time.monotonic(), {n: b"" for n in socks}, {}, []
    loris_bytes = iter(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000)
    while len(closed_after) < len(socks) and time.monotonic() - start < 4 * REQUEST_TIMEOUT_S:
        if "loris" not in closed_after:
            try:
                socks["loris"].send(bytes([next(loris_bytes)]))
            except OSError:
                pass  # closed by the server; the read below records when
        readable, _, _ = select.select([s for n, s in socks.items() if n not in closed_after], [], [], 0.1)
        for name, sock in socks.items():
            if sock in readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                received[name] += data
                if not data:
                    closed_after[name] = time.monotonic() - start
        began = time.perf_counter()
        assert httpx.get(proc.url + "/health", timeout=5).status_code == 200
        health_s.append(time.perf_counter() - began)
    for sock in socks.values():
        sock.close()
    assert set(closed_after) == set(socks), f"still open after {4 * REQUEST_TIMEOUT_S} s: {closed_after}"
    assert all(REQUEST_TIMEOUT_S - 0.5 < t < 2 * REQUEST_TIMEOUT_S for t in closed_after.values()), closed_after
    assert received["silent"] == received["loris"] == b""  # closed without a reply: no request ever arrived
    assert received["half_body"].startswith(b"HTTP/1.1 408") and b"--request-timeout" in received["half_body"]
    # /health never waited on them: typically milliseconds; the max allows for a CPU shared with other jobs
    assert sorted(health_s)[len(health_s) // 2] < 0.5 and max(health_s) < REQUEST_TIMEOUT_S, health_s


def test_huge_body_is_refused_while_health_stays_fast(server):
    proc, model = server
    huge = json.dumps(_body(model, messages=[{"role": "user", "content": "x" * (30 * 2**20)}])).encode()
    result: dict = {}

    def send_huge():
        headers = {**AUTH, "content-type": "application/json"}
        result["reply"] = httpx.post(proc.url + "/v1/chat/completions", content=huge, headers=headers, timeout=120)

    sender = threading.Thread(target=send_huge)
    sender.start()
    slowest = 0.0
    while sender.is_alive():
        started = time.perf_counter()
        assert httpx.get(proc.url + "/health", timeout=5).status_code == 200
        slowest = max(slowest, time.perf_counter() - started)
        time.sleep(0.05)
    sender.join()
    assert result["reply"].status_code == 413 and "--max-body-bytes" in result["reply"].text
    assert slowest < 1.0
    # a chunked upload declares no length: it is cut off at the limit too
    chunks = (b"x" * 2**16 for _ in range(64))
    reply = httpx.post(proc.url + "/v1/chat/completions", content=chunks, headers=AUTH, timeout=120)
    assert reply.status_code == 413


FUZZ_FIELDS = (
    "model", "messages", "temperature", "max_tokens", "seed", "n", "stream", "response_format", "top_p", "tools",
    "stop", "msg.role", "msg.content", "drop",
)  # fmt: skip


def _mutate(rng: random.Random, body: dict) -> dict:
    body = copy.deepcopy(body)
    junk = [None, -1, 0, 2**70, 1.5, "", "x" * 50, [], {}, True, "\ud800", {"a": [1]}, "asi"]
    for _ in range(rng.randint(1, 3)):
        field = rng.choice(FUZZ_FIELDS)
        if field == "drop":
            body.pop(rng.choice(list(body) or ["model"]), None)
        elif field.startswith("msg.") and isinstance(body.get("messages"), list) and body["messages"]:
            body["messages"][0][field[4:]] = rng.choice(junk)
        else:
            body[field] = rng.choice(junk)
    return body


def test_fuzzed_requests_get_2xx_or_4xx_and_the_server_stays_up(server):
    proc, model = server
    rng = random.Random(0)
    base = _body(model, temperature=0)
    bodies = [_mutate(rng, base) for _ in range(300)]

    async def fire():
        async with httpx.AsyncClient(timeout=120) as client:
            limit = asyncio.Semaphore(8)

            async def one(body):
                async with limit:
                    raw = json.dumps(body).encode()
                    headers = {**AUTH, "content-type": "application/json"}
                    return await client.post(proc.url + "/v1/chat/completions", content=raw, headers=headers)

            return await asyncio.gather(*(one(b) for b in bodies))

    replies = asyncio.run(fire())
    statuses = [r.status_code for r in replies]
    assert all(200 <= s < 500 for s in statuses), sorted(set(statuses))
    assert any(s == 200 for s in statuses) and any(400 <= s < 500 for s in statuses)
    assert httpx.get(proc.url + "/health", timeout=10).json()["status"] == "ok"
