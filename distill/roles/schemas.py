"""Pydantic output schemas, one per role. Labels come from data_prep.taxonomy only.

Length caps keep constrained decoding bounded and keep student targets short: on CPU every
completion token costs training and inference time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from data_prep.taxonomy import CauseCategory, Ekman, Phase, Strategy

_Goal = Literal["comfort", "validate", "encourage", "celebrate", "explore", "inform"]
_Stance = Literal["supportive", "curious", "reassuring", "enthusiastic", "reflective"]
_Tactic = Literal["acknowledge_feeling", "reflect_content", "ask_question", "share_perspective", "offer_hope"]
_Tone = Literal["warm", "gentle", "upbeat", "calm", "serious"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ASIOutput(_Strict):
    reasoning: str = Field(max_length=240, description="one or two sentences on the cues for the emotion")
    emotion: Ekman


class ASIDecision(_Strict):
    """The student's `asi` answer: the decision alone (see `RoleSpec.student_schema`)."""

    emotion: Ekman


class CAEOutput(_Strict):
    triggers: list[Annotated[str, Field(max_length=120)]] = Field(
        min_length=1, max_length=2, description="1-2 spans quoted from the seeker's turns"
    )
    cause: str = Field(max_length=200, description="one-sentence cause summary")
    category: CauseCategory


class CAEFOutput(_Strict):
    """MERG's consistency-aware emotion forecast: the emotion the reply should carry, checked against the
    perceived emotion and the evidence."""

    reasoning: str = Field(max_length=240, description="why this emotion fits the seeker's emotion and its cause")
    forecast: Ekman = Field(description="the emotion the reply should carry")
    consistent: bool = Field(description="the forecast agrees with the perceived emotion and the evidence")


class SRPOutput(_Strict):
    reasoning: str = Field(max_length=240)
    strategy: Strategy


class SRPDecision(_Strict):
    """The student's `srp` answer: the decision alone."""

    strategy: Strategy


class ERSOutput(_Strict):
    # min_length: an empty reply is no reply, so constrained decoding cannot end the string at once
    response: str = Field(min_length=1, max_length=320, description="the 1-2 sentence empathetic reply")


class PerspectiveOutput(_Strict):
    state: str = Field(max_length=200, description="the seeker's psychological state")
    needs: str = Field(max_length=200, description="what support the seeker needs")


class PhaseOutput(_Strict):
    phase: Phase


class PlanOutput(_Strict):
    goal: _Goal
    stance: _Stance
    tactic: _Tactic
    tone: _Tone


class StageCheck(_Strict):
    stage: str
    passed: bool


class GRAOutput(_Strict):
    checks: list[StageCheck] = Field(max_length=8)
    earliest_failure: Optional[str] = Field(default=None, description="the first failed stage, or null if all passed")
    correction: str = Field(default="", max_length=240, description="what the failed stage should fix")


@lru_cache(maxsize=64)
def audit_schema(stages: tuple[str, ...]) -> type[GRAOutput]:
    """`GRAOutput` whose stage names are an enum of the run's enabled stages.

    With a free string, the embedded teacher named stages that do not exist ('survey'), every audit was
    rejected and no stage was ever rerun; an enum lets constrained decoding produce only real stages.
    """
    if not stages:
        raise ValueError("an audit needs at least one enabled stage")
    stage = Literal[stages]  # Literal over a tuple of strings is the enum of those strings
    suffix = "_".join(stages)
    check = create_model(f"StageCheck_{suffix}", __base__=StageCheck, stage=(stage, ...))
    return create_model(
        f"GRAOutput_{suffix}",
        __base__=GRAOutput,
        checks=(list[check], Field(max_length=len(stages))),
        earliest_failure=(Optional[stage], Field(default=None, description="the first failed stage, or null")),
    )
