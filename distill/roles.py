"""The role registry: the single definition of every agent in the pipeline.

Each `RoleSpec` says what a role returns (its pydantic schema), what it reads (upstream roles),
how it is prompted (a full teacher renderer and a compact student renderer) and how it decodes.
The pipeline, the SFT dataset builder, training and eval learn everything about a role from here,
so the prompt a student is trained on is byte-for-byte the prompt it sees at inference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from pydantic import BaseModel

from data_prep.dialogues import Dialogue
from data_prep.retrieval import Exemplar
from data_prep.taxonomy import (
    CAUSE_DEFINITIONS,
    EKMAN_DEFINITIONS,
    PHASE_DEFINITIONS,
    PLAN_DIMENSIONS,
    STRATEGY_DEFINITIONS,
)
from distill import schemas

PROMPT_VERSION = "v1"  # the teacher renderer
# The student renderer and the student's answer format: v2 = classification roles answer with the
# decision alone (`RoleSpec.student_schema`). Adapters record the version they were trained on.
STUDENT_PROMPT_VERSION = "v2"
PromptStyle = Literal["teacher", "student"]
Messages = list[dict[str, str]]


@dataclass
class RoleInput:
    """Everything a role may see for one dialogue. Disabled upstream roles are simply absent."""

    dialogue: Dialogue
    upstream: dict[str, BaseModel] = field(default_factory=dict)
    exemplars: Optional[list[Exemplar]] = None
    gold_emotion: Optional[str] = None  # STaR-style rationalisation: teacher only
    gold_response: Optional[str] = None
    correction: Optional[str] = None  # the reflection agent's feedback for this role


@dataclass(frozen=True)
class RoleSpec:
    name: str
    title: str
    schema: type[BaseModel]
    inputs: tuple[str, ...]
    temperature: float
    max_new_tokens: int
    task: str  # the teacher's instruction for this role
    uses_exemplars: bool = False
    optional: bool = False
    # What the student answers, when it is less than `schema`: the decision without the rationale.
    # A 135M student that writes the teacher's rationale first conditions its label on its own weak
    # rationale: in the real-data experiment its asi scored 0.41 I-ACC that way and 0.56 trained on
    # the decision alone (same 465 examples), and the shorter answer is cheaper to train and decode.
    student_schema: Optional[type[BaseModel]] = None

    def render(self, inp: RoleInput, style: PromptStyle) -> Messages:
        return render_teacher(self, inp) if style == "teacher" else render_student(self, inp)

    def schema_for(self, style: PromptStyle) -> type[BaseModel]:
        """The schema this style answers with: the student's reduced one where the role has one."""
        return self.student_schema if style == "student" and self.student_schema is not None else self.schema

    def student_target(self, answer: BaseModel) -> BaseModel:
        """The part of a full (teacher) answer that the student learns to produce."""
        if self.student_schema is None:
            return answer
        return self.student_schema.model_validate(answer.model_dump(include=set(self.student_schema.model_fields)))

    def from_student(self, answer: BaseModel) -> BaseModel:
        """A student answer in the role's full schema, the rationale it does not write left empty.

        Traces, downstream prompts and eval then read one schema whichever style produced it.
        """
        if self.student_schema is None or isinstance(answer, self.schema):
            return answer
        missing = {k: "" for k in self.schema.model_fields if k not in self.student_schema.model_fields}
        return self.schema.model_validate({**missing, **answer.model_dump()})


def prompt_version(style: PromptStyle) -> str:
    return PROMPT_VERSION if style == "teacher" else STUDENT_PROMPT_VERSION


def build_role_input(
    spec: RoleSpec, dialogue: Dialogue, outputs: Mapping[str, Union[BaseModel, dict]], **extra
) -> RoleInput:
    """The `RoleInput` for `spec` given the outputs of earlier stages (parsed models or plain dicts).

    The pipeline (inference) and the SFT dataset builder (training) both call this, so a student is
    trained on exactly the upstream view it gets at inference. Only the roles `spec` reads are kept;
    dicts are validated into their role's schema (pydantic's ValidationError on a bad one). `extra`
    passes exemplars, gold guidance or a correction through to `RoleInput`.
    """
    upstream: dict[str, BaseModel] = {}
    for name in spec.inputs:
        out = outputs.get(name)
        if out is not None:
            upstream[name] = out if isinstance(out, BaseModel) else ROLES[name].schema.model_validate(out)
    return RoleInput(dialogue=dialogue, upstream=upstream, **extra)


# --- how upstream outputs read inside a prompt -------------------------------------------------


def _upstream_lines(inp: RoleInput, wanted: tuple[str, ...]) -> list[str]:
    """One compact line per upstream field; roles that did not run produce no line at all."""
    lines = []
    for name in wanted:
        out = inp.upstream.get(name)
        if out is None:
            continue
        for key, value in out.model_dump().items():
            if key in ("reasoning", "checks", "earliest_failure", "correction"):
                continue  # rationales stay with their own role; downstream roles read the decision
            if isinstance(value, list):
                value = " | ".join(map(str, value))
            lines.append(f"{key}: {value}")
    return lines


def _exemplar_block(exemplars: list[Exemplar]) -> str:
    rows = [f"- situation: {e.situation}\n  emotion: {e.emotion}\n  listener reply: {e.response}" for e in exemplars]
    return (
        "Examples of how human listeners replied in similar situations (mirror their tone, do not copy):\n"
        + "\n".join(rows)
    )


