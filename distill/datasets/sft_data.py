"""Traces → one SFT dataset per role (`python -m distill datasets`).

Each role gets a `DatasetDict` (train / validation) in TRL's conversational prompt-completion form:
`prompt` is the role's *student* prompt rendered from its spec (the exact prompt the student sees at
inference), `completion` is the teacher's final parsed answer serialised as the compact JSON the student
must produce (for classification roles the decision alone: `RoleSpec.student_schema`). Upstream fields come
from the teacher's own final outputs (teacher forcing). Filters drop
failed or schema-invalid answers, optionally wrong-emotion traces and duplicates; every drop is counted.
The split is by conversation, so no dialogue appears in both train and validation.

    python -m distill datasets --traces runs/teacher --out data/sft [--roles asi,cae,srp,ers]
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pydantic import ValidationError
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict

from data_prep.taxonomy import to_ekman
from distill.datasets.options import QUALITY_DROP, DatasetOptions, RoleCounts, quality_mode
from distill.datasets.sft_tasks import DIRECT_ROLES, direct_row, with_rationale_twins
from distill.pipeline.config import PipelineConfig
from distill.pipeline.store import RunInfo
from distill.pipeline.trace import Trace, roles_of
from distill.roles.declared import REPLY_FIELD
from distill.roles.duties import emotion_role, is_gold_reply
from distill.roles.roles import DEFAULT_STAGES, RoleSpec, build_role_input

SPLITS = ("train", "validation")


@dataclass
class BuildReport:
    counts: dict[str, RoleCounts] = field(default_factory=dict)
    skipped_roles: dict[str, str] = field(default_factory=dict)  # role -> why no dataset was built
    problems: list[str] = field(default_factory=list)  # store problems (bad lines, foreign files)
    # role -> why the quality filter left it no rows to train on: the role failed, no dataset built
    emptied: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"problem: {p}" for p in self.problems]
        for role, c in self.counts.items():
            drops = ", ".join(f"{why} {n}" for why, n in sorted(c.dropped.items())) or "none"
            rows = ", ".join(f"{s} {n}" for s, n in c.rows.items()) or "no dataset"
            flagged = ", ".join(f"{check} {n}" for check, n in sorted(c.quality.items())) or "none failed"
            quality = f"quality {c.quality_mode} [{flagged}]" if c.quality_mode != "off" else "quality off"
            if c.unfiltered or c.kept_failing:
                failed = ", ".join(c.unfiltered) or "a check"
                kept = "every row kept" if c.kept_failing else "not filtered on it"
                quality += f" -- filtering on {failed} left NO ROWS TO TRAIN ON: {kept}; fix the teacher"
            out.append(f"{role}: read {c.read}, dropped [{drops}], kept {c.kept} ({rows}); {quality}")
        out += [f"{role}: no dataset ({why})" for role, why in self.skipped_roles.items()]
        return out


# --- which roles, which split ------------------------------------------------------------------


def enabled_roles(traces: Sequence[Trace]) -> list[str]:
    """Roles that any trace's pipeline config ran, in stage order, then gra when reflection ran.

    An ablated role has no dataset: its student would be trained on nothing the teacher said.
    """
    on: set[str] = set()
    for t in traces:
        try:
            config = PipelineConfig.model_validate(t.config)
            on.update(r for r in config.roles if config.runs(r))
        except ValidationError:
            on.update(t.outputs)  # a config from another version: trust what was actually produced
    return [r for r in roles_of(traces) if r in on]


def validation_conv_ids(conv_ids: Sequence[str], eval_fraction: float, seed: int) -> set[str]:
    """Seeded choice of held-out conversations, independent of trace order.

    Conversations are ranked by a seeded hash, so adding traces to a run moves few existing ones
    between splits; at least one conversation is held out whenever there are two or more.
    """
    unique = sorted(set(conv_ids))
    if eval_fraction <= 0 or len(unique) < 2:
        return set()
    k = min(len(unique) - 1, max(1, round(eval_fraction * len(unique))))
    ranked = sorted(unique, key=lambda c: hashlib.sha256(f"{seed}:{c}".encode()).hexdigest())
    return set(ranked[:k])


def trace_split(trace: Trace, run: Optional[RunInfo]) -> Optional[str]:
    """The dialogue split a trace came from: the dialogue's own field if it has one, else the run's."""
    return getattr(trace.dialogue, "split", None) or (run.split if run else None)


# --- one row per (role, trace) ------------------------------------------------------------------


def _target(role: str, trace: Trace, options: DatasetOptions) -> tuple[Optional[dict], Optional[str]]:
    """The parsed answer the student must learn, or (None, reason to drop)."""
    if is_gold_reply(role, trace.roles) and options.ers_target == "gold":
        if not trace.dialogue.gold_response:
            return None, "no gold response"
        return {REPLY_FIELD: trace.dialogue.gold_response}, None
    parsed = trace.outputs.get(role)
    return (parsed, None) if parsed is not None else (None, "no output")


def _asi_matches_gold(trace: Trace) -> Optional[str]:
    """None when the teacher's emotion is the gold Ekman label, else the reason to drop."""
    emotion = trace.emotion
    if emotion is None:
        return "no asi emotion"
    try:
        gold = to_ekman(trace.dialogue.emotion)
    except ValueError:
        return "gold emotion not a known label"
    return None if emotion == gold else "emotion differs from gold"


