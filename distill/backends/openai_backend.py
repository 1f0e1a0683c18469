"""The teacher over any OpenAI-compatible server: OpenAI itself, vLLM, Ollama or `distill serve`.

One `generate` call carries every request of a pipeline stage; they run concurrently on one event
loop under a concurrency bound and optional request/token rate limits. Transport failures (429,
5xx, timeouts, dropped connections, malformed or truncated bodies) are retried with exponential
backoff and jitter through tenacity, honouring `Retry-After`; every retry is counted and described
in the result so it shows up in the trace. A request that exhausts its retries comes back with
`error` set instead of raising, so the pipeline can record that dialogue as failed with a reason.

The API key is read from the environment variable named by `api_key_env` and is only ever handed
to the client: it is not a field of the config, so no dump, trace or `describe()` can contain it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Optional
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import openai
from aiolimiter import AsyncLimiter
from pydantic import BaseModel, ConfigDict, Field
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from distill.backends.base import GenerationRequest, GenerationResult, ProgressFn
from distill.backends.pricing import CostGuard, CostLimitReached, estimate_prompt_tokens, price_table

# Keywords OpenAI's strict structured outputs reject; a strict copy of a schema drops them
# (the pipeline still validates every answer against the full pydantic schema).
_STRICT_UNSUPPORTED = ("maxLength", "minLength", "default")
# Body fields outside OpenAI's chat API that vLLM's server (and `distill serve`) accept: the client takes
# them as `extra_body`. OpenAI's own API refuses them (GPT-4o answers min_p with a 400).
_EXTRA_BODY_FIELDS = ("min_p",)


class OpenAIBackendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="model id sent to the server and recorded in traces")
    base_url: Optional[str] = Field(None, description="server root ending in /v1; None = api.openai.com")
    api_key_env: str = Field("OPENAI_API_KEY", description="name of the env var holding the key (never the key)")
    max_concurrency: int = Field(16, ge=1, description="requests in flight at once")
    requests_per_minute: Optional[float] = Field(None, gt=0, description="request rate limit; null = none")
    tokens_per_minute: Optional[float] = Field(None, gt=0, description="prompt + max completion tokens per minute")
    timeout_s: float = Field(60.0, gt=0, description="per-request timeout")
    max_retries: int = Field(6, ge=0, description="transport retries per request before it is recorded as failed")
    backoff_base_s: float = Field(0.5, gt=0, description="first backoff; doubles per retry, with full jitter")
    backoff_max_s: float = Field(30.0, gt=0, description="the longest backoff between retries")
    model_per_role: bool = Field(False, description="send the role name as `model` (multi-LoRA servers, distill serve)")
    response_format: Literal["json_schema", "json_object", "json_object_schema", "none"] = Field(
        "json_schema",
        description="json_object_schema: JSON mode carrying the schema, which llama.cpp's servers (llama-server, "
        "llama-cpp-python) enforce by grammar; llama-cpp-python refuses json_schema",
    )
    strict_schema: bool = Field(
        True, description="OpenAI strict mode where the schema allows; off keeps maxLength etc. for local servers"
    )
    prices: dict[str, Any] = Field(
        default_factory=dict, description="USD per 1M tokens overrides: {model: {input, output}}"
    )


class TransportError(Exception):
    """A response we could not use (malformed or truncated body); retried like a 5xx."""


def _is_transient(exc: BaseException) -> bool:
    if isinstance(
        exc,
        (
            openai.APITimeoutError,
            openai.APIConnectionError,
            TransportError,
            openai.APIResponseValidationError,
            json.JSONDecodeError,
        ),
    ):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


def _retry_after(exc: BaseException) -> Optional[float]:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP-date Retry-After: fall back to our own backoff


def _describe_exc(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        return str(exc.status_code)
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection error"
    return "malformed response"


def redact_url(url: Optional[str]) -> Optional[str]:
    """`url` without credentials: user:password@ and query values (an `?api_key=` would otherwise land in
    run.json and on dataset cards)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = ("<redacted>@" if parts.username or parts.password else "") + host
    netloc += f":{parts.port}" if parts.port else ""
    query = "&".join(f"{k}=<redacted>" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def schema_for_api(schema: type[BaseModel], strict: bool) -> tuple[dict[str, Any], bool]:
    """The `response_format.json_schema` body for a pydantic model, and whether strict mode holds."""
    full = schema.model_json_schema()
    if not strict:
        return full, False
    stripped = copy.deepcopy(full)
    ok = True

    def visit(node: Any) -> None:
        nonlocal ok
        if isinstance(node, dict):
            for key in _STRICT_UNSUPPORTED:
                node.pop(key, None)
            if node.get("type") == "object" and "properties" in node:
                # Strict mode needs every property required and no extra keys.
                ok = (
                    ok
                    and set(node.get("required", [])) == set(node["properties"])
                    and node.get("additionalProperties") is False
                )
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(stripped)
    return (stripped, True) if ok else (full, False)


class OpenAIBackend:
    name = "openai"

    def __init__(self, cost_guard: Optional[CostGuard] = None, **config: Any):
        self.config = OpenAIBackendConfig(**config)
        self.model = self.config.model
        self.cost_guard = cost_guard or CostGuard(table=price_table(self.config.prices))
        self.cost_guard.require_price(self.model)
        self._format = self.config.response_format  # may fall back to json_object once per instance

    def describe(self) -> dict[str, Any]:
        desc = self.config.model_dump(exclude={"prices"})
        desc.update(backend=self.name, response_format_used=self._format, base_url=redact_url(self.config.base_url))
        return desc

    # --- public, synchronous -------------------------------------------------------------------

    def generate(
        self, requests: Sequence[GenerationRequest], progress: Optional[ProgressFn] = None
    ) -> list[GenerationResult]:
        """Run one stage's requests concurrently; results come back in request order."""
        work = self._generate_all(list(requests), progress)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            results = asyncio.run(work)
        else:  # called from inside an event loop (a notebook, an async app): run ours on a thread
            with ThreadPoolExecutor(1) as pool:
                results = pool.submit(asyncio.run, work).result()
        if self.cost_guard.tripped:
            raise CostLimitReached(self.cost_guard.message())
        return results

    # --- async internals -----------------------------------------------------------------------

    def _client(self) -> openai.AsyncOpenAI:
        # A fresh client per event loop: httpx's async pool is bound to the loop that made it.
        key = os.environ.get(self.config.api_key_env)
        if not key and "api.openai.com" in (self.config.base_url or "api.openai.com"):
            raise ValueError(f"backend openai: set the environment variable {self.config.api_key_env} to your API key")
        key = key or "not-needed"  # self-hosted servers accept any key
        return openai.AsyncOpenAI(
            api_key=key, base_url=self.config.base_url, timeout=self.config.timeout_s, max_retries=0
        )  # tenacity owns retries so each one is counted

    async def _generate_all(
        self, requests: list[GenerationRequest], progress: Optional[ProgressFn]
    ) -> list[GenerationResult]:
        cfg = self.config
        gate = asyncio.Semaphore(cfg.max_concurrency)
        rpm = AsyncLimiter(cfg.requests_per_minute, 60) if cfg.requests_per_minute else None
        tpm = AsyncLimiter(cfg.tokens_per_minute, 60) if cfg.tokens_per_minute else None
        async with self._client() as client:

            async def one(req: GenerationRequest) -> GenerationResult:
                async with gate:
                    if rpm:
                        await rpm.acquire()
                    if tpm:
                        await tpm.acquire(min(_estimate_prompt_tokens(req) + req.max_new_tokens, cfg.tokens_per_minute))
                    result = await self._one(client, req)
                if progress:
                    progress(1)
                return result

            return list(await asyncio.gather(*(one(r) for r in requests)))

    async def _one(self, client: openai.AsyncOpenAI, req: GenerationRequest) -> GenerationResult:
        model = self.model_for(req)
        reserved = (_estimate_prompt_tokens(req), req.max_new_tokens)
        # Priced by the configured model: with model_per_role the `model` field is only a role name.
        if not self.cost_guard.reserve(self.model, *reserved):
            return GenerationResult(text="", error="not sent: --max-cost reached")
        events: list[str] = []
        started = time.perf_counter()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            before_sleep=lambda s: events.append(self._retry_note(s)),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    text, usage = await self._call(client, req, model, events)
        except Exception as exc:  # retries exhausted or a permanent 4xx: the pipeline records the failure
            self.cost_guard.settle(self.model, reserved, (0, 0))
            return GenerationResult(
                text="",
                latency_s=time.perf_counter() - started,
                events=events,
                transport_retries=_count_retries(events),
                error=f"{_describe_exc(exc)}: {exc}"[:300],
            )
        self.cost_guard.settle(self.model, reserved, usage)
        return GenerationResult(
            text=text,
            prompt_tokens=usage[0],
            completion_tokens=usage[1],
            latency_s=time.perf_counter() - started,
            events=events,
            transport_retries=_count_retries(events),
        )

    async def _call(
        self, client: openai.AsyncOpenAI, req: GenerationRequest, model: str, events: list[str]
    ) -> tuple[str, tuple[int, int]]:
        body = self.request_body(req, model)
        try:
            resp = await client.chat.completions.create(**client_arguments(body))
        except openai.APIStatusError as exc:
            sent_schema = (body.get("response_format") or {}).get("type") == "json_schema"
            if not sent_schema or "response_format" not in str(exc) or exc.status_code not in (400, 422, 500):
                raise
            # The server cannot do json_schema (older vLLM, some proxies; llama-cpp-python's server
            # answers its own request validation error with a 500): use JSON mode from now on; the
            # pipeline's schema validation and retries cover what JSON mode does not enforce.
            self._format = "json_object"
            events.append("json_schema rejected by server: falling back to json_object")
            resp = await client.chat.completions.create(**client_arguments(self.request_body(req, model)))
        if isinstance(resp, str) or not getattr(resp, "choices", None):
            raise TransportError("response has no choices")
        content = resp.choices[0].message.content
        if content is None:
            raise TransportError("response message has no content")
        usage = resp.usage
        return content, ((usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else (0, 0))

    def model_for(self, req: GenerationRequest) -> str:
        return req.adapter if (self.config.model_per_role and req.adapter) else self.model

    def request_body(self, req: GenerationRequest, model: Optional[str] = None) -> dict[str, Any]:
        """The chat.completions body for one request; the Batch API writes the same body per line.

        top_p is sent only when it cuts (below 1) and min_p only when set, so a request that uses neither
        sends the body it always did; greedy requests (temperature 0) send neither."""
        model = model or self.model_for(req)
        body: dict[str, Any] = {
            "model": model,
            "messages": req.messages,
            "temperature": req.temperature,
            "max_tokens": req.max_new_tokens,
        }
        if req.seed is not None:
            body["seed"] = req.seed
        top_p, min_p, _ = req.truncation()  # typical_p: refused by the pipeline, neither API has it
        if top_p < 1:
            body["top_p"] = top_p
        if min_p > 0:
            body["min_p"] = min_p  # vLLM's extension (`client_arguments` sends it as extra_body)
        if req.schema is not None and self._format == "json_schema":
            schema, strict = schema_for_api(req.schema, self.config.strict_schema)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": req.schema.__name__, "schema": schema, "strict": strict},
            }
        elif req.schema is not None and self._format == "json_object":
            body["response_format"] = {"type": "json_object"}
        elif req.schema is not None and self._format == "json_object_schema":
            body["response_format"] = {"type": "json_object", "schema": schema_for_api(req.schema, False)[0]}
        return body

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = _retry_after(exc) if exc else None
        if hinted is not None:
            return min(hinted, self.config.backoff_max_s)
        ceiling = min(self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (state.attempt_number - 1))
        return random.uniform(ceiling / 2, ceiling)  # jitter so concurrent retries do not arrive together

    def _retry_note(self, state: RetryCallState) -> str:
        exc = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        return f"{_describe_exc(exc)} retry in {delay:.2f}s" if exc else f"retry in {delay:.2f}s"


def client_arguments(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as keyword arguments of `chat.completions.create`: fields the client does not know go in
    `extra_body`, which it merges into the JSON it sends."""
    extra = {k: body[k] for k in _EXTRA_BODY_FIELDS if k in body}
    known = {k: v for k, v in body.items() if k not in extra}
    return {**known, "extra_body": extra} if extra else known


def _count_retries(events: list[str]) -> int:
    return sum(1 for e in events if " retry in " in e)


def _estimate_prompt_tokens(req: GenerationRequest) -> int:
    return estimate_prompt_tokens(req.messages)  # rate limits and the cost cap's reservation only
