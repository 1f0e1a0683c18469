"""The curve's students: how each is made from a point's traces (`Student`, `STUDENTS`, a config's `Variant`s),
which first stages it copies from its lender (`reused_stages`), and what each of its adapters learns, from
whom (`role_sources`, which curve.md prints beside every figure).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from distill.datasets.sft_tasks import JOINT
from distill.roles.declared import label_set
from distill.roles.duties import emotion_role, gold_roles, is_gold_reply, rationale_roles, reply_role
from distill.roles.roles import DEFAULT_STAGES, ROLES, RoleSpec


@dataclass(frozen=True)
class Student:
    """How one student is made from the point's traces, and how it runs."""

    name: str
    trains: tuple[str, ...]  # roles trained on this student's own datasets
    borrows: tuple[str, ...] = ()  # roles whose adapters are the lender's (the same recipe)
    lender: str = "traces"  # whose adapters the borrowed roles run (a decoding variant: its `like`)
    options: dict[str, Any] = field(default_factory=dict)  # DatasetOptions beyond the curve's own
    pipeline: dict[str, Any] = field(default_factory=dict)  # PipelineConfig beyond the student defaults
    joint: bool = False  # one adapter trained on every role's rows, at the roles' summed token budget
    rationale_task: bool = False  # asi/srp rows get rationale-task twins (source and share: the config's)
    tokens_per_conversation: Optional[int] = None  # this student's own budget (else the config's)
    seed: Optional[int] = None  # its LoRA init and data order (train's `seed`); None = the train config's


def _others(trains: tuple[str, ...]) -> tuple[str, ...]:
    """The default stages a student that trains `trains` borrows."""
    return tuple(r for r in DEFAULT_STAGES if r not in trains)


# the default stages the data cannot stand in for, switched off: what runs then is what the data holds
_GOLD_ONLY = {ROLES[r].switch: False for r in _others(gold_roles())}
_REPLY = reply_role()

STUDENTS: dict[str, Student] = {
    s.name: s
    for s in (
        Student("traces", DEFAULT_STAGES),
        Student("direct", gold_roles(), options={"inputs": "direct"}, pipeline={"direct": True, **_GOLD_ONLY}),
        Student("rationale", rationale_roles(), borrows=_others(rationale_roles()), rationale_task=True),
        Student("teacher-reply", (_REPLY,), borrows=_others((_REPLY,)), options={"ers_target": "teacher"}),
        Student("joint", (JOINT,), joint=True),
    )
}


# what an emotion-only system runs: the emotion role alone, its reply the data's own (so it spends no generation)
EMOTION_ONLY = {**_GOLD_ONLY, "oracle": {_REPLY: "gold"}}


def emotion_only(student: Student) -> Student:
    """The student's emotion agent alone: trained (when the student trains it), nothing borrowed."""
    trains = tuple(r for r in student.trains if r == emotion_role())
    return replace(student, trains=trains, borrows=(), pipeline={**student.pipeline, **EMOTION_ONLY})


class VariantOptions(BaseModel):
    """The dataset options a variant may change (`distill.datasets.options.DatasetOptions`)."""

    model_config = ConfigDict(extra="forbid")

    balance_emotions: Optional[bool] = Field(None, description="asi rows resampled to equal emotion counts")
    rationale: Optional[Literal["teacher", "situation"]] = Field(
        None, description="the rationale task's source; null = the curve's `rationale`"
    )
    rationale_share: Optional[float] = Field(
        None, gt=0, le=1, description="share of label rows given a rationale twin; null = the curve's"
    )
    quality: Optional[Literal["filter", "report", "off"]] = Field(
        None, description="the trace quality checks on the student's rows: off trains on what the teacher wrote"
    )


class DecodingOptions(BaseModel):
    """How a variant samples (`distill.pipeline.config.PipelineConfig`'s per-role fields of the same names)."""

    model_config = ConfigDict(extra="forbid")

    temperatures: Optional[dict[str, float]] = Field(None, description="per-role temperature (pipeline.temperatures)")
    top_p: Optional[dict[str, float]] = Field(None, description="per-role nucleus sampling (pipeline.top_p)")
    min_p: Optional[dict[str, float]] = Field(None, description="per-role min-p sampling (pipeline.min_p)")
    typical_p: Optional[dict[str, float]] = Field(None, description="per-role typical sampling (pipeline.typical_p)")
    consensus: Optional[dict[str, int]] = Field(
        None, description="per-role samples for consensus reranking (pipeline.consensus)"
    )
    consensus_by: Optional[Literal["chrf", "minilm"]] = Field(
        None, description="what consensus calls alike (pipeline.consensus_by)"
    )