def role_row(
    role: str, trace: Trace, run_roles: set[str], options: DatasetOptions
) -> tuple[Optional[dict], Optional[str]]:
    """The SFT row for one role of one trace, or (None, reason to drop)."""
    if options.inputs == "direct":
        return direct_row(role, trace)  # the dialogue and its gold answer: the trace's outcome is irrelevant
    if trace.status == "failed":
        return None, "trace failed"
    if options.require_gold_emotion and (why := _asi_matches_gold(trace)):
        return None, why
    parsed, why = _target(role, trace, options)
    if why:
        return None, why
    spec = trace.roles[role]
    try:
        answer = spec.schema.model_validate(parsed)
    except ValidationError:
        gold = is_gold_reply(role, trace.roles) and options.ers_target == "gold"
        return None, "gold response invalid for schema" if gold else "invalid output"
    if any(up in run_roles and up not in trace.outputs for up in spec.inputs):
        return None, "missing upstream output"
    try:
        inp = build_role_input(spec, trace.dialogue, trace.outputs)
    except ValidationError:
        return None, "invalid upstream output"
    prompt = spec.render(inp, "student")
    completion = [{"role": "assistant", "content": spec.student_target(answer).model_dump_json()}]
    return {
        "prompt": prompt,
        "completion": completion,
        "messages": prompt + completion,
        "dialogue_id": trace.dialogue.id,
        "conv_id": trace.dialogue.conv_id,
        "key": trace.key,
        "task": "label",
    }, None


def _features():
    from datasets import Features, List, Value

    message = List({"role": Value("string"), "content": Value("string")})
    return Features(
        {
            "prompt": message,
            "completion": message,
            "messages": message,
            "dialogue_id": Value("string"),
            "conv_id": Value("string"),
            "key": Value("string"),
            "task": Value("string"),  # "label", or "rationale" for a rationale-task twin
        }
    )


def _to_dataset(rows: list[dict]) -> Dataset:
    from datasets import Dataset

    features = _features()  # column-wise so an empty validation split still has the full schema
    return Dataset.from_dict({col: [r[col] for r in rows] for col in features}, features=features)


