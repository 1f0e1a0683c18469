"""The serve batcher isolates failures: a request that breaks a batched `generate` fails alone."""

from __future__ import annotations

import asyncio

from distill.backends.base import GenerationRequest, GenerationResult
from distill.serving.serve_batcher import RequestBatcher


class BreaksOnPoison:
    """Answers every request, except that a batch holding a poisoned request raises as a whole, the way a
    decoder fault in one row takes down the batched call."""

    def __init__(self):
        self.calls: list[int] = []

    def generate(self, requests, progress=None):
        self.calls.append(len(requests))
        if any(r.seed == -999 for r in requests):
            raise OverflowError("seed out of range")
        return [GenerationResult(text=r.messages[0]["content"].upper()) for r in requests]


def test_one_bad_request_fails_alone():
    backend = BreaksOnPoison()

    async def scenario():
        batcher = RequestBatcher(backend, max_batch=8, window_s=0.05)
        batcher.start()
        requests = [GenerationRequest(messages=[{"role": "user", "content": f"hi {i}"}]) for i in range(5)]
        requests.insert(2, GenerationRequest(messages=[{"role": "user", "content": "bad"}], seed=-999))
        outcomes = await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True)
        await batcher.stop()
        return outcomes

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[2], OverflowError)
    good = [o for i, o in enumerate(outcomes) if i != 2]
    assert [o.text for o in good] == [f"HI {i}" for i in range(5)]
    assert backend.calls[0] == 6 and backend.calls[1:] == [1] * 6  # the batch, then each request alone
