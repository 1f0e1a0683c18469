"""A pipeline its user declares in YAML: roles, their inputs, answers, prompts and context, without editing the package.

A declaration (configs/pipelines/escot.yaml is the first) names each role, its title, the upstream roles it
reads, its answer fields (a text of at most N characters, or one label of a label set it declares), the
teacher's task, the sentence later agents hear about it, and how many of the dialogue's last turns it sees.
`declared_roles` turns it into real `RoleSpec`s, with pydantic answer schemas made by `create_model`, so
the same `Pipeline`, backends (constrained JSON included), datasets and training run them as TRACE's roles.

A pipeline config that names a declaration (`PipelineConfig.pipeline`) runs its roles in the declaration's stage
order (its inputs sorted topologically, ties in the order written); TRACE's built-in roles then do not run. The
roles live on the declaration's value (`DeclaredPipeline.specs`, `pipeline_roles`), never in a shared registry, so
two pipelines that declare the same role names run side by side. The declaration travels inside every trace's
config, so a trace run can be read (datasets, train, eval) without the YAML file (`stored_roles`).

Two rules tie a declared role to the rest of the toolkit: an answer field named `response` is the pipeline's
reply (`Trace.response`, the reply quality checks), and the student renderer is the generic compact one. TRACE's
mechanisms are options of any declaration: a role with `exemplars: true` is shown retrieved cases as TRACE's srp and
ers are, keyed on the pipeline's emotion role (distill.roles.duties), and the reflection audit (`reflection: true` in
the pipeline config) audits the declared stages (distill.roles.audit_role).
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

from data_prep.config_file import first_error, read_mapping
from distill.roles.audit_role import AUDIT_ROLE, declared_audit
from distill.roles.roles import ROLES, RoleSpec

REPLY_FIELD = "response"  # the answer field that makes a declared role the pipeline's reply
_NAME = r"^[a-z][a-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _name_problem(name: str) -> Optional[str]:
    """Why `name` cannot name an answer field or a role, or None. A field becomes an attribute of a pydantic model
    made by `create_model`, which fails with a traceback (or silently shadows a method) on these."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return "is not a Python identifier"
    if name.startswith("_"):
        return "is private (a leading underscore); name it without one"
    if name.startswith("model_") or name in dir(_Strict):
        return "is reserved by pydantic (model_* and BaseModel's attributes); choose another name"
    return None


def _not_blank(text: str) -> str:
    # The text is prompted: whitespace alone would send the teacher an empty instruction or title.
    if text and not text.strip():
        raise ValueError("only whitespace; write the text (or leave an optional one out)")
    return text


# Prompted text. A required one also takes `Field(min_length=1)`; an optional one defaults to "" (none), which
# stays valid because every trace's config carries the declaration with its defaults written out.
Text = Annotated[str, AfterValidator(_not_blank)]
Label = Annotated[Text, Field(min_length=1)]


class AnswerField(_Strict):
    """One field of a role's answer: free text of at most `text` characters, or one label of the set `label`."""

    text: Optional[StrictInt] = Field(None, ge=1, description="a text answer of at most this many characters")
    label: Optional[str] = Field(None, description="the name of a label set under the pipeline's `labels`")
    description: Text = Field("", description="what the field holds, as the teacher prompt and the JSON schema say")

    @model_validator(mode="after")
    def _one_kind(self) -> AnswerField:
        if (self.text is None) == (self.label is None):
            raise ValueError("an answer field is either `text: <max characters>` or `label: <label set>`")
        return self