def build_role_datasets(
    traces: Sequence[Trace],
    roles: Optional[Sequence[str]] = None,
    options: Optional[DatasetOptions] = None,
    report: Optional[BuildReport] = None,
    run: Optional[RunInfo] = None,
) -> dict[str, DatasetDict]:
    """One `DatasetDict` (train/validation) per requested role; `report` (if given) receives the counts.

    `roles=None` means the core roles the run enabled (`_wanted_roles`). A requested role the run did not
    run (an ablation) gets no dataset and is listed in `report.skipped_roles`.
    """
    from datasets import DatasetDict

    options = options or DatasetOptions()
    report = report if report is not None else BuildReport()
    if options.split:
        traces = _only_split(traces, options.split, run, report)
    run_roles = enabled_roles(traces)
    known = roles_of(traces)
    wanted = _wanted_roles(roles, run_roles, known, options, report)
    held_out = validation_conv_ids([t.dialogue.conv_id for t in traces], options.eval_fraction, options.seed)
    failing = quality_failures(traces, options)
    result: dict[str, DatasetDict] = {}
    for role in wanted:
        rows, counts = _collect(role, traces, set(run_roles), options, failing)
        if not _trains(rows, held_out) and counts.dropped.get(QUALITY_DROP):
            strict = counts
            rows, counts = _filter_what_selects(role, traces, set(run_roles), options, failing, held_out)
            if counts.kept_failing and not options.keep_unfiltered_when_empty:
                report.counts[role] = strict
                report.emptied[role] = _emptied(strict)
                continue
        report.counts[role] = counts
        if not rows:
            report.skipped_roles[role] = "no rows kept"
            continue
        by_split = {s: [r for r in rows if (r["conv_id"] in held_out) == (s == "validation")] for s in SPLITS}
        if options.balance_emotions and role == emotion_role(known):
            by_split["train"] = balance_by_emotion(by_split["train"], options.seed)
        if options.rationale:  # twins train only: validation measures the label task the student answers
            by_key = {t.key: t for t in traces}
            by_split["train"], missing = with_rationale_twins(
                by_split["train"], role, by_key, options.rationale, options.rationale_share, options.seed
            )
            counts.dropped["no rationale (twin skipped)"] += missing
        result[role] = DatasetDict({s: _to_dataset(by_split[s]) for s in SPLITS})
        counts.rows = {s: len(by_split[s]) for s in SPLITS}
    return result


def _wanted_roles(
    roles: Optional[Sequence[str]],
    run_roles: list[str],
    known: Mapping[str, RoleSpec],
    options: DatasetOptions,
    report: BuildReport,
) -> list[str]:
    """The roles to build: the requested ones the run can give rows for.

    `roles=None` (`--roles all`) means the four core roles the run enabled, as in `train --roles all`, or every
    role of a declared pipeline: a plan or gra dataset is built only when asked for by name, since only then is it
    trained."""
    if options.inputs == "direct":  # gold answers come from the data, whichever roles the teacher ran
        requested = list(roles or DIRECT_ROLES)
        bad = [r for r in requested if r not in DIRECT_ROLES]
        if bad:
            gold = ", ".join(DIRECT_ROLES)
            raise ValueError(f"--inputs direct: role(s) {', '.join(bad)} have no gold answer (direct rows: {gold})")
        return requested
    roles = roles or [r for r in run_roles if r in DEFAULT_STAGES or known[r].pipeline is not None]
    for role in roles:
        if role not in known:
            raise ValueError(f"unknown role '{role}' (known: {', '.join(known)})")
        if role not in run_roles:
            report.skipped_roles[role] = "role not enabled in this trace run"
    return [r for r in roles if r in run_roles]


def balance_by_emotion(rows: list[dict], seed: int) -> list[dict]:
    """Oversample: each emotion's rows repeated (whole copies, then a seeded sample) up to the commonest's count."""
    by_emotion: dict[str, list[dict]] = {}
    for row in rows:
        emotion = json.loads(row["completion"][0]["content"])["emotion"]
        by_emotion.setdefault(emotion, []).append(row)
    if not by_emotion:
        return rows
    target = max(len(group) for group in by_emotion.values())
    rng = random.Random(seed)
    out = []
    for emotion in sorted(by_emotion):
        group = by_emotion[emotion]
        copies, rest = divmod(target, len(group))
        out += group * copies + rng.sample(group, rest)
    rng.shuffle(out)
    return out


