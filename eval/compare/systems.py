"""The systems a comparison scores, and how each one gets its traces on the shared test split.

A system is either an existing trace run (``traces: <run dir>``, e.g. the prompted teacher that ran
on an API) or something to generate now (``backend:`` + ``pipeline:``). Generated systems all go
through the same `distill.pipeline.pipeline.Pipeline` with the same exemplar index, so the only differences
between them are the ones their configs name. Every check that can fail names the file and field.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from data_prep.config_file import first_error
from data_prep.dialogues import Dialogue
from data_prep.models import ModelNotAvailable, check_causal_lm, check_model_name
from distill.backends import BACKEND_TYPES
from distill.pipeline.store import TRACES_FILE
from distill.pipeline.trace import Trace
from distill.roles.duties import is_gold_reply
from eval.compare.answers import AnswersSpec
from eval.compare.cost import PeakRSS
from eval.metrics.judge import ASPECTS
from eval.metrics.perplexity import PplContext
from eval.metrics.registry import METRICS
from eval.paper import load_paper_reference

SYSTEMS_DIR = "systems"  # generated systems' trace runs, inside the compare's --out


class CompareError(ValueError):
    """A comparison that cannot run as configured; the message is one line naming the file/field."""


def _known_paper(name: Optional[str]) -> Optional[str]:
    if name is not None:
        load_paper_reference(name)  # fails when the config loads, before any system is generated
    return name


def loadable_model(name: str) -> str:
    """`name` when `resolve_model` can take it (`check_model_name`), else a ValueError for pydantic to report."""
    try:
        check_model_name(name)  # a local path must hold a model: found now, not after every system generated
    except ModelNotAvailable as err:  # a RuntimeError, which pydantic would not report as a field's error
        raise ValueError(str(err)) from None
    return name


def reference_lm(name: str) -> str:
    """`name` when it is a loadable causal LM (`check_causal_lm`: PPL's reference model), else a ValueError."""
    loadable_model(name)
    try:
        check_causal_lm(name)
    except ModelNotAvailable as err:
        raise ValueError(str(err)) from None
    return name


# `paper_reference:` of a compare or a curve config: a shipped table (trace-table1) or a JSON file
PaperReference = Annotated[Optional[str], AfterValidator(_known_paper)]
ModelName = Annotated[str, AfterValidator(loadable_model)]  # an alias, a model folder or a hub id
ReferenceLm = Annotated[str, AfterValidator(reference_lm)]  # a ModelName that is a causal LM, for PPL


class ProbeSpec(BaseModel):
    """The classical emotion anchor (`eval.compare.probe`): trained on the compare's own dialogues."""

    model_config = ConfigDict(extra="forbid")

    split: str = Field("train", description="the split of the compare's dialogues it is trained on")
    limit: Optional[int] = Field(None, ge=2, description="train on the first N dialogues of that split")
    embedder: str = Field("minilm", description="the sentence encoder whose embeddings the probe reads")


class SystemSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the system's name in the report (and in `judge.against`, `reference`)")
    traces: Optional[str] = Field(None, description="an existing trace run directory (distill generate --out)")
    backend: Optional[dict[str, Any]] = Field(None, description="backend config, as in distill's YAML `backend:`")
    pipeline: dict[str, Any] = Field(default_factory=dict, description="PipelineConfig fields for a generated system")
    probe: Optional[ProbeSpec] = Field(None, description="a logistic-regression emotion probe (emotion only)")
    about: str = Field("", description="what the system is and what it learned from whom; report.md shows it")
    priced_as: Optional[str] = Field(
        None, description="an imported trace run: the API model whose list price its chains are costed at"
    )

    @model_validator(mode="after")
    def _one_source(self) -> SystemSpec:
        if sum(x is not None for x in (self.traces, self.backend, self.probe)) != 1:
            raise ValueError(f"system '{self.name}': give exactly one of 'traces', 'backend' or 'probe'")
        if self.priced_as is not None and self.traces is None:
            raise ValueError(f"system '{self.name}': 'priced_as' costs an imported trace run (with 'traces')")
        if self.traces is not None and self.pipeline:
            raise ValueError(f"system '{self.name}': 'pipeline' only applies to a generated system (with 'backend')")
        if self.backend is not None and self.backend.get("type") not in BACKEND_TYPES:
            known = ", ".join(BACKEND_TYPES)
            raise ValueError(
                f"system '{self.name}': backend needs a 'type', one of {known}; got {self.backend.get('type')!r}"
            )
        return self


class JudgeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: dict[str, Any] = Field(description="the judge model's backend config, as in distill's YAML `backend:`")
    against: str = Field(description="the system every other system is compared with")
    aspects: list[str] = Field(
        default_factory=lambda: list(ASPECTS), description="what the judge compares, one verdict per aspect"
    )
    max_new_tokens: int = Field(48, description="the judge's answer length cap, in tokens")


def setting(metric: str, name: str) -> Any:
    """A metric setting's field: its default and help from the registry, as `eval score`'s flag of that name."""
    spec = METRICS[metric]
    return Field(spec.settings[name], description=spec.options[name]["help"])


class PplSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ReferenceLm = setting("ppl", "model")  # each default and help is the registry's (eval.metrics.registry)
    context: PplContext = setting("ppl", "context")
    batch_size: int = setting("ppl", "batch_size")


class DialoguePplSpec(BaseModel):
    """The target's third coherence guard (`dialogue_ppl`): the reply's PPL after its dialogue. Off unless a
    config names it, since it is a second pass of the reference LM over every reply and its dialogue."""

    model_config = ConfigDict(extra="forbid")

    model: ReferenceLm = Field(METRICS["dialogue_ppl"].settings["model"], description="the untuned reference causal LM")
    batch_size: int = Field(METRICS["dialogue_ppl"].settings["batch_size"], ge=1, description="replies per pass")


class BertScoreSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelName = setting("bertscore_f1", "model")
    num_layers: Optional[int] = setting("bertscore_f1", "num_layers")
    batch_size: int = setting("bertscore_f1", "batch_size")


class RelevanceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelName = setting("relevance", "model")


class EadSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokenizer: str = setting("diversity", "tokenizer")
    vocab_size: Optional[int] = setting("diversity", "vocab_size")


class PrimaryComparison(BaseModel):
    """The report's one comparison declared before the run: tested alone at ALPHA; Holm covers the others."""

    model_config = ConfigDict(extra="forbid")

    pair: tuple[str, str] = Field(description="the two systems, first − second")
    metric: str = Field(description="a paired metric both have (a report's `paired` row's metric), e.g. i_acc")

    @model_validator(mode="after")
    def _paired_metric(self) -> PrimaryComparison:
        known = {n for n, spec in METRICS.items() if spec.paired and not spec.paired_figures}
        known |= {f for spec in METRICS.values() if spec.paired for f in spec.paired_figures or ()}
        if self.metric not in known:
            raise ValueError(f"metric '{self.metric}' is no paired row's metric (one of {', '.join(sorted(known))})")
        return self


def metric_section(metric: str) -> Optional[str]:
    """The config section (`bertscore`, `ppl`, ...) whose null turns a paired metric, or a paired figure of one
    (dist2), off; None for a metric no section turns off."""
    spec = next((s for s in METRICS.values() if metric == s.name or metric in s.paired_figures), None)
    return spec.config if spec else None


class CompareConfig(BaseModel):
    """`configs/eval/*.yaml`: systems plus the shared test split, index, judge and metric settings."""

    model_config = ConfigDict(extra="forbid")

    systems: list[SystemSpec] = Field(min_length=1, description="the systems scored, each from one source")
    dialogues: str = Field(
        description="a directory written by `python -m data_prep dialogues`, or a trace run of the split (an import)"
    )
    split: str = Field("test", description="the split of `dialogues` every system is scored on")
    limit: Optional[int] = Field(None, ge=1, description="score the first N dialogues of the split; null = all")
    chunk_size: int = Field(32, ge=1, description="test dialogues a generated system stores at a time")
    index: Optional[str] = Field(None, description="exemplar index dir; must not contain any test conversation")
    reference: Optional[str] = Field(
        None, description="system the agreement metrics compare with (default: judge.against, else the first)"
    )
    judge: Optional[JudgeSpec] = Field(None, description="a pairwise LLM judge; null = none")
    ppl: Optional[PplSpec] = Field(default_factory=PplSpec, description="perplexity settings; null = no PPL")
    dialogue_ppl: Optional[DialoguePplSpec] = Field(
        None, description="PPL given the dialogue (the target's third guard); null = not scored"
    )
    bertscore: Optional[BertScoreSpec] = Field(
        default_factory=BertScoreSpec, description="BERTScore settings; null = no BERTScore"
    )
    ead: EadSpec = Field(default_factory=EadSpec, description="EAD-n settings")
    relevance: Optional[RelevanceSpec] = Field(
        default_factory=RelevanceSpec,
        description="the reply's relevance to the seeker's last turn (the target's coherence guard); null = none",
    )
    shares_by_size: Optional[int] = Field(
        None,
        ge=2,
        description="also give each system's Dist/EAD shares of the human replies on sub-corpora of this many test "
        "dialogues, doubling up to the whole test set (nested: the first n of one seeded permutation, each in test "
        "order), each with its half-sampled paired CI; null = the whole test set alone",
    )
    paper_reference: PaperReference = Field(
        None, description="published rows shown beside the systems: a shipped table (trace-table1) or a JSON file"
    )
    answers: Optional[AnswersSpec] = Field(
        None, description="a declared pipeline's answers to score besides the reply (eval.compare.answers)"
    )
    primary: Optional[PrimaryComparison] = Field(
        None,
        description="the one comparison the run is for, declared before it: tested alone at the report's alpha, "
        "with Holm's adjustment over every other paired row; null = Holm over all",
    )

    @model_validator(mode="after")
    def _names(self) -> CompareConfig:
        names = [s.name for s in self.systems]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"systems: duplicate name '{sorted(dupes)[0]}'")
        named = [("judge.against", self.judge and self.judge.against), ("reference", self.reference)]
        named += [(f"primary.pair.{i}", name) for i, name in enumerate(self.primary.pair if self.primary else ())]
        for where, name in named:
            if name and name not in names:
                raise ValueError(f"{where}: no system named '{name}' (systems: {', '.join(names)})")
        if self.primary and self.primary.pair[0] == self.primary.pair[1]:
            raise ValueError("primary.pair: two different systems are compared")
        off = metric_section(self.primary.metric) if self.primary else None
        if off and getattr(self, off) is None:
            raise ValueError(f"primary.metric: {self.primary.metric} is not scored here ({off}: null); give "
                             f"{off} its settings or declare a metric this compare scores")  # fmt: skip
        return self

    def reference_system(self) -> str:
        return self.reference or (self.judge.against if self.judge else self.systems[0].name)


