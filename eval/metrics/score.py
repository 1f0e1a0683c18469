"""`python -m eval score`: the registry's metrics for responses from any source (a CSV or JSONL file).

    python -m eval score --responses out.csv --column response [--gold-column gold_response]
        [--emotion-column emotion --gold-emotion-column gold_emotion] [--label-column strategy
        --gold-label-column gold_strategy] [--seeker-column seeker_turn] [--answer-column emotion_text
        --reference-answer-column reference_emotion] [--ppl-model smollm2-135m] [--bertscore-model minilm]
        [--ppl-context dialogue --context-column dialogue] [--out metrics.json]

Every metric of the registry (eval.metrics.registry) runs that the file has the columns for: Dist/EAD
always (seconds, no model), I-ACC when both emotion columns are given, BERTScore, ROUGE-L and BLEU-2 when a
gold column is given, label accuracy when both label columns are given (any labels: the gold column's are the
label set), relevance when the seeker's last turn is given, answer similarity when both answer columns are; a
metric that loads a model on request alone (PPL) runs only when its first setting is given (``--ppl-model``).
Each setting of a metric is a flag, ``--<metric>-<setting>``. One warning line on stderr names each metric
skipped and the flag that turns it on. The metrics JSON goes to stdout (and ``--out``); a missing file or
column is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from data_prep.commands import not_a_directory
from data_prep.ed_formats import read_csv_rows, undecodable
from data_prep.taxonomy import ED_TO_EKMAN, to_ekman
from eval.metrics.registry import METRICS, MetricSpec, Sample, score_sample

# The inputs a metric may need that a file can hold, and the flags that name their columns. A metric that
# needs anything else (the latency of a run, a reference system) is not one `eval score` can run.
EMOTION_FLAGS = "--emotion-column and --gold-emotion-column"
LABEL_FLAGS = "--label-column and --gold-label-column"
ANSWER_FLAGS = "--answer-column and --reference-answer-column"
INPUT_FLAGS = {
    "gold_replies": "--gold-column",
    "contexts": "--context-column",
    "seeker_turns": "--seeker-column",
    "answers": ANSWER_FLAGS,
    "reference_answers": ANSWER_FLAGS,
    "emotions": EMOTION_FLAGS,
    "gold_emotions": EMOTION_FLAGS,
    "labels": LABEL_FLAGS,
    "gold_labels": LABEL_FLAGS,
}


class ScoreInputError(ValueError):
    """The responses file or one of its columns is unusable; the message names file, row and field."""


def read_rows(path: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) for each row of a .csv (header row) or .jsonl (one object per line) file; `where` is
    "line N" of a JSONL file or "row N" of a CSV, so an error names the place to fix."""
    file = Path(path)
    if not file.is_file():
        raise ScoreInputError(f"{path}: no such file")
    if file.suffix.lower() == ".jsonl":
        return _jsonl_rows(file, path)
    if file.suffix.lower() != ".csv":
        raise ScoreInputError(f"{path}: expected a .csv or .jsonl file")
    _, rows = read_csv_rows(file)
    found = [(f"row {number}", row) for number, (_, row) in enumerate(rows, start=1)]
    if not found:
        raise ScoreInputError(f"{path}: no rows to score")
    return found