def _schema_hint(schema: type[BaseModel]) -> str:
    fields = ", ".join(f'"{k}"' for k in schema.model_fields)
    return f"Answer with one JSON object with the keys {fields} and nothing else."


def render_teacher(spec: RoleSpec, inp: RoleInput) -> Messages:
    """Full instructions, label definitions, exemplars and (optionally) gold guidance."""
    system = f"You are the {spec.title} in a team of agents that writes empathetic replies.\n{spec.task}"
    parts = [f"Situation: {inp.dialogue.situation}", f"Dialogue:\n{inp.dialogue.render_context()}"]
    up = _upstream_lines(inp, spec.inputs)
    if up:
        parts.append("Analysis so far:\n" + "\n".join(up))
    if spec.uses_exemplars and inp.exemplars:
        parts.append(_exemplar_block(inp.exemplars))
    if inp.gold_emotion:
        parts.append(
            f"Reference: the seeker's true emotion is {inp.gold_emotion}. Make your analysis consistent with it."
        )
    if inp.gold_response:
        parts.append(f"Reference: the human listener actually replied: {inp.gold_response}")
    if inp.correction:
        parts.append(f"A reviewer found a problem with your previous answer: {inp.correction}")
    parts.append(_schema_hint(spec.schema))
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def render_student(spec: RoleSpec, inp: RoleInput) -> Messages:
    """A role tag and only the inputs the role needs; the behaviour lives in the adapter."""
    parts = [inp.dialogue.render_context()]
    up = _upstream_lines(inp, spec.inputs)
    if up:
        parts.append("\n".join(up))
    if inp.correction:
        parts.append(f"fix: {inp.correction}")
    return [{"role": "system", "content": f"[{spec.name}]"}, {"role": "user", "content": "\n".join(parts)}]


# --- the registry ------------------------------------------------------------------------------


def _defs(d: dict[str, str]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in d.items())


_PLAN_TEXT = "\n".join(f"- {dim}: one of {', '.join(vals)}" for dim, vals in PLAN_DIMENSIONS.items())

ROLES: dict[str, RoleSpec] = {
    "asi": RoleSpec(
        "asi",
        "Affective State Identifier",
        schemas.ASIOutput,
        (),
        0.0,
        96,
        "Identify the seeker's dominant emotion as one of Ekman's six:\n"
        + _defs(EKMAN_DEFINITIONS)
        + "\nGive a short reasoning that cites cues in the seeker's words, then the emotion.",
        student_schema=schemas.ASIDecision,
    ),
    "cae": RoleSpec(
        "cae",
        "Causal Analysis Engine",
        schemas.CAEOutput,
        ("asi",),
        0.0,
        128,
        "Find why the seeker feels this way. Quote 1-2 short trigger spans verbatim from the seeker's turns, "
        "summarise the cause in one sentence, and pick one cause category:\n" + _defs(CAUSE_DEFINITIONS),
    ),
    "perspective": RoleSpec(
        "perspective",
        "Perspective Taker",
        schemas.PerspectiveOutput,
        ("asi", "cae"),
        0.0,
        128,
        "Take the seeker's perspective: describe their psychological state and the support they need, "
        "one short sentence each.",
        optional=True,
    ),
    "phase": RoleSpec(
        "phase",
        "Counselling Phase Recogniser",
        schemas.PhaseOutput,
        ("asi",),
        0.0,
        16,
        "Decide which counselling phase the conversation is in:\n" + _defs(PHASE_DEFINITIONS),
        optional=True,
    ),
    "srp": RoleSpec(
        "srp",
        "Strategic Response Planner",
        schemas.SRPOutput,
        ("asi", "cae", "perspective", "phase"),
        0.0,
        96,
        "Choose the communication strategy for the reply:\n"
        + _defs(STRATEGY_DEFINITIONS)
        + "\nGive a short reasoning, then the strategy.",
        uses_exemplars=True,
        student_schema=schemas.SRPDecision,
    ),
    "plan": RoleSpec(
        "plan",
        "Pragmatic Planner",
        schemas.PlanOutput,
        ("asi", "cae", "phase", "srp"),
        0.0,
        80,
        "Plan the reply along four pragmatic dimensions:\n" + _PLAN_TEXT,
        optional=True,
    ),
    "ers": RoleSpec(
        "ers",
        "Empathetic Response Synthesizer",
        schemas.ERSOutput,
        ("asi", "cae", "perspective", "phase", "srp", "plan"),
        0.5,
        96,
        "Write the listener's next turn: one or two sentences that follow the chosen strategy, weave in a "
        "concrete detail from the trigger spans, and speak directly to the seeker.",
        uses_exemplars=True,
    ),
    "gra": RoleSpec(
        "gra",
        "Global Reflection Agent",
        schemas.GRAOutput,
        ("asi", "cae", "perspective", "phase", "srp", "plan", "ers"),
        0.0,
        256,
        "Audit the analysis stages in order. For each stage say whether it passed: the emotion fits the "
        "dialogue, the cause is grounded in the seeker's words, the strategy suits the emotion, and the "
        "reply is empathetic, specific and consistent with the plan. Name the earliest failed stage "
        "(or null) and give a one-sentence correction for it.",
        optional=True,
    ),
}
STAGE_ORDER: tuple[str, ...] = ("asi", "cae", "perspective", "phase", "srp", "plan", "ers")
CORE_ROLES: tuple[str, ...] = ("asi", "cae", "srp", "ers")


def get_role(name: str) -> RoleSpec:
    try:
        return ROLES[name]
    except KeyError:
        raise ValueError(f"unknown role '{name}' (known: {', '.join(ROLES)})") from None
