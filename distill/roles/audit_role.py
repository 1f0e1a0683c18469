"""The reflection audit of a declared pipeline: MERG's global reflection agent (the built-in audit role) reading that
pipeline's stages instead of TRACE's.

TRACE's audit asks one check per built-in stage (`teacher_prompts.GRA_CHECKS`). A declared stage has no check
written for it, so its check line is made from what the declaration says of it: its name, its agent's title and
its brief (what later agents are told it did). The rest is the built-in role's: the answer schema naming the run's
stages as an enum (`schemas.audit_schema`), the rerun from the earliest faulted stage and the final pick
(distill.pipeline.reflection), which read stage names alone. The audit's briefing and case file read the stages'
titles and answers from the pipeline's own specs (`RoleSpec.input_specs`), never from the built-in roles.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Optional

from distill.roles.roles import ROLES, RoleSpec, brief_of
from distill.roles.teacher_prompts import audit_instruction

# The one built-in role that runs after the stages: MERG's global reflection agent.
AUDIT_ROLE = next(name for name, spec in ROLES.items() if not spec.stage)


def declared_audit(stages: tuple[RoleSpec, ...]) -> RoleSpec:
    """The audit role of a declared pipeline whose stages are `stages` (its specs, in stage order)."""
    names = tuple(spec.name for spec in stages)
    return replace(
        ROLES[AUDIT_ROLE],
        inputs=names,
        input_specs=stages,
        task=audit_task(stages, names),
        stage_task=partial(audit_task, stages),
        context_turns=_widest(stages),
    )


def audit_task(stages: tuple[RoleSpec, ...], present: tuple[str, ...]) -> str:
    """The audit instruction for the declared `stages` that ran (`present`): one check per stage, in stage order."""
    fits = "its answer fits the dialogue and the stages before it"
    checks = [f"- {s.name} (the {s.title}, who {brief_of(s)}): {fits}" for s in stages if s.name in present]
    return audit_instruction(checks)


def _widest(stages: tuple[RoleSpec, ...]) -> Optional[int]:
    """The most dialogue turns a stage sees (None: all): the audit sees what every stage it judges saw."""
    turns = [spec.context_turns for spec in stages]
    return None if None in turns or not turns else max(turns)
