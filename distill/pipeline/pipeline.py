"""The stage-batched pipeline runner: dialogues in, one `Trace` per dialogue out.

The pipeline runs stage by stage over the whole batch (every ASI request in one
`backend.generate` call, then every CAE request, ...), so a local backend batches generation and
switches each adapter once per stage, and an API backend runs a stage's requests concurrently.
Every answer is validated against the role's schema; an invalid one is regenerated up to
`config.max_attempts` times, after which that dialogue alone is marked failed and the batch goes
on. With `config.reflection` the MERG loop audits each iteration with the GRA, reruns from the
earliest faulted stage, and picks the final answer from the whole history (distill.pipeline.reflection).
The resumable variant `run_into` writes each chunk's traces to a `TraceStore` as they finish.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Optional

from pydantic import BaseModel
from tqdm.auto import tqdm

from data_prep.dialogues import Dialogue
from data_prep.retrieval import Exemplar
from distill.backends.base import TRUNCATED_EVENT, Backend, GenerationRequest, GenerationResult
from distill.pipeline.config import PipelineConfig
from distill.pipeline.consensus import ConsensusBackend
from distill.pipeline.label_decoding import LabelDecoding
from distill.pipeline.oracle import Oracle
from distill.pipeline.reflection import OutputRejected, choose_final, parse_output, restart_stage, trigger_warnings
from distill.pipeline.reuse import StoredStages
from distill.pipeline.store import RunInfo
from distill.pipeline.trace import GoldGuidance, Step, Trace, trace_key
from distill.roles.duties import EMOTION_FIELD, emotion_role
from distill.roles.roles import RoleInput, RoleSpec, build_role_input, prompt_version
from distill.roles.schemas import GRAOutput
from distill.version import __version__

_DEFAULT_CORRECTION = "the reviewer marked this stage as failed; reconsider your answer"


@dataclass
class _DialogueRun:
    """One dialogue's progress: outputs per iteration, audits, and whether it broke."""

    dialogue: Dialogue
    trace: Trace
    iterations: list[dict[str, BaseModel]] = field(default_factory=list)
    audits: dict[int, Optional[GRAOutput]] = field(default_factory=dict)
    broken: set[int] = field(default_factory=set)  # iterations with a failed stage
    start: dict[int, str] = field(default_factory=dict)  # stage each refinement restarts from
    correction: dict[int, str] = field(default_factory=dict)
    exemplars: Optional[list[Exemplar]] = None
    exemplar_emotion: Optional[str] = None  # the emotion role's answer the exemplars were fetched for


@dataclass
class RunSummary:
    """What `run_into` did: traces written (ok / failed) and dialogues skipped as already stored."""

    written: int = 0
    failed: int = 0
    skipped: int = 0