@dataclass
class SystemRun:
    """One system's traces on the test dialogues (same order), with how they were obtained."""

    name: str
    traces: list[Trace]
    source: str  # "trace run <dir>" or "generated"
    description: dict[str, Any] = field(default_factory=dict)
    wall_s: Optional[float] = None  # only for systems generated in this process
    peak_rss_mb: Optional[float] = None
    memory_method: Optional[str] = None
    replies: bool = True  # False for a system that answers the emotion alone (the probe)
    adapter_fingerprints: dict[str, Any] = field(default_factory=dict)  # what the adapters held (`eval.compare.reuse`)
    priced_as: Optional[str] = None  # an imported run's chains costed at this API model's price (`SystemSpec`)

    def __post_init__(self) -> None:
        # a reply fed from the data (`oracle: {ers: gold}`, an emotion-only system) is the human's, not
        # the system's: scoring it would credit the system with the human row's figures
        if any(_gold_reply_fed(t) for t in self.traces):
            self.replies = False


def _gold_reply_fed(trace: Trace) -> bool:
    oracle = trace.config.get("oracle") or {}
    return any(source == "gold" and is_gold_reply(role, trace.roles) for role, source in oracle.items())


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def check_index_disjoint(index, test: Sequence[Dialogue], index_dir: str) -> None:
    """The exemplar memory must never hold a test conversation (it would leak the gold reply).

    Checked by id and by content (the same situation and reply), so a copy of a test conversation under
    another id is caught too, and two files whose ids merely look alike are not refused.
    """
    leaked = sorted(index.conv_ids & {d.conv_id for d in test})
    if leaked:
        raise CompareError(
            f"index {index_dir}: contains {len(leaked)} test conversation(s), e.g. conv_id "
            f"'{leaked[0]}'; build the index from the train split only"
        )
    held = {(_squash(e.situation), _squash(e.response)) for e in index.entries}
    copies = [d for d in test if (_squash(d.situation), _squash(d.gold_response or "")) in held]
    if copies:
        raise CompareError(
            f"index {index_dir}: holds the situation and gold reply of {len(copies)} test dialogue(s) under "
            f"other ids, e.g. '{copies[0].id}'; build the index from data without the test conversations"
        )


