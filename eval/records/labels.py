"""A record made from `benchmarks/label_decoding.py` runs: a role's label decoded greedily, ranked, and ranked with
calibration, beside the majority class and a probe.

The record (`docs/records/<name>.json`, `kind: labels`) keeps per source run its task (`strategy`: the sr student's
strategy on ESD-CoT val and test; `emotion`: TRACE's asi on ED, one split, `i_acc`), what ran (adapters, pipeline,
command, commit, machine), and per split each decoding's accuracy and macro-F1 with their 95% CIs, its seconds per
dialogue (the ranking's apart) and the labels it changed from greedy's; the majority class's and the probe's
figures; the decoding chosen on val; the label-only oracle when the run measured it. It renders as one table per
task (`render_labels_record`) and as a paragraph in words (`render_labels_summary`); reading and checking files is
`eval.records.compare`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from distill.pipeline.stage_key import digest
from eval.compare.markdown import fmt, interval, markdown_table, wrap_paragraph
from eval.records.compare import CompareRecordError, RecordFileError, read_json_object, record_head, require_fields

LABEL_RUN = "a `benchmarks/label_decoding.py` output"
TASKS = ("strategy", "emotion")
ROLES = {"strategy": "sr"}  # a strategy run names no role: its label is sr's
EMOTION_SPLIT = "i_acc"  # an emotion run's one set of figures (ED's I-ACC), kept as the split it was scored on
SPLIT_TITLES = {EMOTION_SPLIT: "I-ACC"}
# what the record reads from every run; a task's own fields, and each decoding's, are checked per split below
RUN_FIELDS = {"task": "text", "decodings": "object", "majority": "object", "probe": "object", "command": "text",
              "commit": "any", "machine": "object", "dialogues": "any"}  # fmt: skip
TASK_FIELDS = {"strategy": {"adapters": "text", "pipeline": "text", "dialogues": "object", "chosen.decoding": "text",
                            "chosen.by": "text"},
               "emotion": {"role": "text", "dialogues": "number"}}  # fmt: skip
STAT = {"value": "any", "ci_low": "any", "ci_high": "any"}
FIGURE_FIELDS = {f"{metric}.{k}": kind for metric in ("accuracy", "macro_f1") for k, kind in STAT.items()}
ORACLE_FIELDS = {"split": "any", "full": "object", "label_only": "object"}
ORACLE_METRICS = {"bertscore_f1": "BERTScore F", "rouge_l": "ROUGE-L"}
# what rendering reads from a labels record
LABELS_RECORD_FIELDS = {"name": "text", "commit": "text", "date": "text", "command": "text", "runs": "list",
                        "runs[].task": "text", "runs[].source": "text", "runs[].role": "text", "runs[].splits": "list",
                        "runs[].n": "object", "runs[].decodings": "object", "runs[].majority": "object",
                        "runs[].probe": "object", "runs[].command": "text", "runs[].commit": "any",
                        "runs[].machine": "text", "runs[].chosen": "any",
                        "runs[].label_only_oracle": "any"}  # fmt: skip


# --- reading -----------------------------------------------------------------------------------------


def read_label_runs(paths: list[str]) -> list[dict[str, Any]]:
    """Each `--labels` JSON, checked for what the record reads, or one line naming the file and what is wrong. The
    same results twice (the same file, or a copy under another name: the same JSON content) are refused."""
    runs, seen = [], {}
    for item in paths:
        path = Path(item)
        data = read_json_object(path, LABEL_RUN)
        if (key := digest(data)) in seen:
            raise CompareRecordError(f"--labels {item}: the same results as --labels {seen[key]}; one record keeps "
                                     "each run once")  # fmt: skip
        seen[key] = item
        _check_run(data, path)
        runs.append(data)
    return runs


def _check_run(data: dict[str, Any], path: Path) -> None:
    """Every field rendering reads, each decoding's figures by their full dotted path, so a bad file is refused
    before any record is made, naming the first field it lacks."""
    if "kind" in data:  # a docs record (`records write` makes them) is no benchmark run
        raise RecordFileError(f"{path}: a `kind: {data['kind']}` record, not {LABEL_RUN}")
    require_fields(data, path, LABEL_RUN, RUN_FIELDS)
    if data["task"] not in TASKS:
        raise RecordFileError(f"{path}: not {LABEL_RUN}: `task` is {data['task']!r}, not one of {', '.join(TASKS)}")
    require_fields(data, path, LABEL_RUN, TASK_FIELDS[data["task"]])
    fields = {}
    for split, modes in _split_modes(data, path).items():
        for mode in modes:
            where = f"decodings.{split}.{mode}" if data["task"] == "strategy" else f"decodings.{mode}.{split}"
            fields.update({f"{where}.{field}": kind for field, kind in FIGURE_FIELDS.items()})
        fields.update({f"{who}.{split}.{field}": kind for who in ("majority", "probe") for field, kind in
                       FIGURE_FIELDS.items()})  # fmt: skip
    require_fields(data, path, LABEL_RUN, fields)
    if data["task"] == "strategy" and data["chosen"]["decoding"] not in next(iter(data["decodings"].values()), {}):
        raise RecordFileError(f"{path}: not {LABEL_RUN}: `chosen.decoding` {data['chosen']['decoding']!r} is none of "
                              "its decodings")  # fmt: skip
    if data.get("label_only_oracle") is not None:
        require_fields(data, path, LABEL_RUN, {f"label_only_oracle.{k}": kind for k, kind in ORACLE_FIELDS.items()})


def _split_modes(data: dict[str, Any], path: Path) -> dict[str, list[str]]:
    """split -> its decodings' names: a strategy run's `decodings.<split>.<decoding>`, an emotion run's
    `decodings.<decoding>.i_acc`."""
    decodings = data["decodings"]
    if data["task"] == "emotion":
        return {EMOTION_SPLIT: list(decodings)}
    if not decodings or not all(isinstance(modes, dict) and modes for modes in decodings.values()):
        raise RecordFileError(f"{path}: not {LABEL_RUN}: `decodings` holds no split of decodings")
    return {split: list(modes) for split, modes in decodings.items()}


# --- writing -----------------------------------------------------------------------------------------


def record_from_label_runs(
    runs: list[dict[str, Any]], name: str, command: str, commit: str, machine: str
) -> dict[str, Any]:
    """The record of label_decoding runs, each kept as its own source (its task, what ran, its figures)."""
    if not runs:
        raise CompareRecordError(f"record '{name}': no label_decoding JSON given")
    return {**record_head(name, "labels", commit, machine, command), "runs": [_run(data) for data in runs]}


def _run(data: dict[str, Any]) -> dict[str, Any]:
    task = data["task"]
    splits = list(_splits(data))
    dialogues = data["dialogues"]
    return {
        "task": task,
        "source": _source(data),
        "role": data.get("role") or ROLES[task],
        "adapters": data.get("adapters"),
        "pipeline": data.get("pipeline"),
        "oracle": data.get("oracle"),
        "data": data.get("data"),
        "command": data["command"],
        "commit": data["commit"],
        "machine": _machine_text(data["machine"]),
        "dtype": data.get("dtype_resolved"),
        "splits": splits,
        "n": dialogues if isinstance(dialogues, dict) else {splits[0]: dialogues},
        "decodings": _decodings(data),
        "majority": {split: _figures(data["majority"][split]) for split in splits},
        "majority_label": data["majority"].get("label"),
        "majority_from": data["majority"].get("from"),
        "probe": {split: _figures(data["probe"][split]) for split in splits},
        "probe_model": data["probe"].get("model"),
        "probe_fitted": _probe_fitted(data["probe"]),
        "probe_text": data["probe"].get("text"),
        "chosen": {k: data["chosen"][k] for k in ("decoding", "by")} if data.get("chosen") else None,
        "label_only_oracle": _oracle(data.get("label_only_oracle")),
    }


def _splits(data: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """split -> decoding -> its figures, an emotion run's turned round (its seconds beside its one split's)."""
    if data["task"] == "strategy":
        return data["decodings"]
    return {EMOTION_SPLIT: {mode: {**f, **f[EMOTION_SPLIT]} for mode, f in data["decodings"].items()}}


def _decodings(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """decoding -> split -> accuracy, macro-F1, seconds per dialogue, the ranking's, the labels changed."""
    decodings: dict[str, dict[str, Any]] = {}
    for split, modes in _splits(data).items():
        for mode, f in modes.items():
            decodings.setdefault(mode, {})[split] = {
                **_figures(f),
                "ranking_seconds_per_dialogue": f.get("ranking_seconds_per_dialogue"),
                "labels_changed": (f.get("versus_greedy") or {}).get("label_changed"),
            }
    return decodings


