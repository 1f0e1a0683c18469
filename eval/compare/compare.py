"""Score systems side by side on one test split: what `python -m eval compare` runs (`eval.compare.cli_compare`).

The recipe: load the test split (and the exemplar index, checked to hold no test conversation),
get every system's traces on exactly those dialogues (`eval.compare.systems`), compute the same metrics for
each (`score_system`), judge each system against one reference, write ``report.json``, then render
``report.md`` and the plots from that JSON alone (`eval.compare.report`), so every printed number is a
stored one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from data_prep.config_file import load_config as load_config_file
from data_prep.dialogues import Dialogue
from distill.pipeline.stage_key import stage_key
from eval.compare.answers import AnswersSpec, answer_fields, check_gold_field
from eval.compare.cost import cost_and_speed, imported_chain_cost
from eval.compare.paired import ALPHA, human_gold, in_family, paired_comparisons
from eval.compare.reuse import report_inputs, run_root
from eval.compare.run_figures import reflection_figures, reply_rates, retries_per_role, trace_quality
from eval.compare.systems import (
    CompareConfig,
    CompareError,
    SystemRun,
    check_index_disjoint,
    collect_systems,
)
from eval.metrics.accuracy import schema_valid_rate, teacher_agreement
from eval.metrics.diversity_ci import corpus_sizes, human_ratio_by_size, human_ratio_intervals
from eval.metrics.registry import METRICS, Sample, score_sample
from eval.metrics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, holm
from eval.paper import load_paper_reference

REPORT_JSON = "report.json"
DECIMALS = 4


def load_config(path: str) -> CompareConfig:
    """Parse and validate a compare YAML; errors are one line naming the file and the field."""
    return load_config_file(path, CompareConfig, error=CompareError)


def read_split(dialogues: str, split: str) -> list[Dialogue]:
    """A split's dialogues: a dialogues folder's (`data_prep dialogues`), or those of a trace run made on that split
    (`distill import` of a test file: its dialogues carry their gold labels, `Dialogue.labels`), in the run's order."""
    from data_prep.loaders import load_split
    from distill.pipeline.store import TRACES_FILE, TraceStore

    if not (Path(dialogues) / TRACES_FILE).is_file():
        return load_split(dialogues, split)
    store = TraceStore(dialogues)
    info = store.run_info()
    made_on = info.split if info else None
    if made_on != split:
        raise ValueError(f"{dialogues}: a trace run of split '{made_on}', not '{split}'")
    return list({t.dialogue.id: t.dialogue for t in store.read()[0]}.values())


def load_test_dialogues(config: CompareConfig, config_file: str) -> list[Dialogue]:
    from data_prep.loaders import limit_leaves_out

    if not Path(config.dialogues).exists():
        raise CompareError(
            f"{config_file}: dialogues '{config.dialogues}' does not exist "
            "(build it with `python -m data_prep dialogues --out`)"
        )
    try:
        test = read_split(config.dialogues, config.split)
    except Exception as err:
        raise CompareError(f"{config_file}: dialogues: {err}") from None
    if not test:
        raise CompareError(f"{config_file}: split '{config.split}' of {config.dialogues} is empty")
    if not config.limit:
        return test
    if warning := limit_leaves_out(test[: config.limit], test, f"limit: {config.limit} on the {config.split} split"):
        print(warning, file=sys.stderr)
    return test[: config.limit]


def load_index(config: CompareConfig, test: Sequence[Dialogue], config_file: str):
    if config.index is None:
        return None
    from data_prep.retrieval import ExemplarIndex

    try:
        index = ExemplarIndex.load(config.index)
    except (OSError, ValueError) as err:
        raise CompareError(f"{config_file}: index: {err}") from None
    check_index_disjoint(index, test, config.index)
    return index


