"""Micro-batching for `distill serve`: requests that arrive together share one `generate` call.

HTTP handlers put (request, future) pairs on an asyncio queue. One worker takes the first pair,
keeps collecting for a few milliseconds or until `max_batch` pairs are waiting, groups them by
what must be uniform inside one local `generate` (the adapter), and runs each group in a worker
thread so the event loop keeps accepting requests meanwhile. When a group's `generate` fails, each of
its requests is retried alone, so a request that breaks the decoder fails by itself. Only one `generate` runs at a time:
the model is a single shared object and CPU throughput comes from batching, not from threads.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from distill.backends.base import GenerationRequest, GenerationResult


@dataclass
class BatchStats:
    batches: int = 0
    requests: int = 0
    largest_batch: int = 0
    busy_s: float = 0.0
    by_model: Counter = field(default_factory=Counter)
    by_prompt: Counter = field(default_factory=Counter)  # prompt digest → calls, for "no repeat calls" checks

    def as_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "requests": self.requests,
            "largest_batch": self.largest_batch,
            "busy_s": round(self.busy_s, 3),
            "by_model": dict(self.by_model),
            "by_prompt": dict(self.by_prompt),
        }


@dataclass
class _Pending:
    request: GenerationRequest
    future: asyncio.Future


class RequestBatcher:
    def __init__(self, backend: Any, max_batch: int = 16, window_s: float = 0.01):
        self.backend = backend
        self.max_batch = max_batch
        self.window_s = window_s
        self.stats = BatchStats()
        self._queue: Optional[asyncio.Queue[_Pending]] = None
        self._worker: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._worker:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass

    async def submit(self, request: GenerationRequest) -> GenerationResult:
        assert self._queue is not None, "RequestBatcher.start() was not called"
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(request, future))
        return await future

    async def _collect(self) -> list[_Pending]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except asyncio.TimeoutError:
                break
        # Whatever queued up while the previous batch ran is taken too, up to max_batch.
        while len(batch) < self.max_batch and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            groups: dict[Optional[str], list[_Pending]] = {}
            for pending in batch:
                groups.setdefault(pending.request.adapter, []).append(pending)
            for group in groups.values():
                await self._generate(group)

    async def _generate(self, group: list[_Pending]) -> None:
        started = time.perf_counter()
        failure: Optional[Exception] = None
        try:
            results = await asyncio.to_thread(self.backend.generate, [p.request for p in group])
        except Exception as exc:  # a backend fault fails requests, never the server
            failure = exc
        finally:
            self.stats.busy_s += time.perf_counter() - started
        if failure is not None:
            if len(group) > 1:  # one bad request must not fail the others: each alone, only the culprit fails
                for p in group:
                    await self._generate([p])
            elif not group[0].future.done():
                group[0].future.set_exception(failure)
            return
        self.stats.batches += 1
        self.stats.requests += len(group)
        self.stats.largest_batch = max(self.stats.largest_batch, len(group))
        for p, result in zip(group, results):
            if not p.future.done():  # the client may have disconnected and cancelled it
                p.future.set_result(result)
