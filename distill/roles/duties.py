"""What a role does for the rest of the toolkit, read from what its spec declares, never from its name.

Datasets, metrics, records and the curve ask these questions of a pipeline's roles, so one code path serves
TRACE's built-in roles and a declared pipeline's:

- the reply: a stage whose answer has the `response` field (`REPLY_FIELD`);
- the emotion: a stage whose answer has an `emotion` label field (a label set, not free text);
- a gold answer: the data holds the role's answer (`RoleSpec.gold_answer`), so the gold oracle and direct
  rows can stand in for the teacher's;
- a rationale task: a role whose student answer drops the teacher's `reasoning` (the decision alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from distill.roles.declared import REPLY_FIELD, label_set
from distill.roles.roles import ROLES, RoleSpec

EMOTION_FIELD = "emotion"  # the answer field, with a label set, that makes a role the pipeline's emotion
RATIONALE_FIELD = "reasoning"  # the teacher's rationale that a rationale-task twin row teaches


def answers_reply(spec: RoleSpec) -> bool:
    """Whether the role's answer is the pipeline's reply."""
    return REPLY_FIELD in spec.schema.model_fields


def answers_emotion(spec: RoleSpec) -> bool:
    """Whether the role's answer names the seeker's emotion as a label."""
    return EMOTION_FIELD in spec.schema.model_fields and label_set(spec, EMOTION_FIELD) is not None


def has_rationale_task(spec: RoleSpec) -> bool:
    """Whether the role's student answers without the rationale its teacher writes."""
    student = spec.student_schema
    return (
        student is not None
        and RATIONALE_FIELD in spec.schema.model_fields
        and RATIONALE_FIELD not in student.model_fields
    )


def is_gold_reply(role: str, roles: Mapping[str, RoleSpec] = ROLES) -> bool:
    """Whether `role` is a reply the data holds (a gold reply target or oracle replaces the teacher's)."""
    spec = roles.get(role)
    return spec is not None and spec.gold_answer and answers_reply(spec)


def _stages(roles: Mapping[str, RoleSpec]) -> list[RoleSpec]:
    return [spec for spec in roles.values() if spec.stage]


def reply_role(roles: Mapping[str, RoleSpec] = ROLES) -> Optional[str]:
    """The role that writes the reply: the last stage that answers one (a declared pipeline's roles follow the
    built-in ones in `pipeline_roles`), or None."""
    return next((spec.name for spec in reversed(_stages(roles)) if answers_reply(spec)), None)


def emotion_role(roles: Mapping[str, RoleSpec] = ROLES) -> Optional[str]:
    """The role that names the seeker's emotion: the first stage that answers an emotion label, or None."""
    return next((spec.name for spec in _stages(roles) if answers_emotion(spec)), None)


def gold_roles(roles: Mapping[str, RoleSpec] = ROLES) -> tuple[str, ...]:
    """The stages whose answer the data holds, in stage order."""
    return tuple(spec.name for spec in _stages(roles) if spec.gold_answer)


def rationale_roles(roles: Mapping[str, RoleSpec] = ROLES) -> tuple[str, ...]:
    """The stages that can learn a rationale task, in stage order."""
    return tuple(spec.name for spec in _stages(roles) if has_rationale_task(spec))