def load_trace_system(spec: SystemSpec, test: Sequence[Dialogue], config_file: str) -> SystemRun:
    """Read a trace run and keep the traces of the test dialogues, in test order.

    Every test dialogue id must be in the run; a run made on another split fails here with the
    number of missing ids and one example, rather than scoring a different test set.
    """
    from distill.pipeline.store import TraceStore

    run_dir = Path(spec.traces)
    if not (run_dir / TRACES_FILE).is_file():
        raise CompareError(
            f"{config_file}: system '{spec.name}': traces '{run_dir}' is not a trace run "
            "(no traces.jsonl); run `python -m distill generate --out` first"
        )
    store = TraceStore(run_dir)
    traces, problems = store.read()
    by_id: dict[str, Trace] = {}
    for t in traces:
        by_id.setdefault(t.dialogue.id, t)
    missing = [d.id for d in test if d.id not in by_id]
    if missing:
        info = store.run_info()
        made_on = (
            f"split '{info.split}' of {info.source.get('dialogues')}" if info and info.split else "an unrecorded split"
        )
        raise CompareError(
            f"{run_dir}/traces.jsonl: system '{spec.name}' lacks {len(missing)} of {len(test)} test "
            f"dialogues (e.g. id '{missing[0]}'); the run was made on {made_on}, not this test split"
        )
    info = store.run_info()
    return SystemRun(
        spec.name,
        [by_id[d.id] for d in test],
        f"trace run {run_dir}",
        {"run": info.backend if info else {"model": traces[0].model}, "problems": len(problems)},
        priced_as=spec.priced_as,
    )