def _figures(f: dict[str, Any]) -> dict[str, Any]:
    stats = {metric: {k: f[metric].get(k) for k in ("value", "ci_low", "ci_high", "n")} for metric in
             ("accuracy", "macro_f1")}  # fmt: skip
    return {**stats, "seconds_per_dialogue": f.get("seconds_per_dialogue")}


def _probe_fitted(probe: dict[str, Any]) -> Optional[str]:
    """What the probe was fitted on: a strategy run's train split, an emotion run's other conversation folds."""
    if probe.get("train_dialogues"):
        return f"fitted on {fmt(probe['train_dialogues'])} train dialogues"
    return f"cross-fitted over {fmt(probe['folds'])} conversation folds" if probe.get("folds") else None


def _source(data: dict[str, Any]) -> str:
    """What a run decoded, short: the pipeline's file stem and the adapters' last two folders (`escot
    traces/seed-42`), or the prompt style of a run without adapters."""
    if not data.get("adapters"):
        return data.get("prompt_style") or "base model"
    pipeline = Path(data.get("pipeline") or "").stem
    return " ".join(part for part in (pipeline, "/".join(Path(data["adapters"]).parts[-2:])) if part)


def _machine_text(machine: dict[str, Any]) -> str:
    """A run's machine record in the words `eval.records.machine_line` says this machine in."""
    from eval.records.curve import machine_text

    return machine_text(
        machine.get("cores") or "?", machine.get("cpu") or "unknown CPU", set(machine.get("cpu_flags") or [])
    )


