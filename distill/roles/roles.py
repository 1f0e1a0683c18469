"""The roles: the single definition of every agent in a pipeline.

Each `RoleSpec` says what a role returns (its pydantic schema), what it reads (upstream roles),
how it is prompted (a full teacher renderer and a compact student renderer) and how it decodes.
The pipeline, the SFT dataset builder, training and eval learn everything about a role from its spec,
so the prompt a student is trained on is byte-for-byte the prompt it sees at inference. `ROLES` holds the
built-in (TRACE, MERG, EmoStage) roles, read-only; a declared pipeline's specs live on its own value
(distill.roles.declared), so two pipelines can share a process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Optional, Union

from pydantic import BaseModel

from data_prep.dialogues import Dialogue
from data_prep.retrieval import Exemplar
from distill.roles import schemas, teacher_prompts

PROMPT_VERSION = "v2"  # the teacher renderer: v2 is modelled on TRACE's agent specifications (see teacher_prompts)
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
    previous: Optional[BaseModel] = None  # this role's answer in the iteration the feedback is about


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
    # The PipelineConfig switch that runs this role (a bool field derived from the registry), its
    # default and help; None = always runs. `stage=False`: runs after the stages (the reflection audit).
    switch: Optional[str] = None
    default_on: bool = True
    switch_help: str = ""
    stage: bool = True
    # What the student answers, when it is less than `schema`: the decision without the rationale.
    # A 135M student that writes the teacher's rationale first conditions its label on its own weak
    # rationale, and scored lower that way in the 2026-11-23 real-data run (docs/architecture.md); the
    # shorter answer is also cheaper to train and decode.
    student_schema: Optional[type[BaseModel]] = None
    # A schema that depends on the run's enabled stages (the reflection audit names only those).
    stage_schema: Optional[Callable[[tuple[str, ...]], type[BaseModel]]] = None
    # The teacher's instruction for a role that reads the run's stages (the audit): built from the
    # stages present in the input, so it never asks about a stage that did not run.
    stage_task: Optional[Callable[[tuple[str, ...]], str]] = None
    # A role from a declared pipeline (distill.roles.declared): its pipeline's name, what later agents are
    # told it did, and the last dialogue turns it sees (None: all). Built-in roles have none of these.
    pipeline: Optional[str] = None
    brief: str = ""
    context_turns: Optional[int] = None
    # A declared role's upstream roles, from its own pipeline (a built-in role's are built-in): a prompt reads their
    # titles and briefs, and an upstream answer their schemas, from the pipeline the role belongs to.
    input_specs: tuple[RoleSpec, ...] = field(default=(), compare=False, repr=False)
    # The data holds this role's answer (ED's emotion label, the human listener's reply): the gold oracle and
    # direct rows can stand in for the teacher's (distill.roles.duties).
    gold_answer: bool = False

    def input_spec(self, name: str) -> RoleSpec:
        """The spec of `name`, one of this role's inputs."""
        found = next((spec for spec in self.input_specs if spec.name == name), None)
        return found if found is not None else ROLES[name]

    def render(self, inp: RoleInput, style: PromptStyle) -> Messages:
        return render_teacher(self, inp) if style == "teacher" else render_student(self, inp)

    def schema_for(self, style: PromptStyle, stages: Sequence[str] = ()) -> type[BaseModel]:
        """The schema this style answers with: the student's reduced one where the role has one, or the
        one built for the run's enabled ``stages`` where the role's depends on them."""
        if self.stage_schema is not None and stages:
            return self.stage_schema(tuple(stages))
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
        # constructed, not validated: a declared schema's texts must be non-empty, and what the student does not
        # write is empty by design (its own fields passed the student schema, which declares them alike)
        return self.schema.model_construct(**{**missing, **answer.model_dump()})


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
            upstream[name] = out if isinstance(out, BaseModel) else spec.input_spec(name).schema.model_validate(out)
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


_EXEMPLAR_HEADER = "Retrieved cases: how human listeners replied in similar situations:\n"
_EXEMPLAR_ROW = re.compile(r"^- situation: (.*)\n  emotion: .*\n  listener reply: (.*)$", re.M)


