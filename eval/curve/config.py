"""The learning curve's YAML (`configs/eval/curve*.yaml`): `CurveConfig` and its loader `load_curve_config`.

It holds one teacher trace run, the points (train conversations per point), the built-in students and the
variants (`eval.curve.students`), the task, the token budget and the eval settings every point's compare shares.
What a point's `eval compare` would refuse after its adapters trained is refused when the config loads: the
validator builds the smallest point's systems with `eval.curve.point_systems`, as `eval.curve.curve` runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from data_prep.config_file import first_error
from data_prep.config_file import load_config as load_config_file
from eval.compare.systems import BertScoreSpec, CompareError, DialoguePplSpec, PaperReference, PplSpec, loadable_model
from eval.curve.adapter_runs import CPU_TRAIN_CONFIG
from eval.curve.point_systems import PROBE, anchor_systems, point_compare, student_system
from eval.curve.students import STUDENTS, Student, Variant, emotion_only, role_sources
from train import TOKENS_BUDGET


class CurveConfig(BaseModel):
    """`configs/eval/curve*.yaml`: one trace run, the points, the students and the shared eval settings."""

    model_config = ConfigDict(extra="forbid")

    traces: str = Field(description="the teacher's trace run on the train split (distill generate --out)")
    dialogues: str = Field(description="directory written by `python -m data_prep dialogues`")
    index: Optional[str] = Field(None, description="exemplar index over the train split (the base's retrieval)")
    train_split: str = Field("train", description="the split whose first N conversations a point trains on")
    test_split: str = Field("test", description="the split every point is scored on")
    test_limit: Optional[int] = Field(None, ge=1, description="score the first N test dialogues; null = all")
    points: list[Annotated[int, Field(ge=1)]] = Field(
        min_length=1, description="train conversations per point, e.g. [50, 100, 200, 400]"
    )
    students: list[Literal["traces", "direct", "rationale", "teacher-reply", "joint"]] = Field(
        default_factory=lambda: ["traces", "direct", "rationale"],
        description="the built-in students trained at each point (`eval.curve.students`)",
    )
    variants: list[Variant] = Field(default_factory=list, description="levers: students with other options")
    task: Literal["pipeline", "emotion"] = Field(
        "pipeline", description="emotion: train and run the emotion agent alone; replies are not scored"
    )
    rationale: Literal["teacher", "situation"] = Field("situation", description="the rationale task's source")
    rationale_share: float = Field(1.0, gt=0, le=1, description="share of label rows that get a rationale twin")
    require_gold_emotion: bool = Field(True, description="traces students keep only traces with the gold emotion")
    train_config: str = Field(str(CPU_TRAIN_CONFIG), description="the train YAML every student uses")
    max_tokens_budget: int = Field(
        TOKENS_BUDGET, ge=0, description="training tokens per role, the same for every student"
    )
    tokens_per_conversation: Optional[int] = Field(
        None, ge=1, description="when set, a point's budget per role is N x this (the same passes at every N)"
    )
    backend: dict[str, Any] = Field(
        default_factory=lambda: {"type": "local", "model": "smollm2-135m", "dtype": "auto", "batch_size": 16},
        description="the local backend every student and the base run on (its model is the students' base)",
    )
    paper_reference: PaperReference = Field(
        None, description="published rows shown beside the largest point (a shipped table, e.g. trace-table1)"
    )
    base: bool = Field(True, description="score the prompted base (teacher prompts, no adapters) once")
    probe: bool = Field(True, description="score a logistic-regression emotion probe at every point")
    ppl: Optional[PplSpec] = Field(default_factory=PplSpec, description="perplexity settings; null = no PPL")
    dialogue_ppl: Optional[DialoguePplSpec] = Field(
        None, description="PPL given the dialogue, the target's third guard; null = not scored"
    )
    bertscore: Optional[BertScoreSpec] = Field(
        default_factory=BertScoreSpec, description="BERTScore settings; null = no BERTScore"
    )
    shares_by_size: Optional[int] = Field(
        None, ge=2, description="each point's compare also gives the Dist/EAD shares on sub-corpora of this many test "
        "dialogues, doubling up to the whole test set (eval compare's `shares_by_size`); null = the whole set alone",
    )  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> CurveConfig:
        names = [v.name for v in self.variants]
        clash = sorted({n for n in names if names.count(n) > 1 or n in STUDENTS})
        if clash:
            raise ValueError(f"variants: name {', '.join(clash)} is taken (a student or another variant)")
        for name in ("joint", "teacher-reply"):
            if self.task == "emotion" and name in self.students + [v.like for v in self.variants]:
                raise ValueError(f"students: '{name}' trains more than asi; task 'emotion' runs asi alone")
        if self.task == "emotion" and any(v.decoding for v in self.variants):
            raise ValueError("variants: decoding changes how replies are sampled; task 'emotion' runs asi alone")
        return self

    @field_validator("backend")
    @classmethod
    def _runnable_model(cls, backend: dict[str, Any]) -> dict[str, Any]:
        if backend.get("type") == "local":  # the model every student runs: checked as compare checks a metric's
            loadable_model(backend.get("model", "smollm2-135m"))
        return backend

    @model_validator(mode="after")
    def _compare_accepts(self) -> CurveConfig:
        """What a point's `eval compare` would refuse after its adapters trained, refused when the config loads:
        the smallest point's systems and pipelines, built as `run_point` builds them, through compare's config."""
        from distill.pipeline.config import PipelineConfig
        from eval.compare.systems import CompareConfig

        n, point = min(self.points), Path(f"n{min(self.points)}")
        variants = {v.name: f"variants.{i}{'.decoding' if v.decoding else ''}" for i, v in enumerate(self.variants)}
        systems = []
        for student in self.ordered_students():
            try:
                systems.append(student_system(student, point / f"adapters-{student.name}", self))
                PipelineConfig(**systems[-1]["pipeline"])
            except ValidationError as err:
                key = variants.get(student.name, f"students ({student.name})")
                raise ValueError(f"{key}: {first_error(err)}") from None
        systems += anchor_systems(n, point.parent, self)
        if not systems:
            raise ValueError("students: none, and base and probe are off: each point would score nothing")
        try:
            CompareConfig.model_validate(point_compare(point, systems, self))
        except ValidationError as err:
            where = err.errors()[0]["loc"]
            key = {"limit": "test_limit", "split": "test_split"}.get(where[0], where[0])
            if where[0] == "systems":  # the probe learns from a point's N dialogues; a student runs the backend
                key = "points" if systems[where[1]]["name"] == PROBE else "backend"
            raise ValueError(f"{key}: eval compare refuses it: {first_error(err)}") from None
        return self

    def ordered_students(self) -> list[Student]:
        """The chosen students and variants, `traces` first when another borrows its adapters."""
        chosen = [STUDENTS[n] for n in dict.fromkeys(self.students)] + [v.student() for v in self.variants]
        if self.task == "emotion":
            return [emotion_only(s) for s in chosen]
        names = {s.name for s in chosen}
        for lender in dict.fromkeys(s.lender for s in chosen if s.borrows):  # lenders train before borrowers
            if lender not in names:
                chosen.insert(0, STUDENTS[lender])
                names.add(lender)
                if STUDENTS[lender].borrows and "traces" not in names:
                    chosen.insert(0, STUDENTS["traces"])
                    names.add("traces")
        return sorted(chosen, key=lambda s: (s.name != "traces", s.name not in STUDENTS))

    def at_paper_decoding(self) -> dict[str, str]:
        """Each variant that decodes otherwise -> the student it is made like, which decodes as the paper does: the
        target's guards fall from it. A decoding-only variant runs that student's own adapters; one that also
        retrains (another seed, a role's budget) is judged as a whole lever against it, never against itself."""
        return {f"student-{v.name}": f"student-{v.like}" for v in self.variants if v.decoding}

    def lender(self, student: Student) -> Student:
        """The student whose adapters `student` borrows: a chosen one (a variant's `like`) or a built-in."""
        return next((s for s in self.ordered_students() if s.name == student.lender), STUDENTS[student.lender])

    def sources(self) -> dict[str, dict[str, dict[str, str]]]:
        """What each student's adapters learn, and from whom: `role_sources` of every chosen student."""
        return {
            f"student-{s.name}": role_sources(s, self.require_gold_emotion, self.rationale)
            for s in self.ordered_students()
        }

    def budget(self, n: int, student: Student) -> int:
        """Training tokens per role for `student` at a point of `n` conversations."""
        per_conversation = student.tokens_per_conversation or self.tokens_per_conversation
        return n * per_conversation if per_conversation else self.max_tokens_budget


def load_curve_config(path: str, **overrides: Any) -> CurveConfig:
    """The curve YAML, validated with `overrides` (the CLI's --points) in place; one line naming the key."""
    return load_config_file(path, CurveConfig, overrides, error=CompareError)
