"""Pipeline configuration: which roles run, how they are prompted, and the TRACE/MERG/EmoStage switches.

YAML files under configs/ fill these models; their keys mirror the CLI flags. The defaults are the `trace`
preset: TRACE's four roles, exemplar retrieval with its code's top-2 and no similarity threshold, and its
temperatures (the registry's). One default departs from TRACE: an invalid answer is retried at temperature
0.7 or more (`retry_temperature`), where TRACE's code retries at the same settings (`retry_temperature: null`);
at temperature 0 a local model repeats its invalid answer. Every other switch goes beyond TRACE and is off by
default.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator, model_validator

from data_prep.retrieval import TRACE_TOP_K
from distill.backends import BACKEND_TYPES
from distill.pipeline.label_decoding import LabelDecodingMode, check_option
from distill.pipeline.reflection import FinalSelection
from distill.pipeline.stage_key import content_fingerprint
from distill.pipeline.store import TRACES_FILE
from distill.roles.declared import DeclaredPipeline, load_pipeline, pipeline_roles
from distill.roles.duties import exemplar_key_problem, gold_roles
from distill.roles.roles import ROLES, STAGE_ORDER, RoleSpec

# Fields newer than stored trace runs: part of a trace's key only when not at their default.
KEYED_WHEN_SET = (
    "direct", "oracle", "oracle_traces", "final_selection", "reflection_backend", "retry_temperature", "top_p", "min_p",
    "typical_p", "reuse", "reuse_from", "stop_loops", "consensus", "consensus_by", "pipeline", "skip", "label_decoding",
)  # fmt: skip
# Retired fields, at the value every run had: runs without reflection, whose outputs never read them, keep
# them in their key so traces made before the retirement still resume. (With reflection on, MERG's final pick
# changed when later_iteration_penalty went, so those runs must not resume.)
RETIRED_WITHOUT_REFLECTION = {"later_iteration_penalty": 0.5}


class _PipelineSettings(BaseModel):
    """Everything but the role switches, which `PipelineConfig` adds from the registry."""

    model_config = ConfigDict(extra="forbid")

    # First, so the per-role fields below are checked against its roles (`ValidationInfo.data`).
    pipeline: Optional[DeclaredPipeline] = Field(
        None,
        description="a declared pipeline (distill.roles.declared): its YAML file, e.g. configs/pipelines/escot.yaml, "
        "whose roles run in its stage order instead of TRACE's; stored in full in every trace's config",
    )
    skip: list[str] = Field(
        default_factory=list,
        description="roles of the declared pipeline that do not run (later roles read them absent)",
    )

    max_refinements: int = Field(2, ge=0, le=5, description="reflection: reruns after the first pass (MERG: 2)")
    final_selection: FinalSelection = Field(
        "best",
        description="best: the iteration whose stage checks are lexicographically best, ties to the earliest; "
        "last: the last complete iteration (no selection)",
    )
    reflection_backend: Optional[dict[str, Any]] = Field(
        None, description="backend config for the audit alone (as in a YAML's `backend:`); null = the pipeline's"
    )

    rag: bool = Field(
        True,
        description="show retrieved exemplars (teacher prompts) to the roles shown them: srp/ers, a declared role "
        "with `exemplars: true`",
    )
    rag_k: int = Field(TRACE_TOP_K, ge=1, description="exemplars per prompt (TRACE: 2)")
    rag_tau: Optional[float] = Field(
        None, ge=-1, le=1, description="cosine threshold for both searches; null = none, as in TRACE's code"
    )

    prompt_style: Literal["teacher", "student"] = Field(
        "teacher", description="teacher: full instructions and exemplars; student: the compact adapter prompt"
    )
    gold_emotion: bool = Field(False, description="tell the teacher the gold emotion (STaR rationalisation)")
    gold_response: bool = Field(False, description="also tell the teacher the gold listener reply")
    use_adapters: bool = Field(False, description="route each stage to its role adapter (the student)")

    direct: bool = Field(
        False, description="every role sees the dialogue alone, no earlier role's output (the direct student)"
    )
    oracle: dict[str, Literal["gold", "teacher"]] = Field(
        default_factory=dict,
        description="feed a stage the gold answer (asi, ers) or the teacher's (any role, from oracle_traces) "
        "instead of generating it: role attribution, e.g. {asi: gold} or {cae: teacher}",
    )
    oracle_traces: Optional[str] = Field(None, description="the teacher's trace run that `oracle: teacher` reads")
    reuse: list[str] = Field(
        default_factory=list,
        description="the first stages, copied from `reuse_from` (a run of this pipeline with the same adapters and "
        "decoding for them) instead of generated again: e.g. a variant that samples only ers otherwise",
    )
    reuse_from: Optional[str] = Field(None, description="the stored trace run that `reuse` copies stages from")

    max_attempts: int = Field(3, ge=1, description="generations per step before it is recorded as failed")
    retry_temperature: Optional[float] = Field(
        0.7,
        ge=0,
        description="an invalid answer is regenerated at max(role temperature, this) with a new seed; null = "
        "the same settings, as TRACE's code retries (at temperature 0 a local greedy model then repeats its "
        "invalid answer, e.g. a reasoning cut at the token limit, which is why it is not the default)",
    )
    stop_loops: bool = Field(
        False,
        description="end an answer as a failed attempt as soon as it loops (the `loop` quality check on what is "
        "decoded so far) instead of at the token cap, where the quality gates would reject it anyway; the local "
        "backend's continuous decoder only (an API answer cannot be cut short)",
    )
    temperatures: dict[str, float] = Field(
        default_factory=dict, description="per-role override of the registry default"
    )
    top_p: dict[str, float] = Field(
        default_factory=dict,
        description="per-role nucleus sampling, in (0, 1]: sample from the fewest most-likely tokens whose "
        "probability reaches it; only where the role samples (temperature > 0), a retry keeps it; unset = 1 (off)",
    )
    min_p: dict[str, float] = Field(
        default_factory=dict,
        description="per-role min-p sampling, in [0, 1): drop tokens below min_p x the most likely token's "
        "probability; only where the role samples (temperature > 0), a retry keeps it; unset = 0 (off)",
    )
    typical_p: dict[str, float] = Field(
        default_factory=dict,
        description="per-role locally typical sampling (Meister et al. 2023), in (0, 1]: keep the tokens whose "
        "surprise lies nearest the entropy, up to this much probability; the local backend only, where the role "
        "samples, a retry keeps it; unset = 1 (off)",
    )
    consensus: dict[str, int] = Field(
        default_factory=dict,
        description="per-role consensus reranking (minimum Bayes risk), 2 to 16 samples: where the role samples, "
        "draw that many answers and keep the one most like the others by chrF (`distill.pipeline.consensus`); "
        "its tokens and latency count every sample; unset = one sample",
    )
    consensus_by: Literal["chrf", "minilm"] = Field(
        "chrf",
        description="what `consensus` calls alike: chrF (characters; favours the longest sample) or the cosine of "
        "MiniLM sentence embeddings (meaning)",
    )
    label_decoding: dict[str, LabelDecodingMode] = Field(
        default_factory=dict,
        description="per-role label ranking, `{role: rank}` (or `{role.field: rank}` where the answer has several "
        "label fields): score every label of the field's set after the prompt and the answer so far, keep the most "
        "likely; rank-calibrated first subtracts each label's score under a content-free prompt (Zhao et al. "
        "2021); the local backend only (distill.backends.label_rank); unset = generated like any text",
    )
    seed: int = Field(0, description="the sampling seed: each request draws from its own stream derived from it")

    @field_validator("pipeline", mode="before")
    @classmethod
    def _declaration_file(cls, value: Any) -> Any:
        return load_pipeline(value) if isinstance(value, (str, Path)) else value

    @model_validator(mode="after")
    def _declared_run(self) -> _PipelineSettings:
        if self.skip and self.pipeline is None:
            raise ValueError("skip: names roles of a declared pipeline, and no `pipeline` is declared")
        if unknown := [r for r in self.skip if r not in (self.pipeline.stage_order() if self.pipeline else ())]:
            raise ValueError(f"skip: {', '.join(unknown)} not a role of pipeline '{self.pipeline.name}'")
        if self.pipeline is not None and not self.stages():
            raise ValueError("a declared pipeline runs at least one of its roles")
        return self

    @model_validator(mode="after")
    def _exemplar_key(self) -> _PipelineSettings:
        # refused here, not at the first search after a whole stage has run
        if self.rag and (problem := exemplar_key_problem(self.roles, self.stages())):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _oracle_sources(self) -> _PipelineSettings:
        for role, source in self.oracle.items():
            if role not in self.roles or not self.roles[role].stage:
                raise ValueError(f"oracle: '{role}' is not a pipeline stage (stages: {', '.join(STAGE_ORDER)})")
            if source == "gold" and role not in gold_roles(self.roles):
                gold = ", ".join(gold_roles(self.roles))
                raise ValueError(f"oracle: {role}: the data has no gold {role} answer (gold: {gold}; else teacher)")
        if "teacher" in self.oracle.values() and not self.oracle_traces:
            raise ValueError("oracle: a 'teacher' answer needs oracle_traces (the teacher's trace run)")
        return self

    @model_validator(mode="after")
    def _reused_prefix(self) -> _PipelineSettings:
        if not self.reuse:
            return self
        # a later stage reads the earlier ones: a copied stage above a regenerated one would not be the
        # answer this pipeline gives, and reflection reruns stages the copy cannot follow
        if self.reuse != self.stages()[: len(self.reuse)]:
            raise ValueError(f"reuse: {self.reuse} must be the first stages in order (stages: {self.stages()})")
        if set(self.reuse) & set(self.oracle):
            raise ValueError(f"reuse: {sorted(set(self.reuse) & set(self.oracle))} also has an oracle")
        if self.reflection or not self.reuse_from:
            raise ValueError("reuse: needs reuse_from (the stored run) and runs without reflection")
        return self

    @field_validator("top_p", "min_p", "typical_p")
    @classmethod
    def _truncation_per_role(cls, values: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        a_mass = info.field_name != "min_p"  # top_p and typical_p are probability masses, 1 = off
        roles = _roles_so_far(info)
        for role, value in values.items():
            if role not in roles:
                raise ValueError(f"'{role}' is not a role (roles: {', '.join(roles)})")
            if not (0 < value <= 1 if a_mass else 0 <= value < 1):
                raise ValueError(f"{role}: {value} is outside {'(0, 1]' if a_mass else '[0, 1)'}")
        return values

    @field_validator("consensus")
    @classmethod
    def _samples_per_role(cls, values: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        roles = _roles_so_far(info)
        for role, samples in values.items():
            if role not in roles:
                raise ValueError(f"'{role}' is not a role (roles: {', '.join(roles)})")
            if not 2 <= samples <= 16:
                raise ValueError(f"{role}: {samples} samples; consensus takes 2 to 16")
        return values

    @field_validator("label_decoding")
    @classmethod
    def _label_fields(cls, values: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        return check_option(values, _roles_so_far(info))

    @model_validator(mode="after")
    def _ranked_or_voted(self) -> _PipelineSettings:
        # consensus votes among sampled answers; a ranked label is not sampled
        if both := sorted({key.partition(".")[0] for key in self.label_decoding} & set(self.consensus)):
            raise ValueError(f"label_decoding and consensus both set for {', '.join(both)}: choose one")
        return self

    @field_validator("reflection_backend")
    @classmethod
    def _known_backend(cls, cfg: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        # checked here, not when the first audit builds it after a whole pass of the pipeline
        if cfg is not None and cfg.get("type") not in BACKEND_TYPES:
            raise ValueError(f"needs a 'type', one of {', '.join(BACKEND_TYPES)}; got {cfg.get('type')!r}")
        return cfg

    @property
    def roles(self) -> Mapping[str, RoleSpec]:
        """Every role this config can name, read-only: the built-in ones, and its declared pipeline's own."""
        return pipeline_roles(self.pipeline)

    def runs(self, role: str) -> bool:
        """Whether `role` runs: a declared pipeline's own roles less `skip`, else TRACE's by their switches, and the
        audit by `reflection` in either; a role this config does not have (another pipeline's) never does."""
        return self._runs(self.roles.get(role))

    def _runs(self, spec: Optional[RoleSpec]) -> bool:
        if spec is None:
            return False
        if not spec.stage:  # the audit: after any pipeline's stages, by its switch
            return bool(getattr(self, spec.switch))
        if self.pipeline is not None:
            return spec.pipeline == self.pipeline.name and spec.name not in self.skip
        return spec.pipeline is None and (spec.switch is None or bool(getattr(self, spec.switch)))

    def stages(self) -> list[str]:
        """Enabled generation stages in order (gra excluded: it runs after them)."""
        roles = self.roles
        order = self.pipeline.stage_order() if self.pipeline is not None else STAGE_ORDER
        return [r for r in order if self._runs(roles[r])]

    def key_dict(self) -> dict[str, Any]:
        """The part of the config that changes outputs, for trace keys.

        A field added after trace runs were made enters the key only when it is set, so those runs
        keep their keys (and resume) as long as they do not use it. A trace run the pipeline reads answers
        from (`oracle_traces`, `reuse_from`) enters as its traces' content: where it lies is no input, so a
        run folder moved or named another way keeps its traces' keys.
        """
        data = self.model_dump()
        for name in KEYED_WHEN_SET:
            if data[name] == type(self).model_fields[name].get_default(call_default_factory=True):
                del data[name]
        for name in ("oracle_traces", "reuse_from"):
            if name in data:
                data[name] = {"traces": content_fingerprint(Path(data[name]) / TRACES_FILE)}
        if not data["reflection"]:
            data.update(RETIRED_WITHOUT_REFLECTION)
        return data


def _roles_so_far(info: ValidationInfo) -> Mapping[str, RoleSpec]:
    """The roles a per-role field may name: `pipeline_roles` of the declared pipeline validated before it."""
    return pipeline_roles(info.data.get("pipeline"))


# One bool field per switchable role, named by its built-in role: TRACE's four roles run unless
# ablated (`use_cae: false`); the MERG and EmoStage roles are opt-in (`plan: true`).
PipelineConfig = create_model(
    "PipelineConfig",
    __base__=_PipelineSettings,
    __module__=__name__,
    **{
        spec.switch: (bool, Field(spec.default_on, description=spec.switch_help))
        for spec in ROLES.values()
        if spec.switch
    },
)

__all__ = ["PipelineConfig"]
