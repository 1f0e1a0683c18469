"""The gate in front of `distill serve`: a request-body size limit and an optional API key.

It is plain ASGI middleware, so it acts before FastAPI reads or parses anything: an oversized or
unauthenticated request costs the server almost nothing and never holds up the event loop (a 40 MB
body used to be parsed and tokenized there, stalling every other client). `/health` stays open so
that probes work without the key.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any, Optional

DEFAULT_MAX_BODY_BYTES = 4 * 2**20
_OPEN_PATHS = ("/health",)


class ServeGuard:
    def __init__(self, app: Callable, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, api_key: Optional[str] = None):
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
        self.app, self.max_body_bytes, self.api_key = app, max_body_bytes, api_key

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.api_key and scope["path"] not in _OPEN_PATHS and not self._authorised(scope):
            return await _reply(send, 401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "auth")
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return await _reply(send, 413, self._too_large(declared), "body")
        body = await self._read_body(receive)
        if body is None:
            return await _reply(send, 413, self._too_large("more"), "body")
        await self.app(scope, _replay(body, receive), send)

    def _authorised(self, scope: dict) -> bool:
        given = _header(scope, b"authorization") or ""
        return hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode())

    async def _read_body(self, receive: Callable) -> Optional[bytes]:
        """The whole body, or None as soon as it passes the limit (chunked uploads declare no length)."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    def _too_large(self, size: str) -> str:
        return f"request body of {size} bytes is over this server's limit of {self.max_body_bytes} (--max-body-bytes)"


def _header(scope: dict, name: bytes) -> Optional[str]:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _replay(body: bytes, receive: Callable) -> Callable:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()  # after the body: disconnect notices, as the server sends them
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _reply(send: Callable, status: int, message: str, param: str) -> None:
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    payload = json.dumps({"error": {"message": message, "type": kind, "param": param, "code": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