class DeclaredRole(_Strict):
    name: str = Field(description="the role's name (lowercase; no built-in role's): its adapter's and tag's")
    title: Text = Field(min_length=1, description="how the teacher prompt addresses the agent, e.g. Emotion Recogniser")
    inputs: list[str] = Field(default_factory=list, description="upstream roles whose answers this role reads")
    answer: dict[str, AnswerField] = Field(
        min_length=1, description="the answer's fields: name -> {text: N} or {label: set}"
    )
    task: Text = Field(min_length=1, description="the teacher's instruction")
    brief: Text = Field("", description="what later agents are told this role did (one clause)")
    # Strict numbers: lax pydantic takes YAML's `true` as 1 (and 1.0 as a temperature).
    context_turns: Optional[StrictInt] = Field(None, description="the last K dialogue turns this role sees; null = all")
    student_answer: Optional[list[str]] = Field(
        None, description="the answer fields the student writes, in its order (e.g. the label first); null = all"
    )
    temperature: StrictFloat = Field(0.0, ge=0, description="sampling temperature (0: greedy)")
    max_new_tokens: StrictInt = Field(128, ge=1, description="the answer's token cap")
    exemplars: StrictBool = Field(
        False,
        description="show the teacher retrieved cases, as TRACE's srp and ers are shown them: precise (the emotion "
        "role's emotion) then fuzzy, the config's rag_k, fetched again when a rerun changes the emotion",
    )

    @field_validator("name")
    @classmethod
    def _role_name(cls, name: str) -> str:
        if problem := _name_problem(name):
            raise ValueError(f"role name {name!r} {problem}")
        if not re.match(_NAME, name):
            raise ValueError(f"role name {name!r} is not lowercase (a-z, 0-9 and _, starting with a letter)")
        return name

    @field_validator("answer")
    @classmethod
    def _field_names(cls, answer: dict[str, AnswerField]) -> dict[str, AnswerField]:
        for name in answer:
            if problem := _name_problem(name):
                raise ValueError(f"answer field {name!r} {problem}")
        return answer

    @field_validator("context_turns")
    @classmethod
    def _leaves_context(cls, turns: Optional[int]) -> Optional[int]:
        if turns is not None and turns < 1:
            raise ValueError(f"context_turns {turns} leaves the role no dialogue context (>= 1, or null for all)")
        return turns

    @model_serializer(mode="wrap")
    def _without_default_exemplars(self, handler: Any) -> dict[str, Any]:
        # left out when off: a declaration's dump is part of every trace's key and config, so the runs of
        # declarations written before the key existed keep their keys
        data = handler(self)
        if not self.exemplars:
            data.pop("exemplars", None)
        return data

    @model_validator(mode="after")
    def _student_fields_exist(self) -> DeclaredRole:
        unknown = [f for f in self.student_answer or () if f not in self.answer]
        if unknown or self.student_answer == []:
            raise ValueError(f"student_answer: {unknown or '[]'} are not answer fields of {self.name}")
        return self


class DeclaredPipeline(_Strict):
    name: str = Field(pattern=_NAME, description="the pipeline's name, recorded with its roles")
    labels: dict[str, list[Label]] = Field(default_factory=dict, description="label sets, each a list of labels")
    roles: list[DeclaredRole] = Field(min_length=1, description="the roles; they run in dependency order")

    @model_validator(mode="after")
    def _consistent(self) -> DeclaredPipeline:
        names = [r.name for r in self.roles]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"role(s) {', '.join(dupes)} declared twice")
        for role in self.roles:
            if role.name in ROLES:
                raise ValueError(f"role '{role.name}' is a built-in role's name; give the declared role another")
            if unknown := [i for i in role.inputs if i not in names]:
                raise ValueError(f"role '{role.name}': inputs name unknown role(s) {', '.join(unknown)}")
            for field, answer in role.answer.items():
                if answer.label is not None and answer.label not in self.labels:
                    raise ValueError(
                        f"role '{role.name}': answer '{field}' names no declared label set {answer.label!r}"
                    )
        for name, labels in self.labels.items():
            if not labels or len(set(labels)) != len(labels):
                raise ValueError(f"labels '{name}': a label set needs distinct labels")
        self.stage_order()  # a cycle is refused here, when the file is read
        return self

    def stage_order(self) -> tuple[str, ...]:
        """The roles sorted so every role comes after its inputs, ties in the order written; a cycle is refused."""
        inputs = {r.name: set(r.inputs) for r in self.roles}
        order: list[str] = []
        while len(order) < len(inputs):
            ready = [n for n in inputs if n not in order and inputs[n] <= set(order)]
            if not ready:
                raise ValueError(f"the inputs of role(s) {', '.join(_cycle(inputs, order))} make a cycle")
            order.append(ready[0])
        return tuple(order)

    def role(self, name: str) -> DeclaredRole:
        return next(r for r in self.roles if r.name == name)

    def specs(self) -> tuple[RoleSpec, ...]:
        """The roles as `RoleSpec`s, in stage order; equal declarations share them (one schema class per answer)."""
        return _specs(self.model_dump_json())