def _jsonl_rows(file: Path, path: str) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for number, raw in enumerate(file.read_bytes().splitlines(), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ScoreInputError(f"{path} line {number}: non-UTF-8 bytes (save the file as UTF-8)") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ScoreInputError(f"{path} line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ScoreInputError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}")
        rows.append((f"line {number}", row))
    if not rows:
        raise ScoreInputError(f"{path}: no rows to score")
    return rows


def column(
    rows: list[tuple[str, dict[str, Any]]], name: str, path: str, required: bool = True, label: bool = False
) -> list[Optional[str]]:
    """One column as strings; a missing column (or a missing value when required) names the row.

    A JSONL value must be a string (a label column may also hold an integer id): a number, list or
    NaN in a reply column is a broken export, and scoring its repr as text would hide that.
    """
    if rows and all(name not in row for _, row in rows):
        known = ", ".join(rows[0][1].keys())
        raise ScoreInputError(f"{path}: no column '{name}' (columns: {known})")
    values = []
    for where, row in rows:
        value = row.get(name)
        if value is None and required:
            raise ScoreInputError(f"{path} {where}: field '{name}' is missing")
        allowed = (str, int) if label else (str,)
        if value is not None and (isinstance(value, bool) or not isinstance(value, allowed)):
            raise ScoreInputError(
                f"{path} {where}: field '{name}': expected {'a label' if label else 'text'}, "
                f"got {type(value).__name__} {json.dumps(value)[:40]}"
            )
        if value is not None and undecodable(str(value)):
            raise ScoreInputError(f"{path} {where}: field '{name}': non-UTF-8 bytes (save the file as UTF-8)")
        values.append(None if value is None else str(value))
    return values


def read_sample(rows: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> Sample:
    """The file's responses and whatever else its named columns hold, as the metrics read them."""
    path = args.responses
    sample: dict[str, Any] = {"replies": [r or "" for r in column(rows, args.column, path)]}
    if args.gold_column:
        sample["gold_replies"] = column(rows, args.gold_column, path, required=False)
    if args.context_column:
        sample["contexts"] = [c or "" for c in column(rows, args.context_column, path)]
    if args.seeker_column:
        sample["seeker_turns"] = column(rows, args.seeker_column, path, required=False)
    if args.emotion_column or args.gold_emotion_column:
        sample.update(_emotions(rows, args))
    if args.label_column or args.gold_label_column:
        sample.update(_pair(rows, args, LABEL_FLAGS, ("labels", "gold_labels"), label=True))
    if args.answer_column or args.reference_answer_column:
        sample.update(_pair(rows, args, ANSWER_FLAGS, ("answers", "reference_answers")))
    return Sample(**sample)


def _emotions(rows: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    path = args.responses
    if not (args.emotion_column and args.gold_emotion_column):
        raise ScoreInputError(f"{EMOTION_FLAGS} go together: the predicted and the gold emotion")
    gold = column(rows, args.gold_emotion_column, path, label=True)
    for (where, _), value in zip(rows, gold):
        try:
            to_ekman(value)
        except ValueError as err:
            raise ScoreInputError(f"{path} {where}: field '{args.gold_emotion_column}': {err}") from None
    return {
        "emotions": column(rows, args.emotion_column, path, required=False, label=True),
        "gold_emotions": gold,
        # gold given as ED's 32 labels also yields a 32-class score; Ekman names or ids give 6-class only
        "gold_fine": gold if all(g and g.strip().lower() in ED_TO_EKMAN for g in gold) else None,
    }


def _pair(
    rows: list[tuple[str, dict[str, Any]]],
    args: argparse.Namespace,
    flags: str,
    fields: tuple[str, str],
    label: bool = False,
) -> dict:
    """A source's answer column and the one it is scored against, named by two flags that go together."""
    names = [getattr(args, flag[2:].replace("-", "_")) for flag in flags.split(" and ")]
    if not all(names):
        raise ScoreInputError(f"{flags} go together: the answer and the one it is scored against")
    return {
        field: column(rows, name, args.responses, required=False, label=label) for field, name in zip(fields, names)
    }


def _flag(spec: MetricSpec, setting: str) -> str:
    return f"--{spec.prefix()}-{setting.replace('_', '-')}"


def _given(spec: MetricSpec, args: argparse.Namespace) -> dict[str, Any]:
    """The settings of `spec` given on the command line."""
    dests = {k: _flag(spec, k)[2:].replace("-", "_") for k in spec.settings}
    return {k: value for k, dest in dests.items() if (value := getattr(args, dest, None)) is not None}


def metric_settings(args: argparse.Namespace, sample: Sample) -> tuple[dict[str, dict], list[str]]:
    """The metrics this run scores, each with its settings (the defaults, overridden by the flags given),
    and the ones it skips for want of a flag, each with the flag that turns it on. A metric asked for by
    its flags that the file cannot feed is an error, not a skip."""
    settings, lacking, off = {}, {}, []  # lacking: the column flags -> the metrics they would turn on
    for name, spec in METRICS.items():
        if not spec.in_score:
            continue
        given = _given(spec, args)
        first = next(iter(spec.settings), None)
        if spec.opt_in and first not in given:
            off.append(f"{spec.label} ({_flag(spec, first)}, e.g. {spec.settings[first]})")
            continue
        merged = {**spec.settings, **given}
        missing = [i for i in spec.needed(merged) if getattr(sample, i) is None]
        if not missing:
            settings[name] = merged
        elif all(i in INPUT_FLAGS for i in missing):
            flags = " and ".join(dict.fromkeys(INPUT_FLAGS[i] for i in missing))
            if spec.opt_in:
                asked = " ".join(f"{_flag(spec, k)} {v}" for k, v in given.items())
                raise ScoreInputError(f"{spec.label} with {asked} needs {flags}")
            lacking.setdefault(flags, []).append(spec.label)
    return settings, [f"{', '.join(labels)} ({flags})" for flags, labels in lacking.items()] + off


def _enables(needed: str) -> str:
    """': enables <the metrics that need this input>', for a column flag's help."""
    runs_here = (s for s in METRICS.values() if s.in_score and set(s.needed(s.settings)) <= {"replies", *INPUT_FLAGS})
    labels = [spec.label for spec in runs_here if needed in spec.needed(spec.settings)]
    return f": enables {', '.join(labels)}" if labels else ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--responses", required=True, help="a .csv (with header) or .jsonl file of responses")
    parser.add_argument("--column", required=True, help="the column holding the responses to score")
    parser.add_argument("--gold-column", help="gold reply column" + _enables("gold_replies"))
    parser.add_argument("--emotion-column", help="predicted emotion column (Ekman or ED labels)" + _enables("emotions"))
    parser.add_argument(
        "--gold-emotion-column", help="gold emotion column (Ekman, or ED's 32 for a 32-class score too)"
    )
    parser.add_argument("--label-column", help="predicted label column (a strategy, say)" + _enables("labels"))
    parser.add_argument("--gold-label-column", help="gold label column: its labels are the label set")
    parser.add_argument("--context-column", help="the dialogue before each response (for --ppl-context dialogue)")
    parser.add_argument(
        "--seeker-column", help="the seeker's last turn, the one each response answers" + _enables("seeker_turns")
    )
    parser.add_argument("--answer-column", help="a free-text answer column (an emotion, say)" + _enables("answers"))
    parser.add_argument(
        "--reference-answer-column", help="the reference answer each --answer-column value is scored against"
    )
    for spec in (s for s in METRICS.values() if s.in_score):  # each metric's settings, as --<metric>-<setting>
        for setting, default in spec.settings.items():
            options = {"type": type(default) if default is not None else str, **spec.options.get(setting, {})}
            options.setdefault("help", f"{spec.label}: {setting.replace('_', ' ')} (default: {default})")
            parser.add_argument(_flag(spec, setting), default=None, **options)
    parser.add_argument("--out", help="also write the metrics JSON here")


USER_ERRORS = (ScoreInputError,)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    if args.out and Path(args.out).is_dir():
        raise ScoreInputError(f"{args.out}: --out is a directory; give a file path for the metrics JSON")
    if args.out and (problem := not_a_directory(Path(args.out).parent)):
        raise ScoreInputError(f"{args.out}: cannot write the metrics JSON there: {problem}")
    rows = read_rows(args.responses)
    sample = read_sample(rows, args)
    settings, skipped = metric_settings(args, sample)
    if skipped:  # a metric that is silently absent reads as "not applicable", not "not asked for"
        print(f"warning: skipped {', '.join(skipped)}", file=sys.stderr)
    stats, _ = score_sample(sample, settings)
    metrics = {"file": args.responses, "column": args.column, "n": len(sample.replies), **stats}
    text = json.dumps(metrics, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        try:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            raise ScoreInputError(f"{args.out}: cannot write the metrics JSON ({err.strerror})") from None
    return 0