def metric_settings(config: CompareConfig) -> dict[str, dict]:
    """The registry's metrics this compare scores, each with its settings: a metric whose config section
    (`ppl:`, `bertscore:`, `ead:`) is null is off; one without a section runs with its defaults."""
    settings = {}
    for name, spec in METRICS.items():
        if spec.config is None:
            settings[name] = dict(spec.settings)
        elif (section := getattr(config, spec.config)) is not None:
            settings[name] = section.model_dump()
    return settings


def load_train_labels(config: CompareConfig, test: Sequence[Dialogue], config_file: str) -> Optional[list[Dialogue]]:
    """The dialogues whose gold labels give the majority class (`answers.majority_from`), checked with the test
    split for a misspelt gold field; None when the majority comes from the test gold."""
    spec = config.answers
    train = None
    if spec is not None and spec.majority_from:
        try:
            train = read_split(config.dialogues, spec.majority_from)
        except Exception as err:
            raise CompareError(f"{config_file}: answers.majority_from: {err}") from None
    try:
        check_gold_field(spec, test, config_file)
    except ValueError as err:
        raise CompareError(str(err)) from None
    return train


def system_sample(
    run: SystemRun,
    test: Sequence[Dialogue],
    reference: Optional[SystemRun],
    answers: Optional[AnswersSpec] = None,
    train: Optional[Sequence[Dialogue]] = None,
) -> Sample:
    """What one system answered on the test dialogues (its traces are in test order), as the metrics read it;
    `answers` names a declared pipeline's answers to read too, `train` gives their majority class."""
    # a declared pipeline (escot's) has no Ekman emotion agent: its traces' `emotion` is no ASI answer
    ran_asi = all(t.config.get("use_asi", True) and not t.config.get("pipeline") for t in run.traces)
    others = reference.traces if reference is not None and reference.name != run.name else None
    return Sample(
        replies=[t.response or "" for t in run.traces] if run.replies else None,
        gold_replies=[d.gold_response for d in test],
        contexts=[d.render_context() for d in test],
        seeker_turns=[d.last_seeker_turn() for d in test],
        # ASI answers Ekman's six, so there is no 32-class figure here (see `emotion_accuracy`)
        emotions=[t.emotion for t in run.traces] if ran_asi else None,
        gold_emotions=[d.emotion for d in test],
        reference_emotions=[t.emotion for t in others] if others is not None else None,
        latencies=[sum(s.latency_s for s in t.steps) for t in run.traces],
        **answer_fields(answers, run.traces, test, others, train),
    )


def score_system(
    run: SystemRun,
    test: Sequence[Dialogue],
    settings: dict[str, dict],
    reference: Optional[SystemRun],
    answers: Optional[AnswersSpec] = None,
    train: Optional[Sequence[Dialogue]] = None,
) -> tuple[dict[str, Any], dict[str, list]]:
    """Every metric for one system on the test dialogues (a metric it cannot have is null), and the
    per-dialogue values the paired comparisons resample."""
    result: dict[str, Any] = {
        "name": run.name,
        "source": run.source,
        "description": run.description,
        "n": len(test),
        "failed_traces": sum(t.status == "failed" for t in run.traces),
        "replies": run.replies,
    }
    if run.replies:
        result["empty_responses"] = sum(not (t.response or "").strip() for t in run.traces)
        result["reply_checks"] = reply_rates([t.response or "" for t in run.traces], test)
    stats, items = score_sample(system_sample(run, test, reference, answers, train), settings)
    result.update({METRICS[name].row_key: None for name in settings if METRICS[name].row_key}, **stats)
    result["agreement"] = (
        teacher_agreement(run.traces, reference.traces)
        if reference is not None and reference.name != run.name
        else None
    )
    result["schema_valid"] = schema_valid_rate(run.traces)
    result["cost"] = _cost(run)
    result["retries"] = retries_per_role(run.traces)
    result["reflection"] = reflection_figures(run.traces)
    result["quality"] = trace_quality(run.traces, run.replies)
    return result, items