def _cycle(inputs: dict[str, set[str]], placed: list[str]) -> list[str]:
    """One cycle among the roles not yet placed, as `a -> b -> a` reads: walk inputs until a role repeats."""
    walk = [next(n for n in inputs if n not in placed)]
    while True:
        nxt = sorted(i for i in inputs[walk[-1]] if i not in placed)[0]
        if nxt in walk:
            return [*walk[walk.index(nxt) :], nxt][::-1]
        walk.append(nxt)


def load_pipeline(path: str | Path) -> DeclaredPipeline:
    """A declaration from its YAML file (the one config reader's); ValueError in one line naming the file and field.

    `extends: other.yaml` (relative to the file) declares a variant: the other file's declaration with this
    file's keys over it, a role named in both being that role with this file's role keys over its own."""
    raw = read_mapping(path, ValueError)
    if "extends" in raw:
        raw = _extended(raw, Path(path))
    try:
        return DeclaredPipeline.model_validate(raw)
    except ValidationError as err:
        raise ValueError(f"{path}: {first_error(err)}") from None


def variant_of(path: str | Path) -> Optional[tuple[str, Optional[frozenset[str]]]]:
    """For a variant: the pipeline it `extends` (that path joined to the variant's folder) and the roles it changes
    (None: every role, as when it changes a label set); None for a pipeline declared in full."""
    raw = read_mapping(path, ValueError)
    if "extends" not in raw:
        return None
    changed = frozenset(role.get("name") for role in raw.get("roles") or [] if isinstance(role, dict))
    changes_all = set(raw) - {"extends", "name", "roles"}
    return str(Path(path).parent / str(raw["extends"])), None if changes_all else changed


def base_of(path: str | Path) -> Optional[Path]:
    """The pipeline file a variant `extends` (resolved), or None for a pipeline declared in full."""
    variant = variant_of(path)
    return Path(variant[0]).resolve() if variant is not None else None


