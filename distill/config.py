"""Pipeline configuration: which roles run, how they are prompted, and the TRACE/MERG/EmoStage switches.

YAML files under configs/ fill these models; their keys mirror the CLI flags. The defaults are the `trace`
preset: TRACE's four roles, exemplar retrieval with its code's top-2 and no similarity threshold, and its
temperatures (the registry's). Every other switch goes beyond TRACE and is off by default.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from data_prep.retrieval import TRACE_TOP_K
from distill.roles import CORE_ROLES, STAGE_ORDER


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # TRACE's four roles run unless ablated; EmoStage/MERG roles are opt-in.
    use_asi: bool = Field(True, description="ablation: without ASI")
    use_cae: bool = Field(True, description="ablation: without CAE")
    use_srp: bool = Field(True, description="ablation: without SRP")
    perspective: bool = Field(False, description="EmoStage perspective-taking role")
    phase: bool = Field(False, description="EmoStage counselling-phase role")
    plan: bool = Field(False, description="MERG pragmatic plan (goal, stance, tactic, tone)")
    reflection: bool = Field(False, description="MERG global reflection agent and refinement loop")
    max_refinements: int = Field(2, ge=0, le=5)
    later_iteration_penalty: float = Field(
        0.5, ge=0, description="score penalty per refinement iteration when choosing the final answer"
    )

    rag: bool = Field(True, description="show retrieved exemplars to srp/ers (teacher prompts)")
    rag_k: int = Field(TRACE_TOP_K, ge=1, description="exemplars per prompt (TRACE: 2)")
    rag_tau: Optional[float] = Field(
        None, ge=-1, le=1, description="cosine threshold for both searches; null = none, as in TRACE's code"
    )

    prompt_style: Literal["teacher", "student"] = "teacher"
    gold_emotion: bool = Field(False, description="tell the teacher the gold emotion (STaR rationalisation)")
    gold_response: bool = Field(False, description="also tell the teacher the gold listener reply")
    use_adapters: bool = Field(False, description="route each stage to its role adapter (the student)")

    max_attempts: int = Field(3, ge=1, description="generations per step before it is recorded as failed")
    temperatures: dict[str, float] = Field(
        default_factory=dict, description="per-role override of the registry default"
    )
    seed: int = 0

    def stages(self) -> list[str]:
        """Enabled generation stages in order (gra excluded: it runs after them)."""
        on = {
            "asi": self.use_asi,
            "cae": self.use_cae,
            "srp": self.use_srp,
            "ers": True,
            "perspective": self.perspective,
            "phase": self.phase,
            "plan": self.plan,
        }
        return [r for r in STAGE_ORDER if on[r]]

    def key_dict(self) -> dict[str, Any]:
        """The part of the config that changes outputs, for trace keys."""
        return self.model_dump()


__all__ = ["PipelineConfig", "CORE_ROLES"]
