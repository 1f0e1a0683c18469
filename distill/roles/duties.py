"""What a role does for the rest of the toolkit, read from what its spec declares, never from its name.

Datasets, metrics, records and the curve ask these questions of a pipeline's roles, so one code path serves
TRACE's built-in roles and a declared pipeline's:

- the reply: a stage whose answer has the `response` field (`REPLY_FIELD`);
- the emotion: a stage whose answer has an `emotion` label field (a label set, not free text); it keys the
  exemplar search (`exemplar_key_problem`: when it cannot);
- a gold answer: the data holds the role's answer (`RoleSpec.gold_answer`), so the gold oracle and direct
  rows can stand in for the teacher's;
- a rationale task: a role whose student answer drops the teacher's `reasoning` (the decision alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from data_prep.taxonomy import to_ekman
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
    """The role that names the seeker's emotion: the first stage that answers an emotion label, or None. A declared
    pipeline's is one of its own stages (its runs never run the built-in ones before it in `pipeline_roles`)."""
    stages = _stages(roles)
    own = [spec for spec in stages if spec.pipeline is not None] or stages
    return next((spec.name for spec in own if answers_emotion(spec)), None)


def exemplar_key_problem(roles: Mapping[str, RoleSpec], stages: Sequence[str]) -> Optional[str]:
    """Why the exemplar search of a run of `stages` cannot key on its emotion role's answer, in one line, or None.

    The precise search looks for cases of the emotion that role answered, so that role must run before the first
    role shown cases, and its labels must be emotions the index holds (Ekman's six, or ED's 32, mapped to them).
    Without an emotion role every search is fuzzy, as it is for a dialogue whose emotion role did not answer."""
    shown = [name for name in stages if roles[name].uses_exemplars]
    emotion = emotion_role(roles)
    if not shown or emotion is None:
        return None
    if emotion in stages and stages.index(emotion) > stages.index(shown[0]):
        return (
            f"exemplars: '{shown[0]}' is shown retrieved cases before '{emotion}' answers the emotion their search "
            f"keys on; make {emotion} one of its inputs"
        )
    unknown = [label for label in label_set(roles[emotion], EMOTION_FIELD) or () if not _indexed_emotion(label)]
    if unknown:
        return (
            f"exemplars: '{emotion}' answers emotion label(s) {', '.join(map(repr, unknown))} that the exemplar "
            "index cannot search by (it holds Ekman's six, or EmpatheticDialogues' 32 mapped to them)"
        )
    return None


def _indexed_emotion(label: str) -> bool:
    try:
        to_ekman(label)
    except ValueError:
        return False
    return True


def gold_roles(roles: Mapping[str, RoleSpec] = ROLES) -> tuple[str, ...]:
    """The stages whose answer the data holds, in stage order."""
    return tuple(spec.name for spec in _stages(roles) if spec.gold_answer)


def rationale_roles(roles: Mapping[str, RoleSpec] = ROLES) -> tuple[str, ...]:
    """The stages that can learn a rationale task, in stage order."""
    return tuple(spec.name for spec in _stages(roles) if has_rationale_task(spec))