def _extended(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    variant = dict(raw)
    base_path = path.parent / str(variant.pop("extends"))
    base = read_mapping(base_path, ValueError)
    if "extends" in base:  # one level: a variant reads as its base plus what it says
        raise ValueError(f"{path}: extends {base_path}, itself a variant: extend the pipeline it extends")
    # the name is what a trace, dataset card and adapter says made it: the base's would pass the variant for it
    if variant.get("name", base.get("name")) == base.get("name"):
        raise ValueError(f"{path}: name: {base.get('name')!r} is the name of {base_path}, which it extends; "
                         "give the variant a name of its own")  # fmt: skip
    roles = {role.get("name"): role for role in base.get("roles") or [] if isinstance(role, dict)}
    for role in variant.pop("roles", None) or []:
        name = role.get("name") if isinstance(role, dict) else None
        if name not in roles:
            raise ValueError(f"{path}: roles: {name!r} is not a role of {base_path} (a variant changes its roles)")
        roles[name] = {**roles[name], **role}
    return {**base, **variant, "roles": list(roles.values())}


# --- declaration -> RoleSpecs ---------------------------------------------------------------------


def _answer_schema(pipeline: DeclaredPipeline, role: DeclaredRole, fields: list[str], suffix: str) -> type[BaseModel]:
    columns: dict[str, Any] = {}
    for name in fields:
        spec = role.answer[name]
        if spec.label is not None:
            labels = tuple(pipeline.labels[spec.label])
            columns[name] = (Literal[labels], Field(description=spec.description or f"one of {spec.label}"))
        else:  # min_length: an empty answer is no answer, so constrained decoding cannot close the string at once
            columns[name] = (str, Field(min_length=1, max_length=spec.text, description=spec.description))
    title = "".join(part.title() for part in f"{pipeline.name}_{role.name}_{suffix}".split("_"))
    return create_model(title, __base__=_Strict, **columns)


def _role_spec(pipeline: DeclaredPipeline, role: DeclaredRole, built: Mapping[str, RoleSpec]) -> RoleSpec:
    schema = _answer_schema(pipeline, role, list(role.answer), "answer")
    student = None
    if role.student_answer and role.student_answer != list(role.answer):  # fewer fields, or another order
        student = _answer_schema(pipeline, role, role.student_answer, "decision")
    return RoleSpec(
        role.name,
        role.title,
        schema,
        tuple(role.inputs),
        role.temperature,
        role.max_new_tokens,
        role.task.strip(),
        student_schema=student,
        pipeline=pipeline.name,
        brief=role.brief,
        context_turns=role.context_turns,
        input_specs=tuple(built[name] for name in role.inputs),
        uses_exemplars=role.exemplars,
    )


@lru_cache(maxsize=16)
def _specs(declaration_json: str) -> tuple[RoleSpec, ...]:
    # keyed on the declaration's JSON: every trace of a run carries it, and reading a run validates each one
    pipeline = DeclaredPipeline.model_validate_json(declaration_json)
    built: dict[str, RoleSpec] = {}
    for name in pipeline.stage_order():  # inputs first, so each role holds its inputs' specs
        built[name] = _role_spec(pipeline, pipeline.role(name), built)
    return tuple(built.values())


@lru_cache(maxsize=16)
def _roles(declaration_json: str) -> Mapping[str, RoleSpec]:
    # the audit follows the declared stages and reads them (distill.roles.audit_role), not TRACE's
    specs = _specs(declaration_json)
    builtin = {name: spec for name, spec in ROLES.items() if name != AUDIT_ROLE}
    declared = {spec.name: spec for spec in specs}
    return MappingProxyType({**builtin, **declared, AUDIT_ROLE: declared_audit(specs)})


def pipeline_roles(pipeline: Optional[DeclaredPipeline]) -> Mapping[str, RoleSpec]:
    """Every role a run of `pipeline` can name, read-only: the built-in roles and the declaration's own (its names
    differ from theirs), then the reflection audit of its stages; the built-in ones alone for None."""
    return ROLES if pipeline is None else _roles(pipeline.model_dump_json())


def stored_roles(config: Mapping[str, Any]) -> Mapping[str, RoleSpec]:
    """`pipeline_roles` of a run from its stored pipeline config (a trace's `config`, a dataset's build record): the
    declaration it carries, read again. A declaration this version cannot read gives the built-in roles alone, as a
    process that never ran it had before."""
    declared = config.get("pipeline")
    if not isinstance(declared, dict):
        return ROLES
    return _stored_roles(json.dumps(declared, default=str))  # keys in their order: an answer's fields are ordered


@lru_cache(maxsize=16)
def _stored_roles(declared_json: str) -> Mapping[str, RoleSpec]:
    try:
        pipeline = DeclaredPipeline.model_validate_json(declared_json)
    except ValidationError:
        return ROLES
    return pipeline_roles(pipeline)


def label_set(spec: RoleSpec, field: str) -> Optional[tuple[str, ...]]:
    """The labels a role's answer field may take, or None for a text field."""
    annotation = spec.schema.model_fields[field].annotation
    args = getattr(annotation, "__args__", ())
    return tuple(args) if args and all(isinstance(a, str) for a in args) else None