def _versus_human(items: dict[str, list], human_items: dict[str, list]) -> Optional[dict]:
    """The figures the registry gives as shares of the human replies (Dist/EAD), each with its bootstrap CI paired
    with the human replies on the same draws; None when there are none."""
    ratios = {}
    for name, spec in METRICS.items():
        if spec.versus_human and name in items and name in human_items:
            ratios.update(human_ratio_intervals(items[name], human_items[name], spec.versus_human))
    return ratios or None


def _versus_human_by_size(items: dict[str, list], human_items: dict[str, list], sizes: list[int]) -> Optional[list]:
    """The same shares on nested sub-corpora of each size (`human_ratio_by_size`), a row per size; None when the
    system has none."""
    rows: dict[int, dict] = {}
    for name, spec in METRICS.items():
        if spec.versus_human and name in items and name in human_items:
            for row in human_ratio_by_size(items[name], human_items[name], sizes, spec.versus_human):
                rows.setdefault(row["n"], {}).update(row)
    return list(rows.values()) or None


def _cost(run: SystemRun) -> dict[str, Any]:
    cost = cost_and_speed(run.traces, run.wall_s, run.peak_rss_mb)
    cost["prompt_tokens_per_dialogue"] = sum(v["prompt_per_dialogue"] for v in cost["tokens_per_role"].values())
    cost["completion_tokens_per_dialogue"] = sum(v["completion_per_dialogue"] for v in cost["tokens_per_role"].values())
    cost["memory_method"] = run.memory_method
    if run.priced_as:
        cost["teacher_estimate"] = imported_chain_cost(run.traces, run.priced_as)
    return cost


def judge_systems(config: CompareConfig, runs: list[SystemRun], test: Sequence[Dialogue]) -> Optional[dict]:
    if config.judge is None:
        return None
    from distill.backends import make_backend
    from eval.metrics.judge import judge_pairs

    backend = make_backend(dict(config.judge.backend))
    against = next(r for r in runs if r.name == config.judge.against)
    results = {}
    for run in runs:
        if run.name == against.name:
            continue
        out = judge_pairs(
            backend,
            test,
            [t.response or "" for t in run.traces],
            [t.response or "" for t in against.traces],
            config.judge.aspects,
            config.judge.max_new_tokens,
        )
        adjusted = holm({aspect: counts["p_value"] for aspect, counts in out["aspects"].items()})
        for aspect, counts in out["aspects"].items():
            counts["p_holm"] = adjusted[aspect]
        results[run.name] = {"aspects": out["aspects"], "outcomes": out["outcomes"]}
    return {
        "against": against.name,
        "aspects": list(config.judge.aspects),
        "judge": backend.describe(),
        "rule": "a win or loss counts only when both presentation orders agree; anything else is a tie, and two "
        "identical replies are a tie without asking the judge; "
        "p is a two-sided sign test on wins vs losses (ties excluded); p_holm is Holm's adjustment over "
        "one pair's aspects (family-wise error rate), the p to read when claiming any aspect",
        "results": results,
    }


def rounded(value: Any) -> Any:
    """Floats to DECIMALS places everywhere, so report.md can show exactly what report.json holds."""
    if isinstance(value, float):
        # NaN → null: JSON has no NaN; + 0.0 makes a rounded -0.0 (a difference of -1e-17, say) a plain 0
        return None if value != value else round(value, DECIMALS) + 0.0
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def _mark_shared_outputs(runs: list[SystemRun], systems: list[dict[str, Any]]) -> None:
    """A system whose replies are exactly an earlier system's says so (an untuned base read from the teacher's
    own traces, say): two identical rows must not read as an independent replication."""
    seen: dict[tuple, str] = {}
    for run, system in zip(runs, systems):
        if not run.replies:
            continue
        replies = tuple(t.response or "" for t in run.traces)
        system["same_outputs_as"] = seen.get(replies)
        seen.setdefault(replies, run.name)


