"""`python -m distill serve`: an OpenAI-compatible server over the local backend and role adapters.

    python -m distill serve --model smollm2-135m --adapters runs/adapters --port 8000

`POST /v1/chat/completions` answers like OpenAI's endpoint; its `model` field picks a role adapter
(`asi`, `cae`, …) or the base model (its alias, path or id), as vLLM multi-LoRA does, so the
`openai` backend with `model_per_role: true` runs the student pipeline against it.
`response_format: json_schema` goes through the same llguidance constrained decoding as the local
backend, and `temperature`, `top_p`, `min_p` (vLLM's extension) and `typical_p` through its sampler. This server's
extension `label_decoding: rank | rank-calibrated` (with `label_field` where the schema has several enum fields)
picks that label by ranking every value (distill.backends.label_rank); `--label-decoding` sets it for every
json_schema request with one label field. `GET /v1/models`
lists the base and each adapter, `GET /health` says it is up, and `GET /metrics` counts calls per model
and per prompt (tests use it to prove a resumed run repeats nothing). Bad requests get a 4xx with an
OpenAI-style error body, never a 500.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from distill.backends.base import GenerationRequest, LabelRanking
from distill.backends.label_rank import CONTENT_FREE, label_slot
from distill.serving.serve_batcher import RequestBatcher
from distill.serving.serve_guard import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT_S, ServeGuard

# Fields of OpenAI's chat API that would change the answer and that this server does not implement: a
# request that sets one is refused, as OpenAI refuses what a model cannot do, never silently ignored.
UNSUPPORTED_FIELDS = (
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "logprobs", "top_logprobs",
    "logit_bias", "stop", "audio", "modalities", "prediction",
)  # fmt: skip
SEED_MAX = 2**63 - 1  # the decoder seeds a torch.Generator, which takes a signed 64-bit value


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str

    @field_validator("content")
    @classmethod
    def _encodable(cls, text: str) -> str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(f"not valid Unicode text: lone surrogate at character {err.start}") from None
        return text


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send many optional OpenAI fields we can ignore

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0, description="nucleus sampling; null = 1 (off)")
    min_p: Optional[float] = Field(None, ge=0.0, lt=1.0, description="min-p sampling, as vLLM's; null = 0 (off)")
    typical_p: Optional[float] = Field(
        None, gt=0.0, le=1.0, description="locally typical sampling, as transformers' and llama.cpp's; null = 1 (off)"
    )
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    seed: Optional[int] = Field(None, ge=0, le=SEED_MAX)
    n: int = Field(1, ge=1, le=1, description="one choice per request")
    stream: Literal[False] = False
    response_format: Optional[dict[str, Any]] = None
    label_decoding: Optional[Literal["generate", "rank", "rank-calibrated"]] = Field(
        None, description="rank: the json_schema's label (enum) field by ranking its values; null = the server's"
    )
    label_field: Optional[str] = Field(None, description="the enum field label_decoding ranks; null = the one there is")

    @model_validator(mode="before")
    @classmethod
    def _refuse_unsupported(cls, data: Any) -> Any:
        if isinstance(data, dict):
            used = [name for name in UNSUPPORTED_FIELDS if data.get(name) not in (None, False, [], {})]
            if used:
                raise ValueError(f"'{used[0]}' is not supported by this server")
        return data


class BadRequest(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def prompt_digest(model: str, messages: list[dict[str, str]]) -> str:
    """Stable id of one call (model + messages), as counted in /metrics `by_prompt`."""
    payload = json.dumps({"model": model, "messages": messages}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


_SCHEMA_CLASSES: dict[str, type[BaseModel]] = {}


def schema_model(name: str, schema: dict[str, Any]) -> type[BaseModel]:
    """A pydantic class that reports `schema` as its JSON schema, for backends that compile `request.schema`.

    One class per distinct schema, so the local backend's per-class grammar cache compiles each once.
    """
    key = json.dumps([name, schema], sort_keys=True)
    if key not in _SCHEMA_CLASSES:
        if len(_SCHEMA_CLASSES) > 256:  # clients sending ever-new schemas must not grow memory forever
            _SCHEMA_CLASSES.clear()
        # A distinct qualname per schema: the local backend groups requests by it.
        unique = f"{name}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        _SCHEMA_CLASSES[key] = type(
            unique, (BaseModel,), {"model_json_schema": classmethod(lambda cls, *a, **k: schema)}
        )
    return _SCHEMA_CLASSES[key]


def _json_schema(response_format: Optional[dict[str, Any]]) -> Optional[tuple[str, dict[str, Any]]]:
    if not response_format or response_format.get("type") in (None, "text"):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return "json_object", {"type": "object"}
    if kind != "json_schema":
        raise BadRequest(
            400, f"response_format.type '{kind}' is not supported (text, json_object, json_schema)", "response_format"
        )
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise BadRequest(400, "response_format.json_schema.schema must be a JSON object", "response_format")
    try:
        from distill.backends.constrained import json_schema_grammar

        json_schema_grammar(spec["schema"])  # cheap: no tokenizer needed
    except Exception as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise BadRequest(
            400, f"response_format.json_schema.schema is not a usable JSON schema: {reason}", "response_format"
        ) from None
    return str(spec.get("name") or "Output"), spec["schema"]


class ServeState:
    """What the handlers need: the backend, its model names and the input-size limit."""

    def __init__(
        self,
        backend: Any,
        base_names: list[str],
        max_input_tokens: int,
        max_new_tokens_cap: int,
        label_decoding: str = "generate",
    ):
        self.backend = backend
        self.label_decoding = label_decoding  # what a json_schema request with one label field gets by default
        self.base_names = [n for n in dict.fromkeys(base_names) if n]
        self.adapters = list(getattr(backend, "adapter_names", []) or [])
        self.max_input_tokens = max_input_tokens
        self.max_new_tokens_cap = max_new_tokens_cap

    def resolve_adapter(self, model: str) -> Optional[str]:
        if model in self.adapters:
            return model
        if model in self.base_names:
            return None
        known = ", ".join(self.base_names[:1] + self.adapters)
        raise BadRequest(
            404, f"model '{model}' does not exist on this server (known: {known})", "model", "model_not_found"
        )

    def count_prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        # Rendered the way the local backend renders it: the template writes its own special tokens.
        tok = self.backend.tokenizer
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(tok(text, add_special_tokens=False)["input_ids"])

    def to_generation_request(self, body: ChatRequest) -> GenerationRequest:
        adapter = self.resolve_adapter(body.model)
        messages = [m.model_dump() for m in body.messages]
        n_prompt = self.count_prompt_tokens(messages)
        if n_prompt > self.max_input_tokens:
            raise BadRequest(
                400,
                f"input is {n_prompt} tokens, over this server's --max-input-tokens {self.max_input_tokens}",
                "messages",
                "context_length_exceeded",
            )
        max_new = body.max_completion_tokens or body.max_tokens or 256
        if max_new > self.max_new_tokens_cap:
            raise BadRequest(
                400, f"max_tokens {max_new} is over this server's limit {self.max_new_tokens_cap}", "max_tokens"
            )
        schema = _json_schema(body.response_format)
        return GenerationRequest(
            messages=messages,
            temperature=body.temperature,
            max_new_tokens=max_new,
            adapter=adapter,
            seed=body.seed,
            top_p=1.0 if body.top_p is None else body.top_p,
            min_p=0.0 if body.min_p is None else body.min_p,
            typical_p=1.0 if body.typical_p is None else body.typical_p,
            schema=schema_model(*schema) if schema else None,
            label_ranking=self.label_ranking(body, schema, messages),
        )

    def label_ranking(
        self, body: ChatRequest, schema: Optional[tuple[str, dict[str, Any]]], messages: list[dict[str, str]]
    ) -> Optional[LabelRanking]:
        """The request's label ranking: its own `label_decoding`, else the server's where the schema has one label
        field. A request that asks for ranking it cannot have gets a 400; the server's default just does not apply."""
        mode = body.label_decoding or self.label_decoding
        if mode == "generate":
            return None
        asked = body.label_decoding is not None
        if schema is None:
            if asked:
                raise BadRequest(400, "label_decoding needs response_format json_schema with a label (enum) field")
            return None
        try:
            field = label_slot(schema[1], body.label_field).field
        except ValueError as exc:
            if asked:
                raise BadRequest(400, str(exc), "label_field" if body.label_field else "label_decoding") from None
            return None
        if not getattr(self.backend, "ranks_labels", False):
            raise BadRequest(400, "label_decoding: this server's backend cannot rank labels", "label_decoding")
        # Zhao et al.'s content-free input: the same messages, what the user says replaced by "N/A"
        free = [{**m, "content": CONTENT_FREE} if m["role"] == "user" else m for m in messages]
        calibrated = mode == "rank-calibrated"
        return LabelRanking(field, calibrated=calibrated, content_free=free if calibrated else None)


