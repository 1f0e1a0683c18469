"""Score systems side by side on one test split: what `python -m eval compare` runs (`eval.compare.cli_compare`).

The recipe: load the test split (and the exemplar index, checked to hold no test conversation),
get every system's traces on exactly those dialogues (`eval.compare.systems`), compute the same metrics for
each (`score_system`), judge each system against one reference, write ``report.json``, then render
``report.md`` and the plots from that JSON alone (`eval.compare.report`), so every printed number is a
stored one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import yaml

from data_prep.dialogues import Dialogue
from eval.compare.cost import cost_and_speed
from eval.compare.paired import ALPHA, human_gold, paired_comparisons, per_dialogue, score_ppl
from eval.compare.run_figures import reflection_figures, retries_per_role
from eval.compare.systems import CompareConfig, CompareError, SystemRun, check_index_disjoint, collect_systems
from eval.metrics.accuracy import emotion_accuracy, schema_valid_rate, teacher_agreement
from eval.metrics.diversity import diversity_metrics, human_ratios
from eval.metrics.registry import reply_metrics, score_replies
from eval.metrics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, holm, mean_with_ci
from eval.paper import load_paper_reference

REPORT_JSON = "report.json"
DECIMALS = 4


def load_config(path: str) -> CompareConfig:
    """Parse and validate a compare YAML; errors are one line naming the file and the field."""
    file = Path(path)
    if not file.is_file():
        raise CompareError(f"{path}: no such config file")
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise CompareError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    try:
        return CompareConfig.model_validate(raw)
    except Exception as err:
        errors = getattr(err, "errors", lambda: [])()
        if errors:
            first = errors[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise CompareError(f"{path}: field '{where}': {first['msg']}") from None
        raise CompareError(f"{path}: {err}") from None


def load_test_dialogues(config: CompareConfig, config_file: str) -> list[Dialogue]:
    from data_prep.loaders import load_split

    if not Path(config.dialogues).exists():
        raise CompareError(
            f"{config_file}: dialogues '{config.dialogues}' does not exist "
            "(build it with `python -m data_prep dialogues --out`)"
        )
    try:
        test = load_split(config.dialogues, config.split)
    except Exception as err:
        raise CompareError(f"{config_file}: dialogues: {err}") from None
    if not test:
        raise CompareError(f"{config_file}: split '{config.split}' of {config.dialogues} is empty")
    return test[: config.limit] if config.limit else test


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


def score_system(
    run: SystemRun, test: Sequence[Dialogue], config: CompareConfig, reference: Optional[SystemRun], reference_lm
) -> tuple[dict[str, Any], dict[str, list]]:
    """Every metric for one system on the test dialogues (its traces are in test order), and the
    per-dialogue values the paired comparisons resample."""
    result: dict[str, Any] = {
        "name": run.name,
        "source": run.source,
        "description": run.description,
        "n": len(test),
        "failed_traces": sum(t.status == "failed" for t in run.traces),
        "replies": run.replies,
    }
    extras: dict[str, list] = {}
    if run.replies:
        extras = _score_replies(result, [t.response or "" for t in run.traces], test, config, reference_lm)
    ran_asi = all(t.config.get("use_asi", True) for t in run.traces)
    # ASI answers Ekman's six, so there is no 32-class figure to list here (see `emotion_accuracy`)
    predicted = [t.emotion for t in run.traces]
    result["i_acc"] = {"ekman6": emotion_accuracy(predicted, [d.emotion for d in test])["ekman6"]} if ran_asi else None
    result["agreement"] = (
        teacher_agreement(run.traces, reference.traces)
        if reference is not None and reference.name != run.name
        else None
    )
    result["schema_valid"] = schema_valid_rate(run.traces)
    result["cost"] = _cost(run)
    result["retries"] = retries_per_role(run.traces)
    result["reflection"] = reflection_figures(run.traces)
    return result, per_dialogue(run, test, reference, extras)


def _score_replies(result: dict, responses: list[str], test: Sequence[Dialogue], config: CompareConfig, reference_lm):
    """The reply metrics into `result`; returns the per-dialogue values the paired comparisons need."""
    from eval.metrics.bertscore import bertscore

    result["empty_responses"] = sum(not r.strip() for r in responses)
    result["length_words"] = mean_with_ci([len(r.split()) for r in responses])
    result["diversity"] = diversity_metrics(responses, config.ead.tokenizer, config.ead.vocab_size)
    extras: dict[str, list] = {}
    if config.ppl is not None:
        result["ppl"], extras["ppl"] = score_ppl(responses, test, config, reference_lm)
    if config.bertscore is not None:
        b = config.bertscore
        score = bertscore(responses, [d.gold_response for d in test], b.model, b.num_layers, b.batch_size, True)
        extras["bertscore_f1"] = score.pop("items")
        result["bertscore"] = score
    contexts, gold = [d.render_context() for d in test], [d.gold_response for d in test]
    for spec in reply_metrics():  # the registry's own reply metrics (eval.metrics.registry)
        result[spec.name], items = score_replies(spec, responses, gold, contexts)
        if spec.paired and items is not None:
            extras[spec.name] = items
    return extras


def _cost(run: SystemRun) -> dict[str, Any]:
    cost = cost_and_speed(run.traces, run.wall_s, run.peak_rss_mb)
    cost["prompt_tokens_per_dialogue"] = sum(v["prompt_per_dialogue"] for v in cost["tokens_per_role"].values())
    cost["completion_tokens_per_dialogue"] = sum(v["completion_per_dialogue"] for v in cost["tokens_per_role"].values())
    cost["memory_method"] = run.memory_method
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
        "rule": "a win or loss counts only when both presentation orders agree; anything else is a tie; "
        "p is a two-sided sign test on wins vs losses (ties excluded); p_holm is Holm's adjustment over "
        "one pair's aspects (family-wise error rate), the p to read when claiming any aspect",
        "results": results,
    }


def rounded(value: Any) -> Any:
    """Floats to DECIMALS places everywhere, so report.md can show exactly what report.json holds."""
    if isinstance(value, float):
        return None if value != value else round(value, DECIMALS)  # NaN → null: JSON has no NaN
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def _mark_shared_outputs(runs: list[SystemRun], systems: list[dict[str, Any]]) -> None:
    """A system whose replies are exactly an earlier system's says so: the quickstart's untuned base is
    the teacher's own traces, and two identical rows must not read as an independent replication."""
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
    runs = collect_systems(config, test, index, config_file, out)
    reference = next(r for r in runs if r.name == config.reference_system())
    reference_lm = None
    if config.ppl is not None:
        from eval.metrics.perplexity import load_reference_lm

        reference_lm = load_reference_lm(config.ppl.model)
    scored = [score_system(run, test, config, reference, reference_lm) for run in runs]
    systems = [result for result, _ in scored]
    _mark_shared_outputs(runs, systems)
    paired = paired_comparisons({run.name: values for run, (_, values) in zip(runs, scored)})
    human = human_gold(test, config, reference_lm)
    for system in systems:
        if system.get("diversity"):
            system["human_ratio"] = human_ratios(system["diversity"], human["diversity"])
    return rounded(
        {
            "config_file": config_file,
            "config": config.model_dump(),
            "test": {
                "dialogues": config.dialogues,
                "split": config.split,
                "n": len(test),
                "ids": [d.id for d in test],
                "index": config.index,
            },
            "settings": {
                "reference_system": reference.name,
                "ppl": config.ppl.model_dump() if config.ppl else None,
                "bertscore": config.bertscore.model_dump() if config.bertscore else None,
                "ead": config.ead.model_dump(),
                "registered_metrics": {spec.name: spec.settings for spec in reply_metrics()},
                "bootstrap": {"resamples": DEFAULT_RESAMPLES, "seed": DEFAULT_SEED, "level_percent": 95},
                "paired_family": {"rows": len(paired), "correction": "holm", "alpha": ALPHA},
            },
            "systems": systems,
            "human_gold": human,
            "paper": load_paper_reference(config.paper_reference) if config.paper_reference else None,
            "paired": paired,
            "judge": judge_systems(config, runs, test),
        }
    )