def _exemplar_block(exemplars: list[Exemplar]) -> str:
    rows = [f"- situation: {e.situation}\n  emotion: {e.emotion}\n  listener reply: {e.response}" for e in exemplars]
    return _EXEMPLAR_HEADER + "\n".join(rows)


def exemplar_texts(messages: Messages) -> list[str]:
    """The situations and listener replies of the exemplars a rendered teacher prompt carried.

    The inverse of `_exemplar_block`, kept beside it so the format has one owner: a trace records the
    prompt, not the retrieval, and the `exemplar_copy` check (distill.quality) reads the exemplars back.
    """
    texts = []
    for message in messages:
        content = message.get("content", "")
        at = content.find(_EXEMPLAR_HEADER)
        if at >= 0:
            block = content[at + len(_EXEMPLAR_HEADER) :].split("\n\n", 1)[0]
            texts += [text for row in _EXEMPLAR_ROW.findall(block) for text in row]
    return texts


def _schema_hint(schema: type[BaseModel]) -> str:
    fields = ", ".join(f'"{k}"' for k in schema.model_fields)
    return f"Answer with one JSON object with the keys {fields} and nothing else."


def _briefing(spec: RoleSpec, inp: RoleInput) -> str:
    """Which earlier agents ran and what each produced, as TRACE tells every later agent."""
    ran = [name for name in spec.inputs if name in inp.upstream]
    if not ran:
        return ""
    upstream = [spec.input_spec(name) for name in ran]
    lines = [f"- the {up.title} {brief_of(up)}." for up in upstream]
    return "Earlier agents in this team:\n" + "\n".join(lines)


def brief_of(spec: RoleSpec) -> str:
    """What later agents are told the role did: its declared brief, TRACE's for a built-in role, else (a declared role
    without one, `brief` being optional) the fields it answered with."""
    return (
        spec.brief
        or teacher_prompts.BRIEFS.get(spec.name)
        or f"answered with its {', '.join(spec.schema.model_fields)}"
    )


def _case_file(spec: RoleSpec, inp: RoleInput) -> list[str]:
    """The earlier agents' decisions, grouped under each agent's title."""
    blocks = []
    for name in spec.inputs:
        lines = _upstream_lines(inp, (name,))
        if lines:
            blocks.append(f"From the {spec.input_spec(name).title}:\n" + "\n".join(f"- {line}" for line in lines))
    return blocks


def render_teacher(spec: RoleSpec, inp: RoleInput) -> Messages:
    """Full instructions, label definitions, the briefing on earlier agents, exemplars and gold guidance.

    Like TRACE's agents, the teacher sees the dialogue, not ED's situation prompt (the seeker's own
    description, which often names the emotion); the situation is only the retrieval query.
    """
    task = spec.stage_task(tuple(inp.upstream)) if spec.stage_task is not None and inp.upstream else spec.task
    system = f"You are the {spec.title} in a team of agents that writes empathetic replies.\n\n{task}"
    parts = [f"Dialogue:\n{inp.dialogue.render_context(spec.context_turns)}"]
    briefing = _briefing(spec, inp)
    if briefing:
        parts.insert(0, briefing)
        parts += _case_file(spec, inp)
    if spec.uses_exemplars and inp.exemplars:
        parts.append(_exemplar_block(inp.exemplars))
    if inp.gold_emotion:
        parts.append(
            f"Reference: the seeker's true emotion is {inp.gold_emotion}. Make your analysis consistent with it."
        )
    if inp.gold_response:
        parts.append(f"Reference: the human listener actually replied: {inp.gold_response}")
    if inp.previous is not None:
        parts.append(f"Your previous answer: {inp.previous.model_dump_json()}")
    if inp.correction:
        parts.append(f"A reviewer found a problem with your previous answer: {inp.correction}")
    parts.append(_schema_hint(spec.schema))
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def render_student(spec: RoleSpec, inp: RoleInput) -> Messages:
    """A role tag and only the inputs the role needs; the behaviour lives in the adapter."""
    parts = [inp.dialogue.render_context(spec.context_turns)]
    up = _upstream_lines(inp, spec.inputs)
    if up:
        parts.append("\n".join(up))
    if inp.previous is not None:
        parts.append(f"previous: {spec.student_target(inp.previous).model_dump_json()}")
    if inp.correction:
        parts.append(f"fix: {inp.correction}")
    return [{"role": "system", "content": f"[{spec.name}]"}, {"role": "user", "content": "\n".join(parts)}]


