"""What a pipeline run records: one `Trace` per dialogue, one `Step` per role call.

A trace holds exactly what each role saw (messages) and answered (raw and parsed), so datasets,
eval and audits never need to re-run anything. The store that persists traces is distill.pipeline.store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, computed_field

from data_prep.dialogues import Dialogue
from distill.roles.declared import REPLY_FIELD, stored_roles
from distill.roles.duties import EMOTION_FIELD, emotion_role
from distill.roles.roles import ROLES, RoleSpec


class Step(BaseModel):
    role: str
    iteration: int = 0  # reflection round: 0 is the first pass
    messages: list[dict[str, str]]
    raw: str = ""
    parsed: Optional[dict[str, Any]] = None  # None when the output never validated
    error: Optional[str] = None
    attempts: int = 1  # generations spent, invalid-output retries included
    transport_retries: int = 0
    events: list[str] = Field(default_factory=list)
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    # Derived, not stored: written to traces.jsonl for readers, ignored when a trace is read back.
    @computed_field
    @property
    def valid(self) -> bool:
        return self.parsed is not None


class GoldGuidance(BaseModel):
    emotion: bool = False
    response: bool = False


class Trace(BaseModel):
    key: str
    dialogue: Dialogue
    backend: str
    model: str
    prompt_version: str
    prompt_style: Literal["teacher", "student"]
    config: dict[str, Any]
    gold_guidance: GoldGuidance = Field(default_factory=GoldGuidance)
    steps: list[Step] = Field(default_factory=list)
    outputs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # final chosen iteration, per role
    final_iteration: int = 0
    failure: Optional[str] = None  # why the trace failed; None = ok
    created_at: str = ""

    @computed_field
    @property
    def status(self) -> Literal["ok", "failed"]:
        return "failed" if self.failure is not None else "ok"

    @property
    def response(self) -> Optional[str]:
        """The reply: the last stage's that answers the reply field (`distill.roles.duties`)."""
        replies = [out[REPLY_FIELD] for out in self.outputs.values() if isinstance(out, dict) and REPLY_FIELD in out]
        return replies[-1] if replies else None

    @property
    def roles(self) -> Mapping[str, RoleSpec]:
        """The roles of the pipeline that made this trace (the declared one its config carries), read-only."""
        return stored_roles(self.config)

    @property
    def emotion(self) -> Optional[str]:
        """The emotion the pipeline's emotion role answered (as it answered it: not checked against the label set)."""
        return (self.outputs.get(emotion_role(self.roles)) or {}).get(EMOTION_FIELD)


def roles_of(traces: Iterable[Trace]) -> dict[str, RoleSpec]:
    """The roles of the pipelines that made `traces` (one run has one): the built-in roles and each declared one's."""
    merged = dict(ROLES)
    for roles in {id(roles): roles for roles in (t.roles for t in traces)}.values():
        merged.update(roles)
    return merged


def trace_key(dialogue: Dialogue, config: dict[str, Any], backend: str, model: str, prompt_version: str) -> str:
    """Content address of a trace: the same inputs always map to the same key, so reruns skip them."""
    # `labels` is left out while empty, so the keys of runs stored before Dialogue had it stay the same
    payload = json.dumps(
        {
            "dialogue": dialogue.model_dump(exclude=set() if dialogue.labels else {"labels"}),
            "config": config,
            "backend": backend,
            "model": model,
            "prompt_version": prompt_version,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]
