"""Helpers for the transport tests (not a test module): a `distill serve` subprocess, a tiny random
model for fast servers (and a random LoRA adapter over it), and a seeded fault-injecting HTTP proxy.

It sits between the `openai` backend and a real `distill serve` and, for a fraction of requests,
answers with 429 + Retry-After or 500, stalls past the client's timeout, returns a malformed JSON
body, or cuts the body short of its Content-Length. It is a raw asyncio server so it can produce
the broken framing a framework would refuse to send. Every response closes its connection, which
keeps the parser tiny and is legal HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """`python -m distill serve` in a subprocess on a free 127.0.0.1 port; its log goes to `log_path`."""

    def __init__(self, model: str, log_path: Path, *extra: str, env: Optional[dict] = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        cmd = [sys.executable, "-m", "distill", "serve", "--model", model, "--port", str(self.port), *extra]
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, env=env or os.environ.copy()
        )

    def wait_ready(self, timeout: float = 300) -> ServeProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"distill serve exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"distill serve did not come up in {timeout}s: {self.log_path.read_text()[-2000:]}")

    def metrics(self) -> dict:
        return httpx.get(self.url + "/metrics", timeout=30).json()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def make_tiny_model(base_dir: str, out: Path) -> Path:
    """A 2-layer random model with the embedded model's tokenizer: fast, and JSON-valid under constraints."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg = AutoConfig.from_pretrained(base_dir)
    cfg.update(
        dict(
            num_hidden_layers=2,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
        )
    )
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    return out


def save_tiny_lora(model_dir: str | Path, out: Path, seed: int) -> Path:
    """A random LoRA adapter over `model_dir`, saved by plain PEFT: another `seed`, other weights (a retrain)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    lora = LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), lora).save_pretrained(out)
    return out


FAULTS = ("429", "500", "timeout", "malformed", "truncated")


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        fault_rate: float = 0.3,
        seed: int = 0,
        stall_s: float = 3.0,
        retry_after: str = "0.2",
        faults: tuple[str, ...] = FAULTS,
        reject_json_schema: bool = False,
        reject_status: int = 400,
    ):
        self.upstream = upstream.rstrip("/")
        self.fault_rate = fault_rate
        self.stall_s = stall_s
        self.retry_after = retry_after
        self.faults = faults
        self.reject_json_schema = reject_json_schema  # act like a server without structured outputs
        self.reject_status = reject_status  # llama-cpp-python's server answers its validation error with 500
        self.rng = random.Random(seed)
        self.injected: Counter = Counter()
        self.forwarded = 0
        self.port: Optional[int] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._ready = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._serve_forever, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve_forever(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient(timeout=300)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def _pick_fault(self, path: str) -> Optional[str]:
        if not path.endswith("/chat/completions") or self.rng.random() >= self.fault_rate:
            return None
        return self.rng.choice(self.faults)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
            body = await reader.readexactly(length) if length else b""
            await self._respond(writer, method, path, headers, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client gave up (e.g. its timeout fired while we stalled)
        finally:
            writer.close()

    async def _respond(self, writer, method: str, path: str, headers: dict, body: bytes) -> None:
        if self.reject_json_schema and b'"json_schema"' in body:
            self.injected["json_schema rejected"] += 1
            return await _write(
                writer,
                self.reject_status,
                json.dumps(
                    {"error": {"message": "response_format json_schema is not supported", "param": "response_format"}}
                ).encode(),
            )
        fault = self._pick_fault(path)
        if fault:
            self.injected[fault] += 1
        if fault == "429":
            return await _write(
                writer, 429, b'{"error": {"message": "rate limited"}}', {"Retry-After": self.retry_after}
            )
        if fault == "500":
            return await _write(writer, 500, b'{"error": {"message": "injected server error"}}')
        if fault == "timeout":
            await asyncio.sleep(self.stall_s)
            return
        forward = {k: v for k, v in headers.items() if k.lower() in ("content-type", "authorization")}
        upstream = await self._client.request(method, self.upstream + path, content=body, headers=forward)
        self.forwarded += 1
        payload = upstream.content
        if fault == "malformed":
            payload = payload[: len(payload) // 2] + b"}}garbage"
        if fault == "truncated":
            return await _write(
                writer, upstream.status_code, payload[: len(payload) // 2], declared_length=len(payload)
            )
        await _write(writer, upstream.status_code, payload)


async def _write(
    writer, status: int, payload: bytes, extra: Optional[dict] = None, declared_length: Optional[int] = None
) -> None:
    reason = {
        200: "OK",
        400: "Bad Request",
        404: "Not Found",
        429: "Too Many Requests",
        500: "Internal Server Error",
    }.get(status, "Status")
    head = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: application/json",
        f"Content-Length: {declared_length if declared_length is not None else len(payload)}",
        "Connection: close",
    ]
    head += [f"{k}: {v}" for k, v in (extra or {}).items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
    await writer.drain()
