"""`python -m eval score`: the automatic metrics for responses from any source (a CSV or JSONL file).

    python -m eval score --responses out.csv --column response [--gold-column gold_response]
        [--emotion-column emotion --gold-emotion-column gold_emotion] [--ppl-model smollm2-135m]
        [--bertscore-model minilm] [--ppl-context dialogue --context-column dialogue] [--out metrics.json]

Dist/EAD always run (seconds, no model). I-ACC runs when both emotion columns are given, BERTScore
when a gold column is given, PPL only with ``--ppl-model``; one warning line on stderr names each metric
skipped and the flag that turns it on. Every reply metric of the registry (eval.metrics.registry) runs too. The
metrics JSON goes to stdout (and ``--out``); a missing file or column is one line on stderr and exit code 2.
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
from eval.metrics.bertscore import DEFAULT_BERTSCORE_MODEL
from eval.metrics.diversity import DEFAULT_EAD_ENCODING, diversity_metrics
from eval.metrics.perplexity import DEFAULT_PPL_CONTEXT, PPL_CONTEXTS
from eval.metrics.registry import reply_metrics, score_replies


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


def score_rows(rows: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    from eval.metrics.accuracy import emotion_accuracy

    responses = [r or "" for r in column(rows, args.column, args.responses)]
    out: dict[str, Any] = {
        "file": args.responses,
        "column": args.column,
        "n": len(responses),
        "diversity": diversity_metrics(responses, args.ead_tokenizer),
    }
    if args.emotion_column or args.gold_emotion_column:
        if not (args.emotion_column and args.gold_emotion_column):
            raise ScoreInputError("I-ACC needs both --emotion-column and --gold-emotion-column")
        gold = column(rows, args.gold_emotion_column, args.responses, label=True)
        for (where, _), value in zip(rows, gold):
            try:
                to_ekman(value)
            except ValueError as err:
                raise ScoreInputError(f"{args.responses} {where}: field '{args.gold_emotion_column}': {err}") from None
        # gold given as ED's 32 labels also yields a 32-class score; Ekman names or ids give 6-class only
        gold_fine = gold if all(g and g.strip().lower() in ED_TO_EKMAN for g in gold) else None
        out["i_acc"] = emotion_accuracy(
            column(rows, args.emotion_column, args.responses, required=False, label=True), gold, gold_fine
        )
    if args.gold_column:
        from eval.metrics.bertscore import bertscore

        out["bertscore"] = bertscore(
            responses, column(rows, args.gold_column, args.responses, required=False), args.bertscore_model
        )
    if args.ppl_model:
        from eval.metrics.perplexity import perplexity

        out["ppl"] = perplexity(responses, args.ppl_model, args.ppl_context, _ppl_contexts(rows, args))
    out.update(_registered(rows, responses, args))
    return out


def _registered(rows: list[tuple[str, dict[str, Any]]], responses: list[str], args: argparse.Namespace) -> dict:
    """The registry's own reply metrics (eval.metrics.registry), given the gold and context columns when named."""
    gold = column(rows, args.gold_column, args.responses, required=False) if args.gold_column else None
    contexts = column(rows, args.context_column, args.responses) if args.context_column else None
    return {spec.name: score_replies(spec, responses, gold, contexts)[0] for spec in reply_metrics()}


def _ppl_contexts(rows: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> Optional[list[str]]:
    """The dialogue before each response, for `--ppl-context dialogue` (from `--context-column`)."""
    if args.ppl_context != "dialogue":
        return None
    if not args.context_column:
        raise ScoreInputError("--ppl-context dialogue needs --context-column (the dialogue before each response)")
    return [c or "" for c in column(rows, args.context_column, args.responses)]


def skipped_metrics(args: argparse.Namespace) -> list[str]:
    """The metrics this run leaves out for want of a flag, each with the flag that turns it on."""
    wants = {
        "I-ACC (--emotion-column and --gold-emotion-column)": args.emotion_column or args.gold_emotion_column,
        "BERTScore (--gold-column)": args.gold_column,
        "PPL (--ppl-model, e.g. smollm2-135m)": args.ppl_model,
    }
    return [metric for metric, flag in wants.items() if not flag]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--responses", required=True, help="a .csv (with header) or .jsonl file of responses")
    parser.add_argument("--column", required=True, help="the column holding the responses to score")
    parser.add_argument("--gold-column", help="gold reply column: enables BERTScore")
    parser.add_argument("--emotion-column", help="predicted emotion column (Ekman or ED labels): enables I-ACC")
    parser.add_argument(
        "--gold-emotion-column", help="gold emotion column (Ekman, or ED's 32 for a 32-class score too)"
    )
    parser.add_argument("--ppl-model", help="reference LM alias/path for PPL (e.g. smollm2-135m); off when not given")
    parser.add_argument(
        "--ppl-context",
        default=DEFAULT_PPL_CONTEXT,
        choices=PPL_CONTEXTS,
        help="response: TRACE's PPL (no start token, first token unscored); document_start: every token "
        "scored after the LM's document-start token; dialogue: the response scored after --context-column",
    )
    parser.add_argument("--context-column", help="the dialogue before each response (for --ppl-context dialogue)")
    parser.add_argument(
        "--bertscore-model", default=DEFAULT_BERTSCORE_MODEL, help="BERTScore encoder alias or local dir"
    )
    parser.add_argument("--ead-tokenizer", default=DEFAULT_EAD_ENCODING, help="EAD tokenizer (TRACE's by default)")
    parser.add_argument("--out", help="also write the metrics JSON here")


USER_ERRORS = (ScoreInputError,)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    if args.out and Path(args.out).is_dir():
        raise ScoreInputError(f"{args.out}: --out is a directory; give a file path for the metrics JSON")
    if args.out and (problem := not_a_directory(Path(args.out).parent)):
        raise ScoreInputError(f"{args.out}: cannot write the metrics JSON there: {problem}")
    metrics = score_rows(read_rows(args.responses), args)
    skipped = skipped_metrics(args)
    if skipped:  # a metric that is silently absent reads as "not applicable", not "not asked for"
        print(f"warning: skipped {', '.join(skipped)}", file=sys.stderr)
    text = json.dumps(metrics, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        try:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            raise ScoreInputError(f"{args.out}: cannot write the metrics JSON ({err.strerror})") from None
    return 0