def _reused(store, test: Sequence[Dialogue]) -> Optional[list[Trace]]:
    """The stored traces of every test dialogue when an earlier compare generated this system (its inputs are
    checked before, by `eval.compare.reuse.drop_stale_run`)."""
    from distill.pipeline.trace import trace_key

    info = store.run_info()
    if info is None or info.system is None:
        return None
    traces, _ = store.read()
    by_key = {t.key: t for t in traces}
    found = [by_key.get(trace_key(d, *info.identity().values())) for d in test]
    return found if all(found) else None


def _pipeline_config(spec: SystemSpec, config_file: str):
    from distill.pipeline.config import PipelineConfig

    try:
        return PipelineConfig(**spec.pipeline)
    except ValidationError as err:
        raise CompareError(f"{config_file}: system '{spec.name}': {first_error(err, prefix='pipeline.')}") from None


def _fresh_store(
    store, spec: SystemSpec, pipeline_config, index, config_file: str, root: Optional[Path]
) -> tuple[dict, dict]:
    """What the system's adapters hold now, and everything its traces are computed from (its paths placed in the
    run `root`); a stored run of it made from other inputs is dropped (`eval.compare.reuse.drop_stale_run`)."""
    from distill.adapters.adapters import AdapterError
    from distill.pipeline.store import StoreError
    from eval.compare.reuse import adapter_fingerprints, drop_stale_run

    try:
        adapters = adapter_fingerprints(spec.backend)
    except (AdapterError, OSError) as err:
        raise CompareError(f"{config_file}: system '{spec.name}': backend: {err}") from None
    try:
        return adapters, drop_stale_run(
            store, spec.name, spec.model_dump(mode="json"), pipeline_config, adapters, index, root
        )
    except StoreError as err:
        raise CompareError(f"system '{spec.name}': {err}") from None


