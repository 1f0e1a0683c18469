"""Pydantic output schemas, one per role. Labels come from data_prep.taxonomy only.

Length caps keep constrained decoding bounded and keep student targets short: on CPU every
completion token costs training and inference time.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

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


class SRPOutput(_Strict):
    reasoning: str = Field(max_length=240)
    strategy: Strategy


class SRPDecision(_Strict):
    """The student's `srp` answer: the decision alone."""

    strategy: Strategy


class ERSOutput(_Strict):
    response: str = Field(max_length=320, description="the 1-2 sentence empathetic reply")


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