class Variant(BaseModel):
    """A lever: a student made like `like`, with other dataset options, its own budget or other decoding."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="the system is `student-<name>`")
    like: Literal["traces", "direct", "rationale", "teacher-reply"] = Field(
        description="the student it is made like: its lender, whose adapters it runs when only decoding differs"
    )
    options: VariantOptions = Field(default_factory=VariantOptions, description="dataset options that differ")
    tokens_per_conversation: Optional[int] = Field(None, ge=1, description="this variant's budget per role")
    roles: Optional[list[str]] = Field(
        None, min_length=1, description="the roles it trains anew (at its budget); the others run `like`'s "
        "adapters. null = all of `like`'s, e.g. [ers] with a budget raises the reply's tokens alone",
    )  # fmt: skip
    seed: Optional[int] = Field(
        None, description="its LoRA init and data order (train's seed) and its sampling seed (pipeline.seed): a "
        "repeat of `like` under another seed; null = the train config's and the pipeline's",
    )  # fmt: skip
    decoding: Optional[DecodingOptions] = Field(None, description="sampling settings its pipeline runs with")

    @model_validator(mode="after")
    def _roles_of_like(self) -> Variant:
        trained = STUDENTS[self.like].trains
        unknown = [r for r in self.roles or () if r not in trained]
        if unknown:
            raise ValueError(
                f"roles: {', '.join(unknown)} not among the roles '{self.like}' trains ({', '.join(trained)})"
            )
        return self

    def retrains(self) -> bool:
        """Whether the variant needs adapters of its own (other data, budget, roles or seed) rather than `like`'s."""
        changed = (self.tokens_per_conversation, self.roles, self.seed)
        return bool(self.options.model_dump(exclude_none=True)) or any(v is not None for v in changed)

    def student(self) -> Student:
        base = STUDENTS[self.like]
        decoding = self.decoding.model_dump(exclude_none=True) if self.decoding else {}
        pipeline = {**base.pipeline, **decoding, **({} if self.seed is None else {"seed": self.seed})}
        if not self.retrains():  # the same adapters, sampled otherwise: borrow all of them from `like`
            borrowed = base.trains + base.borrows
            return replace(base, name=self.name, trains=(), borrows=borrowed, lender=base.name, pipeline=pipeline)
        options = {**base.options, **self.options.model_dump(exclude_none=True)}
        trains = tuple(r for r in base.trains if r in (self.roles or base.trains))
        if trains != base.trains:  # the roles it keeps run `like`'s adapters (or what `like` borrows itself)
            kept = tuple(r for r in base.trains + base.borrows if r not in trains)
            base = replace(base, borrows=kept, lender=base.name)
        return replace(
            base,
            name=self.name,
            trains=trains,
            options=options,
            pipeline=pipeline,
            tokens_per_conversation=self.tokens_per_conversation,
            seed=self.seed,
        )


DECODING = tuple(DecodingOptions.model_fields)  # the pipeline fields a decoding variant sets


def reused_stages(student: Student, lender: Student) -> tuple[str, ...]:
    """The first stages `student` runs exactly as `lender` does (the lender's adapters, the same decoding),
    so its generation copies them from the lender's run (`PipelineConfig.reuse`) instead of rerunning them."""
    from distill.pipeline.config import PipelineConfig

    def rest(pipeline: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in pipeline.items() if k not in DECODING}

    if student.name == lender.name or rest(student.pipeline) != rest(lender.pipeline):
        return ()
    stages = PipelineConfig(**student.pipeline).stages()
    same: list[str] = []
    for role in stages:
        decoded = role_decoding(student.pipeline, role) == role_decoding(lender.pipeline, role)
        if role not in student.borrows or role in student.pipeline.get("oracle", {}) or not decoded:
            break
        same.append(role)
    return tuple(same)


def role_decoding(pipeline: dict[str, Any], role: str) -> dict[str, Any]:
    """How `role` samples under `pipeline`: its per-role decoding fields, and what consensus calls alike where
    the role reranks (`consensus_by` is one setting for every role)."""
    decoding = {f: (pipeline.get(f) or {}).get(role) for f in DECODING if f != "consensus_by"}
    if decoding["consensus"]:
        decoding["consensus_by"] = pipeline.get("consensus_by") or "chrf"
    return decoding


# --- what each student learns from whom ------------------------------------------------------------


def _teacher_target(spec: RoleSpec) -> str:
    """What the student learns of the teacher's answer, in words: its fields (a lone label named as one)."""
    schema = spec.student_schema or spec.schema
    names = list(schema.model_fields)
    if len(names) == 1:
        return f"teacher's {names[0]}" + (" label" if label_set(spec, names[0]) else "")
    return f"teacher's {', '.join(names[:-1])} and {names[-1]}"


def _target_source(role: str, options: dict[str, Any], gold_filtered: bool) -> str:
    if role == emotion_role():
        if options.get("inputs") == "direct" or gold_filtered:
            # a traces row is kept only when the teacher agreed with gold: its label IS the gold label
            return "gold label" + ("" if options.get("inputs") == "direct" else " (rows where the teacher agreed)")
        return "teacher's label"
    if is_gold_reply(role):
        return "human reply" if options.get("ers_target", "gold") == "gold" else "teacher's reply"
    return _teacher_target(ROLES[role])


def _input_source(role: str, options: dict[str, Any]) -> str:
    if options.get("inputs") == "direct":
        return "dialogue"
    upstream = [r for r in ROLES[role].inputs if r in DEFAULT_STAGES]
    return "dialogue" + (f" + teacher's {', '.join(upstream)}" if upstream else "")


def role_sources(student: Student, gold_filtered: bool, rationale: str) -> dict[str, dict[str, str]]:
    """Per role: the source of the target the adapter learns and of the input it sees (its lender's for a
    borrowed role), given the curve's `require_gold_emotion` and rationale source. The curve report prints
    this beside every figure."""
    lender = STUDENTS[student.lender]
    out = {}
    for role in student.borrows + tuple(r for r in student.trains if r != JOINT) or DEFAULT_STAGES:
        owner = lender if role in student.borrows else student
        options = {"ers_target": "gold", **owner.options}
        row = {"target": _target_source(role, options, gold_filtered), "input": _input_source(role, options)}
        if owner.rationale_task and role in rationale_roles():
            human = options.get("rationale", rationale) == "situation"
            row["target"] += "; rationale-task twin: " + ("ED's situation (human)" if human else "teacher's reasoning")
        if role in student.borrows:
            row["adapter"] = f"student-{lender.name}'s"
        out[role] = row
    return dict(sorted(out.items(), key=lambda kv: DEFAULT_STAGES.index(kv[0])))