def create_app(
    backend: Any,
    base_names: list[str],
    max_batch: int = 16,
    max_input_tokens: int = 2048,
    max_new_tokens_cap: int = 1024,
    batch_window_ms: float = 10.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    api_key: Optional[str] = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    label_decoding: str = "generate",
):
    """The FastAPI app; `backend` is a LocalBackend (or anything with generate/tokenizer/adapter_names).

    With `api_key`, every route but /health needs `Authorization: Bearer <api_key>`. `label_decoding` (generate,
    rank, rank-calibrated) is what a json_schema request with one label field gets when it does not say."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    state = ServeState(backend, base_names, max_input_tokens, max_new_tokens_cap, label_decoding)
    batcher = RequestBatcher(backend, max_batch=max_batch, window_s=batch_window_ms / 1000)
    counters = {"bad_requests": 0}

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="trace-distill serve", lifespan=lifespan)
    app.add_middleware(ServeGuard, max_body_bytes=max_body_bytes, api_key=api_key, request_timeout_s=request_timeout_s)

    def error(status: int, message: str, param: Optional[str] = None, code: Optional[str] = None) -> JSONResponse:
        counters["bad_requests"] += status < 500
        kind = "invalid_request_error" if status < 500 else "server_error"
        return JSONResponse(
            {"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status
        )

    _add_error_handlers(app, error)
    _add_routes(app, state, batcher, counters, error)
    app.state.batcher = batcher
    return app


def _add_error_handlers(app, error) -> None:
    """Every client mistake becomes a 4xx with an OpenAI-style error body, never a 500."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return error(400, f"invalid request: {where}: {first.get('msg', 'malformed body')}", where)

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, exc: BadRequest):
        return error(exc.status, exc.message, exc.param, exc.code)


def _add_routes(app, state: ServeState, batcher: RequestBatcher, counters: dict, error) -> None:
    @app.get("/health")
    async def health():
        return {"status": "ok", "requests": batcher.stats.requests, "bad_requests": counters["bad_requests"]}

    @app.get("/metrics")
    async def metrics():
        return {**batcher.stats.as_dict(), "bad_requests": counters["bad_requests"]}

    @app.get("/v1/models")
    async def models():
        names = state.base_names[:1] + state.adapters
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "created": 0, "owned_by": "trace-distill"} for n in names],
        }

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest):
        # tokenizing a long prompt takes a while: off the event loop, so other clients are not held up
        request = await asyncio.to_thread(state.to_generation_request, body)
        batcher.stats.by_model[body.model] += 1
        batcher.stats.by_prompt[prompt_digest(body.model, request.messages)] += 1
        try:
            result = await batcher.submit(request)
        except Exception as exc:
            return error(500, f"generation failed: {type(exc).__name__}: {exc}")
        finish = "length" if result.completion_tokens >= request.max_new_tokens else "stop"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": result.text}, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "total_tokens": result.prompt_tokens + result.completion_tokens,
            },
        }
