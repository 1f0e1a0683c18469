"""The gate in front of `distill serve`: a request-body size limit, an optional API key, and time
limits on clients that stall.

`ServeGuard` is plain ASGI middleware, so it acts before FastAPI reads or parses anything: an
oversized or unauthenticated request costs the server almost nothing and never holds up the event
loop (a 40 MB body used to be parsed and tokenized there, stalling every other client). `/health`
stays open so that probes work without the key. A body that does not arrive within the request
timeout gets a 408. `timed_protocol` gives uvicorn's h11 protocol the same limit on a request's
head: uvicorn closes an idle keep-alive connection, but never one that sends its headers a byte at
a time (slow loris), so each such connection used to be held open for good.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Callable
from typing import Any, Optional

DEFAULT_MAX_BODY_BYTES = 4 * 2**20
DEFAULT_REQUEST_TIMEOUT_S = 30.0
_OPEN_PATHS = ("/health",)


class _BodyTimeout(Exception):
    pass


class ServeGuard:
    def __init__(
        self,
        app: Callable,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        api_key: Optional[str] = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ):
        if max_body_bytes < 1 or request_timeout_s <= 0:
            raise ValueError(
                f"max_body_bytes must be >= 1 and request_timeout_s > 0, got {max_body_bytes}, {request_timeout_s}"
            )
        self.app, self.max_body_bytes, self.api_key = app, max_body_bytes, api_key
        self.request_timeout_s = request_timeout_s

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.api_key and scope["path"] not in _OPEN_PATHS and not self._authorised(scope):
            return await _reply(send, 401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "auth")
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return await _reply(send, 413, self._too_large(declared), "body")
        try:
            body = await self._read_body(receive)
        except _BodyTimeout:
            message = f"request body not received within {self.request_timeout_s:g} s (--request-timeout)"
            return await _reply(send, 408, message, "body")
        if body is None:
            return await _reply(send, 413, self._too_large("more"), "body")
        await self.app(scope, _replay(body, receive), send)

    def _authorised(self, scope: dict) -> bool:
        scheme, _, given = (_header(scope, b"authorization") or "").partition(" ")
        # the scheme is case-insensitive (RFC 9110 11.1), the key is not
        right_key = hmac.compare_digest(given.strip().encode(), self.api_key.encode())
        return scheme.lower() == "bearer" and right_key

    async def _read_body(self, receive: Callable) -> Optional[bytes]:
        """The whole body, or None as soon as it passes the limit (chunked uploads declare no length);
        `_BodyTimeout` when it has not all arrived within the request timeout."""
        chunks, size, more = [], 0, True
        deadline = time.monotonic() + self.request_timeout_s
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise _BodyTimeout from None
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
    if status == 408:  # the rest of a stalled body is never read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def timed_protocol(request_timeout_s: float) -> type:
    """uvicorn's h11 protocol, closing a connection whose next request head has not arrived within
    `request_timeout_s` of the connection opening or of its previous response."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _head_deadline: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            self._head_deadline = self.loop.call_later(request_timeout_s, self._expire)

        def _expire(self) -> None:
            # a request being served (its body read by ServeGuard under the same limit, or generating) stays
            waiting_for_head = self.cycle is None or self.cycle.response_complete
            if waiting_for_head and not self.transport.is_closing():
                self.transport.close()

    return TimedH11Protocol