def build_report(config: CompareConfig, config_file: str, out: Path) -> dict[str, Any]:
    test = load_test_dialogues(config, config_file)
    index = load_index(config, test, config_file)
    train = load_train_labels(config, test, config_file)
    runs = collect_systems(config, test, index, config_file, out)
    # keyed once its generated systems are there: one that copies stages from another (`reuse_from`) is keyed on
    # what that one wrote, as a rerun finds it
    key = stage_key(report_inputs(config, test, index, run_root(out)))
    reference = next(r for r in runs if r.name == config.reference_system())
    settings = metric_settings(config)
    loaded = {name: {**s, **METRICS[name].prepare(s)} if METRICS[name].prepare else s for name, s in settings.items()}
    scored = [score_system(run, test, loaded, reference, config.answers, train) for run in runs]
    systems = [result for result, _ in scored]
    _mark_shared_outputs(runs, systems)
    paired = _paired_rows(config, config_file, {run.name: values for run, (_, values) in zip(runs, scored)})
    human, human_items = human_gold(test, loaded)
    sizes = corpus_sizes(config.shares_by_size, len(test)) if config.shares_by_size else None
    _add_human_ratios(systems, [items for _, items in scored], human_items, sizes)
    return rounded(
        {
            "config_file": config_file,
            "config": config.model_dump(),
            "stage_key": key,  # a stored report is reused exactly while this key holds (`eval.compare.reuse`)
            # what each generated system's adapters held: a rerun reuses this report only over the same ones
            "adapter_fingerprints": {run.name: run.adapter_fingerprints for run in runs if run.adapter_fingerprints},
            "test": {
                "dialogues": config.dialogues,
                "split": config.split,
                "n": len(test),
                "ids": [d.id for d in test],
                "index": config.index,
            },
            "settings": _report_settings(reference.name, settings, paired, sizes),
            "systems": systems,
            "human_gold": human,
            "paper": load_paper_reference(config.paper_reference) if config.paper_reference else None,
            "paired": paired,
            "judge": judge_systems(config, runs, test),
        }
    )


def _paired_rows(config: CompareConfig, config_file: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The paired comparisons of every two systems, the declared primary among them (said on stderr when the
    primary has no row, e.g. a system that answered no emotion)."""
    primary = (tuple(config.primary.pair), config.primary.metric) if config.primary else None
    paired = paired_comparisons(values, primary)
    if primary and not any(row.get("primary") for row in paired):
        print(f"{config_file}: primary {primary[0][0]} − {primary[0][1]} on {primary[1]}: no such paired row; "
              "Holm covers every row", file=sys.stderr)  # fmt: skip
    return paired


def _add_human_ratios(systems: list[dict], items: list, human_items, sizes: Optional[list[int]]) -> None:
    """Each system's diversity against the human replies', on the whole test set and on nested sub-corpora."""
    for system, its_items in zip(systems, items):
        if ratios := _versus_human(its_items, human_items):
            system["human_ratio"] = ratios
        if sizes and (by_size := _versus_human_by_size(its_items, human_items, sizes)):
            system["human_ratio_by_size"] = by_size


def _report_settings(reference: str, settings: dict, paired: list[dict], sizes: Optional[list[int]]) -> dict:
    """What the report's figures depend on beyond the systems: metric sections, bootstrap, the paired family."""
    sections = {spec.config: None for spec in METRICS.values() if spec.config}
    sections.update({METRICS[name].config: s for name, s in settings.items() if METRICS[name].config})
    return {
        "reference_system": reference,
        **sections,
        "registered_metrics": settings,
        "bootstrap": {"resamples": DEFAULT_RESAMPLES, "seed": DEFAULT_SEED, "level_percent": 95},
        "paired_family": {
            "rows": sum(in_family(r) for r in paired),
            "identical_rows": sum(bool(r.get("identical")) for r in paired),
            "correction": "holm",
            "alpha": ALPHA,
        },
        # the sub-corpora of `human_ratio_by_size`: the first n of one seeded permutation, in test order
        "shares_by_size": {"sizes": sizes, "subsets": "nested", "seed": DEFAULT_SEED} if sizes else None,
    }