def generate_system(
    spec: SystemSpec,
    test: Sequence[Dialogue],
    index,
    config_file: str,
    run_dir: Path,
    chunk_size: int = 32,
    split: Optional[str] = None,
    root: Optional[Path] = None,
) -> SystemRun:
    """Run the shared `Pipeline` over the test dialogues, timed, storing each trace in ``run_dir``.

    Traces are stored a chunk at a time (`Pipeline.run_into`, as `distill generate` does), so a crash or
    Ctrl-C mid-system loses at most one chunk, and a rerun reuses what an earlier run of the same system
    stored there: a crash later in the compare (the judge, say) never costs a system's generation again. A run
    stored from other inputs (config, prompts, what the adapters hold) is generated again (`eval.compare.reuse`);
    the paths its key holds inside the run `root` are relative to it (`eval.compare.reuse.run_root`).
    """
    from distill.pipeline.stage_key import write_key
    from distill.pipeline.store import TraceStore

    pipeline_config = _pipeline_config(spec, config_file)
    store = TraceStore(run_dir)
    adapters, inputs = _fresh_store(store, spec, pipeline_config, index, config_file, root)
    done = _reused(store, test)
    if done is not None:
        backend = store.run_info().backend
        return SystemRun(spec.name, done, f"reused from {run_dir}", {"backend": backend}, adapter_fingerprints=adapters)
    backend, pipeline = _claimed_pipeline(spec, pipeline_config, index, config_file, store, split)
    write_key(run_dir, inputs)  # before any trace: a run killed midway resumes under the key it was started with
    stored = store.keys()
    todo = [d for d in test if pipeline.key(d) not in stored]
    with PeakRSS() as memory:
        start = time.perf_counter()
        pipeline.run_into(store, todo, chunk_size=chunk_size, progress=True)
        wall = time.perf_counter() - start
    by_key = {t.key: t for t in store.read()[0]}
    local = getattr(backend, "name", "") == "local"
    return SystemRun(
        spec.name,
        [by_key[pipeline.key(d)] for d in test],
        "generated" if len(todo) == len(test) else f"generated {len(todo)} of {len(test)}, the rest reused",
        {"backend": backend.describe(), "pipeline": pipeline_config.model_dump()},
        # a wall clock that saw every stage: stages copied from another run (`reuse`) cost their stored latency
        wall_s=wall if len(todo) == len(test) and not pipeline_config.reuse else None,
        peak_rss_mb=memory.peak_mb if local else None,
        memory_method=memory.method if local else None,
        adapter_fingerprints=adapters,
    )


def _claimed_pipeline(spec: SystemSpec, pipeline_config, index, config_file: str, store, split: Optional[str]):
    """The system's backend and `Pipeline`, its run claimed in `store`; each failure one line naming the system."""
    from distill.backends import make_backend
    from distill.pipeline.pipeline import Pipeline
    from distill.pipeline.store import StoreError

    try:
        backend = make_backend(dict(spec.backend))
    except (ValueError, OSError) as err:
        raise CompareError(f"{config_file}: system '{spec.name}': backend: {err}") from None
    try:
        pipeline = Pipeline(pipeline_config, backend, index)
    except ValueError as err:  # an oracle's trace run that cannot be read
        raise CompareError(f"{config_file}: system '{spec.name}': pipeline: {err}") from None
    try:
        store.claim(pipeline.run_info(split=split, system=spec.model_dump(mode="json")))
    except StoreError as err:
        raise CompareError(f"system '{spec.name}': {err}") from None
    return backend, pipeline


def collect_systems(
    config: CompareConfig, test: Sequence[Dialogue], index, config_file: str, out: Path
) -> list[SystemRun]:
    """Traces for every system, trace runs checked first so a bad path fails before any generation;
    generated systems keep their traces in ``out/systems/<name>``."""
    from eval.compare.reuse import run_root

    for spec in config.systems:
        if spec.traces is not None and not Path(spec.traces).exists():
            raise CompareError(f"{config_file}: system '{spec.name}': traces path '{spec.traces}' does not exist")
    loaded = {s.name: load_trace_system(s, test, config_file) for s in config.systems if s.traces is not None}
    runs = []
    for spec in config.systems:
        if spec.name in loaded:
            runs.append(loaded[spec.name])
        elif spec.probe is not None:
            runs.append(probe_system(spec, config, test, config_file))
        else:
            run_dir = out / SYSTEMS_DIR / spec.name
            runs.append(
                generate_system(spec, test, index, config_file, run_dir, config.chunk_size, config.split, run_root(out))
            )
    return runs


def probe_system(spec: SystemSpec, config: CompareConfig, test: Sequence[Dialogue], config_file: str) -> SystemRun:
    """Fit the emotion probe on the compare's own train dialogues (never the test ones) and answer the test."""
    from data_prep.loaders import load_split
    from eval.compare.probe import probe_traces

    try:
        train = load_split(config.dialogues, spec.probe.split)
    except Exception as err:
        raise CompareError(f"{config_file}: system '{spec.name}': probe: {err}") from None
    train = train[: spec.probe.limit] if spec.probe.limit else train
    leaked = {d.conv_id for d in train} & {d.conv_id for d in test}
    if leaked:
        raise CompareError(
            f"{config_file}: system '{spec.name}': probe split '{spec.probe.split}' shares "
            f"{len(leaked)} conversation(s) with the test split"
        )
    try:
        traces, description = probe_traces(train, test, spec.probe.embedder)
    except ValueError as err:
        raise CompareError(f"{config_file}: system '{spec.name}': probe: {err}") from None
    return SystemRun(spec.name, traces, "fitted now", description, replies=False)