def _oracle(oracle: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The label-only oracle: re given the gold label alone against re given the full oracle, per metric."""
    if oracle is None:
        return None
    metrics = {
        metric: {
            "label_only": oracle["label_only"].get(metric),
            "full": oracle["full"].get(metric),
            "diff": oracle.get(f"label_only_minus_full_{metric}"),
        }
        for metric in ORACLE_METRICS
        if oracle["label_only"].get(metric) and oracle["full"].get(metric)
    }
    kept = ("split", "reference", "re_temperature", "seed")
    return {**{k: oracle.get(k) for k in kept}, "bertscore_model": oracle["full"].get("bertscore_model"), **metrics}


# --- rendering ---------------------------------------------------------------------------------------


def render_labels_record(record: dict[str, Any]) -> list[str]:
    """Per task: its table, what ran, the label-only oracle; last the record's own line."""
    lines: list[str] = []
    for runs in _by_task(record["runs"]).values():
        lines += [*wrap_paragraph(_title(runs)), "", *_table(runs), ""]
        lines += [*wrap_paragraph(_sources_line(runs)), ""]
        for run in runs:
            if run["label_only_oracle"]:
                lines += [*wrap_paragraph(_oracle_in_words(run, len(runs) > 1)), ""]
    made = f"Recorded at commit `{record['commit']}` on {record['date']}: `{record['command']}`"
    return [*lines, *wrap_paragraph(f"{made} (95% CIs; record `docs/records/{record['name']}.json`).")]


def _by_task(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    tasks: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        tasks.setdefault(run["task"], []).append(run)
    return tasks


def _title(runs: list[dict[str, Any]]) -> str:
    first = runs[0]
    oracle = ", ".join(f"{role}: {given}" for role, given in (first.get("oracle") or {}).items())
    data = f"`{Path(first['data']).name}`, " if first.get("data") else ""
    counts = ", ".join(f"{_split_title(s)} {fmt(first['n'].get(s))}" for s in first["splits"])
    given = f", oracle {oracle}" if oracle else ""
    return f"**The {first['task']} label** (`{first['role']}`{given}; {data}{counts} dialogues):"


def _split_title(split: str) -> str:
    return SPLIT_TITLES.get(split, split)


def _table(runs: list[dict[str, Any]]) -> list[str]:
    """One row per (run, decoding), then the majority class and the probe once: the first run's (they do not
    depend on the adapters; a run that disagrees is not shown)."""
    splits, first = runs[0]["splits"], runs[0]
    timed = "s / dialogue" if len(splits) == 1 else f"{_split_title(splits[-1])} s / dialogue"
    header = ["source", "decoding", *[f"{_split_title(s)} {m}" for s in splits for m in ("accuracy", "macro-F1")],
              timed]  # fmt: skip
    rows = []
    for run in runs:
        chosen = (run["chosen"] or {}).get("decoding")
        for mode, by_split in run["decodings"].items():
            said = f"{mode} (chosen)" if mode == chosen else mode
            rows.append([run["source"], said, *_cells(by_split, splits)])
    rows.append(["–", "majority class", *_cells(first["majority"], splits, timed=False)])
    rows.append(["–", "probe", *_cells(first["probe"], splits)])
    return markdown_table(header, rows)


def _cells(by_split: dict[str, Any], splits: list[str], timed: bool = True) -> list[str]:
    cells = [_stat(by_split.get(s, {}).get(m)) for s in splits for m in ("accuracy", "macro_f1")]
    seconds = by_split.get(splits[-1], {}).get("seconds_per_dialogue") if timed else None
    return [*cells, fmt(seconds, 2)]


def _stat(stat: Optional[dict[str, Any]]) -> str:
    stat = stat or {}
    return interval(stat.get("value"), stat.get("ci_low"), stat.get("ci_high"))


def _sources_line(runs: list[dict[str, Any]]) -> str:
    """Each run's command, commit and machine; what the majority class and the probe are; how `chosen` chose."""
    first = runs[0]
    ran = "; ".join(
        f"{run['source']}: `{run['command']}` at commit `{(run['commit'] or 'unknown')[:7]}`, {run['machine']}"
        + (f", {run['dtype']}" if run.get("dtype") else "")
        for run in runs
    )
    majority = " ".join(filter(None, ["the majority class", first.get("majority_label")]))
    majority += f", from {first['majority_from']}" if first.get("majority_from") else ""
    probe = f"the probe: {first.get('probe_model') or 'a classifier'}"
    probe += f", of {first['probe_text']}" if first.get("probe_text") else ""
    probe += f", {first['probe_fitted']}" if first.get("probe_fitted") else ""
    chosen = next((run["chosen"]["by"] for run in runs if run["chosen"]), None)
    by = f". (chosen): picked by {chosen}; no setting is chosen on test" if chosen else ""
    return f"Runs: {ran}. Beside them {majority}; {probe}{by}."


def _oracle_in_words(run: dict[str, Any], named: bool) -> str:
    """re given the gold label alone against re given the full oracle, per metric, with their paired difference."""
    oracle = run["label_only_oracle"]
    said = []
    for metric, title in ORACLE_METRICS.items():
        if metric in oracle:
            m, diff = oracle[metric], oracle[metric]["diff"] or {}
            gap = interval(diff.get("diff"), diff.get("ci_low"), diff.get("ci_high"))
            said.append(f"{title} {_stat(m['label_only'])} against {_stat(m['full'])} (label-only − full {gap})")
    who = f" of {run['source']}" if named else ""
    about = f"{oracle['split']}, re at T {_number(oracle['re_temperature'])}, seed {_number(oracle['seed'])}"
    return (f"Label-only oracle{who} ({about}; scored against {oracle['reference']}, BERTScore on "
            f"{oracle['bertscore_model']}): re given the gold label alone against re given the full oracle: "
            f"{'; '.join(said) or '–'}.")  # fmt: skip


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else fmt(value)


def render_labels_summary(record: dict[str, Any]) -> list[str]:
    """Per task in words: any decoding above the majority class by its whole CI, the one chosen on val and its
    test figures, and what ranking adds to the greedy pass's seconds."""
    parts = [_task_in_words(runs) for runs in _by_task(record["runs"]).values()]
    return wrap_paragraph(" ".join(parts) + f" Intervals are 95% CIs (record `docs/records/{record['name']}.json`).")


def _task_in_words(runs: list[dict[str, Any]]) -> str:
    first, many = runs[0], len(runs) > 1
    split = first["splits"][-1]  # the split the figures are reported on: test, or an emotion run's one
    majority = (first["majority"][split]["accuracy"] or {}).get("value")
    above = [f"{_who(run, mode, many)} {_stat(f[split]['accuracy'])}" for run in runs
             for mode, f in run["decodings"].items()
             if majority is not None and (f.get(split, {}).get("accuracy") or {}).get("ci_low") is not None
             and f[split]["accuracy"]["ci_low"] > majority]  # fmt: skip
    counted = f"{_split_title(split)}, {fmt(first['n'].get(split))} dialogues"
    title = f"The {first['task']} label (`{first['role']}`, {counted})"
    beats = ", ".join(above) or "none"
    return (f"{title}: decodings whose whole 95% accuracy CI lies above the majority class's {fmt(majority, 3)}: "
            f"{beats}. {_chosen_in_words(runs, split, many)} {_ranking_in_words(runs, split, many)}")  # fmt: skip


def _who(run: dict[str, Any], mode: str, many: bool) -> str:
    return f"{run['source']} {mode}" if many else mode


def _chosen_in_words(runs: list[dict[str, Any]], split: str, many: bool) -> str:
    chosen = [run for run in runs if run["chosen"]]
    if not chosen:
        return "None chosen (one split: nothing held out to choose on)."
    said = []
    for run in chosen:
        f = run["decodings"][run["chosen"]["decoding"]].get(split, {})
        said.append(f"{_who(run, run['chosen']['decoding'], many)}, {split} accuracy {_stat(f.get('accuracy'))}, "
                    f"macro-F1 {_stat(f.get('macro_f1'))}")  # fmt: skip
    return f"Chosen by {chosen[0]['chosen']['by'].split(' (')[0]}: {'; '.join(said)}."


def _ranking_in_words(runs: list[dict[str, Any]], split: str, many: bool) -> str:
    """`Ranking adds 0.47 s a dialogue (rank), 0.47 s (rank-calibrated) to the greedy pass's 0.69 s.`"""
    said = []
    for run in runs:
        greedy = run["decodings"].get("greedy", {}).get(split, {}).get("seconds_per_dialogue")
        ranked = {mode: f[split]["ranking_seconds_per_dialogue"] for mode, f in run["decodings"].items()
                  if f.get(split, {}).get("ranking_seconds_per_dialogue") is not None}  # fmt: skip
        added = [f"{fmt(seconds, 2)} s ({mode})" for mode, seconds in ranked.items()]
        if added:
            who = f"{run['source']}: " if many else ""
            said.append(f"{who}{', '.join(added)} to the greedy pass's {fmt(greedy, 2)} s")
    return f"Ranking adds, per dialogue, {'; '.join(said)}." if said else "No decoding was ranked."