# --- the built-in roles ------------------------------------------------------------------------
# Order is stage order. A new role is a schema plus one entry here: stages, config switches and CLI flags
# derive from it. Read-only: a declared pipeline's roles live on its own value (distill.roles.declared), never here.

_ALL_BEFORE_ERS = ("asi", "cae", "caef", "perspective", "phase", "srp", "plan")

ROLES: Mapping[str, RoleSpec] = MappingProxyType({
    spec.name: spec
    for spec in (
        RoleSpec(
            "asi", "Affective State Identifier", schemas.ASIOutput, (), 0.0, 96, teacher_prompts.ASI_TASK,
            student_schema=schemas.ASIDecision, gold_answer=True,
            switch="use_asi", switch_help="TRACE's emotion identifier (false ablates it)",
        ),
        RoleSpec(
            "cae", "Causal Analysis Engine", schemas.CAEOutput, ("asi",), 0.0, 192, teacher_prompts.CAE_TASK,
            switch="use_cae", switch_help="TRACE's cause analysis (false ablates it)",
        ),
        RoleSpec(
            "caef", "Consistency-Aware Emotion Forecaster", schemas.CAEFOutput, ("asi", "cae"), 0.0, 112,
            teacher_prompts.CAEF_TASK,
            switch="caef", default_on=False, switch_help="MERG's consistency-aware emotion forecast",
        ),
        RoleSpec(
            "perspective", "Perspective Taker", schemas.PerspectiveOutput, ("asi", "cae"), 0.0, 160,
            teacher_prompts.PERSPECTIVE_TASK,
            switch="perspective", default_on=False, switch_help="EmoStage perspective-taking role",
        ),
        RoleSpec(
            "phase", "Counselling Phase Recogniser", schemas.PhaseOutput, ("asi",), 0.0, 16,
            teacher_prompts.PHASE_TASK,
            switch="phase", default_on=False, switch_help="EmoStage counselling-phase role",
        ),
        RoleSpec(
            "srp", "Strategic Response Planner", schemas.SRPOutput, ("asi", "cae", "perspective", "phase"), 0.0,
            96, teacher_prompts.SRP_TASK,
            uses_exemplars=True, student_schema=schemas.SRPDecision,
            switch="use_srp", switch_help="TRACE's strategy planner (false ablates it)",
        ),
        RoleSpec(
            "plan", "Pragmatic Planner", schemas.PlanOutput, ("asi", "cae", "caef", "phase", "srp"), 0.0, 80,
            teacher_prompts.PLAN_TASK,
            switch="plan", default_on=False, switch_help="MERG pragmatic plan (goal, stance, tactic, tone)",
        ),
        RoleSpec(
            "ers", "Empathetic Response Synthesizer", schemas.ERSOutput, _ALL_BEFORE_ERS, 0.5, 128,
            teacher_prompts.ERS_TASK,
            uses_exemplars=True, gold_answer=True,
        ),
        RoleSpec(
            "gra", "Global Reflection Agent", schemas.GRAOutput, (*_ALL_BEFORE_ERS, "ers"), 0.0, 256,
            teacher_prompts.gra_task((*_ALL_BEFORE_ERS, "ers")),
            stage_schema=schemas.audit_schema, stage_task=teacher_prompts.gra_task, stage=False,
            switch="reflection", default_on=False,
            switch_help="MERG global reflection agent and refinement loop",
        ),
    )
})  # fmt: skip
STAGE_ORDER: tuple[str, ...] = tuple(name for name, spec in ROLES.items() if spec.stage)
# The stages a default PipelineConfig runs (TRACE's four): the quickstart's, the curve's and train's default roles
DEFAULT_STAGES: tuple[str, ...] = tuple(name for name, spec in ROLES.items() if spec.stage and spec.default_on)
CORE_ROLES = DEFAULT_STAGES  # its older name, which stored code and notebooks import