def _only_split(traces: Sequence[Trace], split: str, run: Optional[RunInfo], report: BuildReport) -> list[Trace]:
    known = [trace_split(t, run) for t in traces]
    if traces and all(s is None for s in known):
        raise ValueError(f"--split {split}: this trace run records no dialogue split (run.json has no 'split')")
    kept = [t for t, s in zip(traces, known) if s == split]
    if traces and not kept:
        found = ", ".join(sorted({s for s in known if s}))
        raise ValueError(f"--split {split}: no trace of this run is from that split (its traces are from: {found})")
    if len(kept) < len(traces):
        report.problems.append(f"--split {split}: skipped {len(traces) - len(kept)} traces from other splits")
    return kept


def quality_failures(traces: Sequence[Trace], options: DatasetOptions) -> dict[tuple[str, str], dict[str, bool]]:
    """(trace key, role) -> each quality check that role's output failed, and whether it failed in a field the
    student learns; empty when the checks are off.

    Run once over all the traces, not per role: near_duplicate compares replies across the run. Every failure
    is counted, but only one in a learned field drops the row: asi's and srp's students answer the label alone
    (their reasoning is learned only as the rationale task's target), and a parroted reasoning's label may be right.
    """
    if options.quality == "off" or options.inputs == "direct":  # direct rows hold the data's answers only
        return {}
    from distill.quality import QualityThresholds, check_traces

    thresholds = QualityThresholds(**options.quality_thresholds)
    report = check_traces(traces, thresholds)
    learned = {role: learned_fields(report.roles[role], options) for role in report.checked}
    failing: dict[tuple[str, str], dict[str, bool]] = {}
    for f in report.findings:
        checks = failing.setdefault((f.key, f.role), {})
        checks[f.check] = checks.get(f.check, False) or f.field.split("[")[0] in learned[f.role]
    return failing


def learned_fields(spec: RoleSpec, options: DatasetOptions) -> set[str]:
    """The output fields of a role that reach a student: its student target's, plus the teacher's reasoning
    when it is the rationale task's target."""
    fields = set((spec.student_schema or spec.schema).model_fields)
    if options.rationale == "teacher" and "reasoning" in spec.schema.model_fields:
        fields.add("reasoning")
    return fields


def _trains(rows: list[dict], held_out: set[str]) -> bool:
    """Whether the rows give the train split anything (held-out conversations go to validation)."""
    return any(r["conv_id"] not in held_out for r in rows)


def _filter_what_selects(
    role: str,
    traces: Sequence[Trace],
    run_roles: set[str],
    options: DatasetOptions,
    failing: dict,
    held_out: set[str],
) -> tuple[list[dict], RoleCounts]:
    """`filter` left `role` nothing to train on. A single check that every failing row fails cannot choose among
    them (the embedded 135M teacher's cae triggers are almost never spans of the seeker's turns, and the few
    rows that pass may all be held out): filter on the other checks, and say so, loudly, so the role can still
    be trained and the run still tells what its teacher wrote badly. When even that leaves nothing to train on
    (or every failing row fails two checks or more), the rows are kept with `kept_failing` set: the caller
    fails the role unless `keep_unfiltered_when_empty` asks for them."""
    learned = [{c for c, hit in checks.items() if hit} for (_, r), checks in failing.items() if r == role]
    every = set.intersection(*[s for s in learned if s]) if any(learned) else set()
    every = every if len(every) == 1 else set()  # two checks every row fails are not one teacher's blind spot
    relaxed = {k: {c: hit and c not in every for c, hit in checks.items()} for k, checks in failing.items()}
    rows, counts = _collect(role, traces, run_roles, options, relaxed)
    if not _trains(rows, held_out):
        rows, counts = _collect(role, traces, run_roles, replace(options, quality="report"), failing)
        counts.kept_failing = True
    counts.unfiltered = sorted(every)
    return rows, counts


