"""Stages copied from a stored run of the same pipeline, instead of generated again.

A variant that changes only a late stage (the reply's sampling, say) runs every earlier stage exactly as
the run it varies did: the same adapters, the same greedy decoding, the same batches. Copying those stages'
steps from that run gives the outputs a rerun would give, at none of the cost, and it pairs the variant
with its lender on identical analyses, so the comparison isolates the late stage. Each copied step keeps
its tokens and latency: a reused stage still costs what it cost once, so the variant's cost stays whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from distill.pipeline.trace import Step


class StoredStages:
    """The first-pass steps of a stored trace run, per dialogue id and role."""

    def __init__(self, run: Union[str, Path], roles: tuple[str, ...]):
        from distill.pipeline.store import TraceStore

        traces, _ = TraceStore(run).read()
        if not traces:
            raise ValueError(f"reuse_from: {run} holds no traces")
        self.run, self._steps = str(run), {}
        for t in traces:
            first: dict[str, Step] = {}
            for s in t.steps:
                if s.iteration == 0 and s.role in roles:
                    first.setdefault(s.role, s)
            self._steps.setdefault(t.dialogue.id, first)

    def step(self, role: str, dialogue_id: str) -> Step:
        """A copy of the stored step, or a failed step saying the run has none."""
        found: Optional[Step] = self._steps.get(dialogue_id, {}).get(role)
        if found is None:
            reason = f"reuse: {self.run} has no {role} step for dialogue {dialogue_id}"
            return Step(role=role, messages=[], attempts=0, error=reason, events=[reason])
        return found.model_copy(deep=True, update={"events": [*found.events, f"reused from {self.run}"]})