class Pipeline:
    """Runs the enabled roles of `config` over dialogues through one backend."""

    def __init__(self, config: PipelineConfig, backend: Backend, index=None):
        typical = [role for role, mass in config.typical_p.items() if mass < 1]
        if typical and not getattr(backend, "typical_sampling", False):
            # vLLM and the OpenAI API have no typical sampling: one would ignore it, the other refuse mid-run
            raise ValueError(
                f"typical_p ({', '.join(typical)}): the {backend.name} backend cannot sample it; the local one can"
            )
        self.stages = config.stages()
        self.roles = config.roles  # this pipeline's own: another config in the process has its own
        self._emotion_role = emotion_role(self.roles)  # its answer keys the exemplar search
        specs = [self.roles[role] for role in self.stages]
        self.labels = LabelDecoding(config.label_decoding, backend, config.prompt_style, specs, config.direct)
        self.config = config
        self.backend = backend
        self.index = index  # data_prep.retrieval.ExemplarIndex, or None for no exemplars
        self._teacher = config.prompt_style == "teacher"
        self.oracle = Oracle(config.oracle, config.oracle_traces, self.roles)
        self.reused = StoredStages(config.reuse_from, tuple(config.reuse)) if config.reuse else None

    # --- public API ------------------------------------------------------------------------------

    def run_info(self, **where: Any) -> RunInfo:
        """What a trace run's run.json records (split, source, system: `where`); a resumed run must match it."""
        return RunInfo(
            pipeline=self.config.key_dict(),
            backend_name=self.backend.name,
            model=self.backend.model,
            prompt_version=prompt_version(self.config.prompt_style),
            backend=self.backend.describe(),
            trace_distill_version=__version__,
            **where,
        )

    def key(self, dialogue: Dialogue) -> str:
        return trace_key(
            dialogue,
            self.config.key_dict(),
            self.backend.name,
            self.backend.model,
            prompt_version(self.config.prompt_style),
        )

    def run(self, dialogues: Sequence[Dialogue], progress: bool = True) -> list[Trace]:
        """One trace per dialogue, in input order. Never raises for a bad answer: that trace is 'failed'."""
        runs = [self._new_run(d) for d in dialogues]
        self._run_iteration(runs, 0, progress)
        if self.config.reflection:
            self._reflect(runs, progress)
        traces = [self._finish(r) for r in runs]
        _warn_truncated(traces)
        return traces

    def run_into(
        self,
        store,
        dialogues: Sequence[Dialogue],
        chunk_size: int = 32,
        on_trace: Optional[Callable[[Trace], None]] = None,
        progress: bool = False,
    ) -> RunSummary:
        """Run the dialogues whose key is not in `store` yet, a chunk at a time, appending each trace.

        A chunk's traces are appended as soon as the chunk finishes, so a crash loses at most the
        chunk in flight; a rerun skips everything already stored (and repeated inputs).
        """
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        done = store.keys()
        todo, seen = [], set()
        for d in dialogues:
            k = self.key(d)
            if k not in done and k not in seen:
                seen.add(k)
                todo.append(d)
        summary = RunSummary(skipped=len(dialogues) - len(todo))
        for start in range(0, len(todo), chunk_size):
            for trace in self.run(todo[start : start + chunk_size], progress=progress):
                store.append(trace)
                summary.written += 1
                summary.failed += trace.status == "failed"
                if on_trace:
                    on_trace(trace)
        return summary

    # --- one pass over the stages --------------------------------------------------------------

    def _new_run(self, dialogue: Dialogue) -> _DialogueRun:
        trace = Trace(
            key=self.key(dialogue),
            dialogue=dialogue,
            backend=self.backend.name,
            model=self.backend.model,
            prompt_version=prompt_version(self.config.prompt_style),
            prompt_style=self.config.prompt_style,
            config=self.config.key_dict(),
            gold_guidance=GoldGuidance(
                emotion=self.config.gold_emotion and self._teacher, response=self.config.gold_response and self._teacher
            ),
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        )
        return _DialogueRun(dialogue=dialogue, trace=trace)

    def _run_iteration(self, runs: list[_DialogueRun], iteration: int, progress: bool) -> None:
        """All enabled stages for `runs` in one iteration; a refinement reuses the stages before its restart."""
        for r in runs:
            carried = {}
            if iteration:
                restart = self.stages.index(r.start[iteration])
                carried = {s: r.iterations[iteration - 1][s] for s in self.stages[:restart]}
            r.iterations.append(carried)
        for role in self.stages:
            active = [r for r in runs if iteration not in r.broken and role not in r.iterations[iteration]]
            if not active:
                continue
            spec = self.roles[role]
            if self.oracle.covers(role):
                self._fill_from_oracle(role, active, iteration)
                continue
            if role in self.config.reuse:
                self._fill_from_run(role, active)
                continue
            if spec.uses_exemplars:
                self._retrieve(
                    [r for r in active if r.exemplars is None or r.exemplar_emotion != _emotion(r, self._emotion_role)]
                )
            inputs = [self._role_input(spec, r, iteration) for r in active]
            steps, outputs = self._generate(spec, inputs, iteration, progress)
            for r, step, out in zip(active, steps, outputs):
                r.trace.steps.append(step)
                if out is None:
                    r.broken.add(iteration)
                else:
                    r.iterations[iteration][role] = out

    def _fill_from_oracle(self, role: str, runs: list[_DialogueRun], iteration: int) -> None:
        """The stage's answer from the oracle, recorded as a step that spent no generation."""
        for r in runs:
            answer, source = self.oracle.answer(role, r.dialogue)
            step = Step(role=role, iteration=iteration, messages=[], attempts=0, events=[source])
            if answer is None:
                step.error = source
                r.broken.add(iteration)
            else:
                step.parsed, step.raw = answer.model_dump(), answer.model_dump_json()
                r.iterations[iteration][role] = answer
            r.trace.steps.append(step)

    def _fill_from_run(self, role: str, runs: list[_DialogueRun]) -> None:
        """The stage's step as the `reuse_from` run stored it (first pass only: reuse excludes reflection)."""
        for r in runs:
            step = self.reused.step(role, r.dialogue.id)
            if step.parsed is None:
                r.broken.add(0)
            else:  # parsed again as this pipeline parses an answer, so later stages read the same object
                r.iterations[0][role] = parse_output(self.roles[role], step.raw, self.stages, self.config.prompt_style)
            r.trace.steps.append(step)

    def _role_input(self, spec: RoleSpec, r: _DialogueRun, iteration: int) -> RoleInput:
        # the direct student: every role sees the dialogue alone
        done = {} if self.config.direct else r.iterations[iteration]
        d = r.dialogue
        restarted = r.start.get(iteration) == spec.name  # the faulted stage sees the audit and its own answer
        # the same builder the SFT dataset uses, so training and inference see one upstream view
        return build_role_input(
            spec,
            d,
            done,
            exemplars=r.exemplars if spec.uses_exemplars else None,
            gold_emotion=d.emotion if self.config.gold_emotion and self._teacher else None,
            gold_response=d.gold_response if self.config.gold_response and self._teacher else None,
            correction=r.correction.get(iteration) if restarted else None,
            previous=r.iterations[iteration - 1].get(spec.name) if restarted else None,
        )

    def _retrieve(self, runs: list[_DialogueRun]) -> None:
        """Exemplars keyed on the emotion role's answer (never the gold one), fetched again when a rerun changes that
        emotion, since it drives the precise search (no emotion role: fuzzy only); student prompts show none."""
        if not runs:
            return
        if not (self.config.rag and self.index is not None and self._teacher):
            for r in runs:
                r.exemplars, r.exemplar_emotion = [], _emotion(r, self._emotion_role)
            return
        emotions = [_emotion(r, self._emotion_role) for r in runs]
        found = self.index.query(
            [r.dialogue.situation for r in runs],
            emotions,
            [r.dialogue.conv_id for r in runs],
            k=self.config.rag_k,
            tau=self.config.rag_tau,
        )
        for r, exemplars, emotion in zip(runs, found, emotions):
            r.exemplars, r.exemplar_emotion = exemplars, emotion

    # --- generation with validation and retries --------------------------------------------------

    def _request(self, spec: RoleSpec, messages: list[dict[str, str]], attempt: int) -> GenerationRequest:
        temperature = self.config.temperatures.get(spec.name, spec.temperature)
        if attempt and self.config.retry_temperature is not None:
            temperature = max(temperature, self.config.retry_temperature)
        sampling = temperature > 0  # top-p and min-p cut a sampled distribution; greedy has none to cut
        return GenerationRequest(
            messages=messages,
            schema=spec.schema_for(self.config.prompt_style, self.stages),
            temperature=temperature,
            max_new_tokens=spec.max_new_tokens,
            adapter=spec.name if self.config.use_adapters else None,
            seed=self.config.seed + attempt,
            top_p=self.config.top_p.get(spec.name, 1.0) if sampling else 1.0,
            min_p=self.config.min_p.get(spec.name, 0.0) if sampling else 0.0,
            typical_p=self.config.typical_p.get(spec.name, 1.0) if sampling else 1.0,
            stop_loops=self.config.stop_loops,
            label_ranking=self.labels.ranking(spec),
        )

    def _generate(
        self, spec: RoleSpec, inputs: list[RoleInput], iteration: int, progress: bool, backend: Optional[Backend] = None
    ) -> tuple[list[Step], list[Optional[BaseModel]]]:
        """One stage for many dialogues: one backend call per attempt, retrying only the invalid answers."""
        backend = backend or self.backend
        if spec.name in self.config.consensus:
            backend = ConsensusBackend(backend, self.config.consensus[spec.name], self.config.consensus_by)
        steps = [
            Step(role=spec.name, iteration=iteration, messages=spec.render(inp, self.config.prompt_style), attempts=0)
            for inp in inputs
        ]
        outputs: list[Optional[BaseModel]] = [None] * len(inputs)
        pending = list(range(len(inputs)))
        for attempt in range(self.config.max_attempts):
            if not pending:
                break
            requests = [self._request(spec, steps[i].messages, attempt) for i in pending]
            label = f"{spec.name} (iteration {iteration}, attempt {attempt + 1})"
            with tqdm(total=len(requests), desc=label, unit="req", disable=not progress, leave=False) as bar:
                results = backend.generate(requests, progress=bar.update)
            if len(results) != len(requests):
                raise RuntimeError(
                    f"backend '{backend.name}' returned {len(results)} results for {len(requests)} requests"
                )
            retry = []
            for i, result in zip(pending, results):
                outputs[i] = self._absorb(steps[i], spec, inputs[i].dialogue, result, attempt)
                if outputs[i] is None and result.error is None:
                    retry.append(i)  # transport errors are final: the backend already spent its retries
            pending = retry
        return steps, outputs

    def _absorb(
        self, step: Step, spec: RoleSpec, dialogue: Dialogue, result: GenerationResult, attempt: int
    ) -> Optional[BaseModel]:
        """Fold one generation into its step; the parsed output, or None when it did not validate."""
        step.attempts += 1
        step.latency_s += result.latency_s
        step.prompt_tokens += result.prompt_tokens
        step.completion_tokens += result.completion_tokens
        step.transport_retries += result.transport_retries
        step.events.extend(result.events)
        step.raw = result.text
        if result.error is not None:
            step.parsed, step.error = None, f"transport error: {result.error}"
            return None
        if result.gave_up is not None:  # ended early by the backend (stop_loops): a failed attempt
            step.parsed, step.error = None, f"invalid output: {result.gave_up}"
            step.events.append(f"attempt {attempt + 1}: {step.error}")
            return None
        try:
            parsed = parse_output(spec, result.text, self.stages, self.config.prompt_style)
        except OutputRejected as exc:
            step.parsed, step.error = None, f"invalid output: {exc}"
            step.events.append(f"attempt {attempt + 1}: invalid output: {exc}")
            return None
        step.parsed, step.error = parsed.model_dump(), None
        step.events.extend(trigger_warnings(parsed, dialogue))
        return parsed

    # --- reflection and the final answer ------------------------------------------------------

    @cached_property
    def _reviewer(self) -> Backend:
        """The audit's backend: `reflection_backend` when the config names one, else the pipeline's own, so
        a cheap pipeline can be paired with a stronger reviewer."""
        if self.config.reflection_backend is None:
            return self.backend
        from distill.backends import make_backend

        return make_backend(dict(self.config.reflection_backend))

    def _reflect(self, runs: list[_DialogueRun], progress: bool) -> None:
        """Audit, rerun from the earliest faulted stage, repeat: at most `max_refinements` reruns."""
        gra = self.roles["gra"]
        for iteration in range(self.config.max_refinements + 1):
            audited = [r for r in runs if iteration < len(r.iterations) and iteration not in r.broken]
            if not audited:
                return
            inputs = [RoleInput(dialogue=r.dialogue, upstream=dict(r.iterations[iteration])) for r in audited]
            steps, outputs = self._generate(gra, inputs, iteration, progress, self._reviewer)
            rerun = []
            for r, step, audit in zip(audited, steps, outputs):
                r.trace.steps.append(step)
                r.audits[iteration] = audit
                if audit is None:
                    continue  # no usable audit: keep what we have rather than rerun blindly
                stage = restart_stage(audit, self.stages)
                if stage is not None and iteration < self.config.max_refinements:
                    r.start[iteration + 1] = stage
                    r.correction[iteration + 1] = audit.correction.strip() or _DEFAULT_CORRECTION
                    rerun.append(r)
            if not rerun:
                return
            self._run_iteration(rerun, iteration + 1, progress)

    def _finish(self, r: _DialogueRun) -> Trace:
        trace = r.trace
        if 0 in r.broken:
            failed = next(s for s in trace.steps if s.iteration == 0 and not s.valid and s.role != "gra")
            trace.failure = f"{failed.role}: {failed.error}"
            trace.outputs = {s: out.model_dump() for s, out in r.iterations[0].items()}  # the stages that did validate
            return trace
        complete = [it for it in range(len(r.iterations)) if it not in r.broken]
        final = choose_final({it: r.audits.get(it) for it in complete}, self.stages, self.config.final_selection)
        trace.final_iteration = final
        trace.outputs = {s: out.model_dump() for s, out in r.iterations[final].items()}
        if r.audits.get(final) is not None:
            trace.outputs["gra"] = r.audits[final].model_dump()
        return trace


def _warn_truncated(traces: Sequence[Trace]) -> None:
    """One stderr line when a prompt was cut to the model's context: the trace records it, but a long
    dialogue answered from its last part alone should not pass unnoticed."""
    cut = [(t, s, e) for t in traces for s in t.steps for e in s.events if e.startswith(TRUNCATED_EVENT)]
    if cut:
        trace, step, event = cut[0]
        dialogues = len({id(t) for t, _, _ in cut})
        print(
            f"warning: {len(cut)} prompt(s) of {dialogues} dialogue(s) were cut to fit the model's context, "
            f"e.g. dialogue {trace.dialogue.id}, {step.role}: {event}",
            file=sys.stderr,
        )


def _emotion(r: _DialogueRun, role: Optional[str]) -> Optional[str]:
    """The emotion role's answer in the dialogue's latest iteration: what the precise exemplar search keys on."""
    return getattr(r.iterations[-1].get(role), EMOTION_FIELD, None)