def _emptied(counts: RoleCounts) -> str:
    """Why the quality filter leaves a role no rows to train on: the checks its rows failed, and how many."""
    failed = ", ".join(f"{check} {n}" for check, n in sorted(counts.quality.items()))
    held = f"; the {counts.kept} that pass are all held out for validation" if counts.kept else ""
    return (
        f"the quality filter leaves no rows to train on: {counts.dropped[QUALITY_DROP]} of {counts.read} rows "
        f"fail a check ({failed}){held}"
    )


def _collect(
    role: str,
    traces: Sequence[Trace],
    run_roles: set[str],
    options: DatasetOptions,
    failing: Optional[dict[tuple[str, str], dict[str, bool]]] = None,
) -> tuple[list[dict], RoleCounts]:
    counts, rows, seen = RoleCounts(quality_mode=quality_mode(role, options)), [], set()
    failing = failing if counts.quality_mode != "off" else None
    for trace in tqdm(traces, desc=f"{role} rows", unit="trace", leave=False):
        counts.read += 1
        row, why = role_row(role, trace, run_roles, options)
        if row is not None and failing and (failed := failing.get((trace.key, role))):
            counts.quality.update(failed.keys())
            why = QUALITY_DROP if counts.quality_mode == "filter" and any(failed.values()) else None
        if row is not None and why is None and options.dedup:
            pair = json.dumps([row["prompt"], row["completion"]], ensure_ascii=False)
            why = "duplicate" if pair in seen else None
            seen.add(pair)
        if why:
            counts.dropped[why] += 1
            continue
        rows.append(row)
    counts.kept = len(rows)
    return rows, counts


def save_role_datasets(
    built: dict,
    out: Path,
    traces: list[Trace],
    run: Optional[RunInfo],
    options: DatasetOptions,
    report: BuildReport,
    traces_dir: Path,
) -> None:
    """Save each role's DatasetDict to `<out>/<role>/` with its build record and card."""
    from datasets import load_from_disk

    from distill.datasets.dataset_card import build_record, write_card

    for role, dd in built.items():
        # one shard per split: datasets saves an empty split as zero shards, which load_from_disk rejects
        dd.save_to_disk(str(out / role), num_shards={split: 1 for split in dd})
        # the card records the fingerprints train will see, and those are the reloaded dataset's
        saved = load_from_disk(str(out / role))
        record = build_record(role, saved, traces, run, options, report.counts[role], traces_dir)
        write_card(out / role, saved, record)


def with_validation_run(
    built: dict[str, DatasetDict],
    held_traces: Sequence[Trace],
    held_info: Optional[RunInfo],
    options: DatasetOptions,
    report: BuildReport,
    where: str,
) -> dict[str, DatasetDict]:
    """Each role's train split from `built` and its validation split from a separate trace run (`held_traces`,
    built with the same options, every row kept: no split filter, nothing held out): a validation set the data
    ships, such as ESD-CoT's val.json, instead of conversations held out of the train run. A role the validation
    run gives no rows is refused in one line naming `where`, since early stopping would have nothing to read."""
    from datasets import DatasetDict

    every_row = replace(options, split=None, eval_fraction=0.0)
    held = build_role_datasets(held_traces, list(built), every_row, BuildReport(), held_info)
    if missing := [role for role in built if role not in held or len(held[role]["train"]) == 0]:
        raise ValueError(f"{where}: the validation run gives role {missing[0]} no rows")
    result = {}
    for role, dd in built.items():
        result[role] = DatasetDict({"train": dd["train"], "validation": held[role]["train"]})
        report.counts[role].rows = {split: len(result[role][split]) for split in SPLITS}
    return result
