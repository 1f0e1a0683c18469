"""Role attribution: a stage fed the gold answer or the teacher's, instead of the model's own.

Swapping one distilled stage for the right answer and re-scoring the reply says how much of the gap to
the teacher (or to the human reply) that stage causes. Gold answers exist for `asi` (the data's emotion)
and `ers` (the human reply); the teacher's answer for any role comes from its trace run on the same
dialogues, looked up by dialogue id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from pydantic import BaseModel

from data_prep.dialogues import Dialogue
from data_prep.taxonomy import to_ekman
from distill.roles.duties import answers_emotion
from distill.roles.roles import ROLES, RoleSpec


class Oracle:
    """The answers a pipeline config's `oracle:` names, per role, for any dialogue."""

    def __init__(
        self, sources: dict[str, str], teacher_traces: Optional[str] = None, roles: Mapping[str, RoleSpec] = ROLES
    ):
        self.sources, self.roles = dict(sources), roles  # roles: the pipeline's, whose schemas the answers take
        self._teacher: dict[str, dict] = {}
        if "teacher" in self.sources.values():
            from distill.pipeline.store import TraceStore

            traces, _ = TraceStore(teacher_traces).read()
            if not traces:
                raise ValueError(f"oracle_traces: {teacher_traces} holds no traces")
            for t in traces:
                self._teacher.setdefault(t.dialogue.id, t.outputs)

    def covers(self, role: str) -> bool:
        return role in self.sources

    def answer(self, role: str, dialogue: Dialogue) -> tuple[Optional[BaseModel], str]:
        """(the answer in the role's full schema, or None; what it came from, or why there is none)."""
        schema = self.roles[role].schema
        if self.sources[role] == "gold":
            if answers_emotion(self.roles[role]):
                return schema(emotion=to_ekman(dialogue.emotion), reasoning=""), "oracle: gold emotion"
            if not dialogue.gold_response:
                return None, f"oracle: dialogue {dialogue.id} has no gold reply"
            # the data's reply as it is: the schema's length limits bound what a model generates, and a
            # human reply over them (ED has replies past ers's 320 characters) must not stop the run
            return schema.model_construct(response=dialogue.gold_response), "oracle: gold reply"
        found = (self._teacher.get(dialogue.id) or {}).get(role)
        if found is None:
            return None, f"oracle: the teacher's run has no {role} answer for dialogue {dialogue.id}"
        return schema.model_validate(found), "oracle: teacher answer"
