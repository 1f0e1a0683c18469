"""A record made from `eval compare` reports, one per curve point (ESCoT's curve, benchmarks/escot_curve.py).

The record (`docs/records/<name>.json`, `kind: compare`) keeps, per point, each system's figures with their 95%
CIs and what it learned from whom (the config's `about`), the paired differences the docs state (first − second
on the same test dialogues, as each pair was asked: `PAIRS`), and what each stage of the run cost (seconds and
peak RSS, from the runner's stage records). `eval.records.blocks` renders it into the docs' record blocks like any
record. Every file a record is made or rendered from is read here (`read_json_object`, `require_fields`): this is
the module the other records modules all import, and a bad file is one line naming it (`RecordFileError`).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Optional

from eval.compare.markdown import FIGURES, cell, fmt, interval, markdown_table, stages_lines, wrap_paragraph
from eval.metrics.registry import Figure
from eval.runner import STAGES_FILE

# (header, where in a report's system row); each a statistic with its CI, or a number
# the pairs the docs answer, as "first − second"; a report holds each pair once, in either order
PAIRS = (("traces", "direct"), ("joint", "direct"), ("traces", "joint"), ("full-chain", "traces"))
PAIRED_METRICS = {"bertscore_f1": "BERTScore F", "label_accuracy": "strategy accuracy", "relevance": "relevance"}
SUMMARY_METRICS = ("bertscore_f1", "label_accuracy")  # what the README's line states (the answer)


class CompareRecordError(ValueError):
    """A report the record cannot be made from; the message names the file."""


class RecordFileError(ValueError):
    """A file a record is made or rendered from (a report, a curve, a stage record, a record, a doc) that is missing,
    unreadable, not UTF-8 or not what it should be; the message names the file. It lives here, the module every
    records module imports, so that one reader serves them all."""


# what each kind of value must be where a file must hold it ("any": present, whatever it holds)
KINDS = {
    "object": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "text": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "any": lambda v: True,
}
KIND_NAMES = {"object": "an object", "list": "a list", "text": "text", "number": "a number"}
JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "true or false", type(None): "null"}  # fmt: skip


def read_utf8(path: Path, what: str) -> str:
    """The text of `path`, or one line naming it and why it cannot be read (missing, a folder, not UTF-8)."""
    path = Path(path)
    if not path.is_file():
        raise RecordFileError(f"{path}: {'a folder' if path.is_dir() else 'no such file'}, not {what}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise RecordFileError(f"{path}: not UTF-8 (byte {err.object[err.start]:#04x} at offset {err.start})") from None


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object `path` holds, or one line naming it: not JSON (truncated, say), or JSON but not an object."""
    text = read_utf8(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RecordFileError(f"{path}: not valid JSON ({err}), so not {what}") from None
    if not isinstance(data, dict):
        raise RecordFileError(f"{path}: holds {JSON_TYPES.get(type(data), 'a JSON value')}, not {what} (a JSON object)")
    return data


def require_fields(data: dict[str, Any], path: Path, what: str, fields: dict[str, str]) -> None:
    """Refuse `data` (read from `path`) unless it holds each field, a dotted path (`systems[].name`: every row's
    name) to a value of its `KINDS`; the first that does not is named, before anything reads it."""
    for field, kind in fields.items():
        if not _holds(data, field.split("."), KINDS[kind]):
            said = "is missing" if kind == "any" else f"is missing or not {KIND_NAMES[kind]}"
            raise RecordFileError(f"{path}: not {what}: `{field}` {said}")


def _holds(node: Any, parts: list[str], is_kind: Any) -> bool:
    if not parts:
        return is_kind(node)
    part, rest = parts[0], parts[1:]
    if not isinstance(node, dict) or part.removesuffix("[]") not in node:
        return False
    value = node[part.removesuffix("[]")]
    if part.endswith("[]"):
        return isinstance(value, list) and all(_holds(item, rest, is_kind) for item in value)
    return _holds(value, rest, is_kind)


# --- writing a record from compare reports ---------------------------------------------------------

# what the record reads from a report (`eval.compare.compare` writes it)
REPORT = "an `eval compare` report"
REPORT_FIELDS = {"test.dialogues": "text", "test.split": "text", "test.n": "number",
                 "settings.reference_system": "text", "config.systems[].name": "text", "systems[].name": "text",
                 "paired[].pair": "list", "paired[].metric": "text", "paired[].diff": "any", "paired[].ci_low": "any",
                 "paired[].ci_high": "any", "paired[].n": "any"}  # fmt: skip
STAGE_FIELDS = {"stage": "text", "seconds": "number", "peak_rss_mb": "any", "finished": "number"}
# what rendering reads from a compare record
COMPARE_RECORD_FIELDS = {"name": "text", "commit": "text", "date": "text", "machine": "text", "command": "text",
                         "test.n": "number", "test.split": "text", "points[].point": "text",
                         "points[].majority_class": "any", "points[].systems[].name": "text",
                         "points[].systems[].figures": "object", "points[].systems[].seconds_per_dialogue": "any",
                         "points[].systems[].tokens_per_dialogue": "any", "points[].paired[].pair": "list",
                         "points[].paired[].metric": "text", "points[].paired[].diff": "any",
                         "points[].paired[].ci_low": "any", "points[].paired[].ci_high": "any",
                         "points[].paired[].n": "any", "points[].paired[].p_holm": "any", "stages[].stage": "text",
                         "stages[].seconds": "number", "stages[].peak_rss_mb": "any"}  # fmt: skip


def read_compare_reports(items: list[str]) -> dict[str, dict[str, Any]]:
    """point -> report from `--compare POINT=REPORT` items, each checked for what the record reads: one report per
    point, every one scored on one test set against one reference system (the record states one of each)."""
    reports: dict[str, dict[str, Any]] = {}
    paths: dict[str, Path] = {}
    for item in items:
        point, sep, path = item.partition("=")
        if not sep or not point or not path:
            example = "150=runs/escot/150/compare/report.json"
            raise CompareRecordError(f"--compare {item}: give POINT=REPORT (e.g. {example})")
        if point in paths:
            also = f"also {paths[point]}"
            raise CompareRecordError(f"--compare {item}: point {point} is given twice ({also}); one report per point")
        reports[point], paths[point] = read_json_object(Path(path), REPORT), Path(path)
        require_fields(reports[point], paths[point], REPORT, REPORT_FIELDS)
    _one_test_set(reports, paths)
    return reports


def _one_test_set(reports: dict[str, dict[str, Any]], paths: dict[str, Path]) -> None:
    """Refuse points scored on test sets or against reference systems other than the first point's, naming both."""
    first = next(iter(reports), None)
    for point, report in reports.items():
        base = reports[first]
        ours, theirs = _test_set(report["test"]), _test_set(base["test"])
        if ours == theirs and not _same_ids(report["test"], base["test"]):
            ours += " with other dialogue ids"
        if ours != theirs:
            raise CompareRecordError(f"{paths[point]} was scored on {ours}, {paths[first]} on {theirs}: every point "
                                     "of a record is scored on one test set")  # fmt: skip
        ours, theirs = report["settings"]["reference_system"], base["settings"]["reference_system"]
        if ours != theirs:
            raise CompareRecordError(f"{paths[point]}'s reference system is {ours}, {paths[first]}'s {theirs}: a "
                                     "record's Dist/EAD shares are of one reference's replies")  # fmt: skip


def _test_set(test: dict[str, Any]) -> str:
    return f"{test['dialogues']} ({test['split']}, {test['n']} dialogues)"


def _same_ids(test: dict[str, Any], base: dict[str, Any]) -> bool:
    """The same dialogues, where both reports list them (a report made before `ids` was kept does not)."""
    if not (isinstance(test.get("ids"), list) and isinstance(base.get("ids"), list)):
        return True
    return sorted(map(str, test["ids"])) == sorted(map(str, base["ids"]))


def record_head(name: str, kind: str, commit: str, machine: str, command: str) -> dict[str, Any]:
    """What every record says first: its name and kind, and where, when and how its run was made."""
    return {"name": name, "kind": kind, "commit": commit, "date": dt.date.today().isoformat(), "machine": machine,
            "command": command}  # fmt: skip


def record_from_compares(
    reports: dict[str, dict[str, Any]],
    stages: list[dict[str, Any]],
    name: str,
    command: str,
    commit: str,
    machine: str,
    pairs: tuple[tuple[str, str], ...] = PAIRS,
) -> dict[str, Any]:
    """The record of a run's compare reports (point -> report.json), with its stages' costs; `pairs`: the paired
    differences it states, as "first − second" (the curve's by default; `eval.records.students` asks its own)."""
    if not reports:
        raise CompareRecordError(f"record '{name}': no compare report given")
    first = next(iter(reports.values()))
    return {
        **record_head(name, "compare", commit, machine, command),
        "test": {k: first["test"][k] for k in ("dialogues", "split", "n")},
        "reference": first["settings"]["reference_system"],
        "points": [_point(point, report, pairs) for point, report in reports.items()],
        # a stage an `eval students` rerun reused keeps the record of the run that made it, and says so
        "stages": [{k: s[k] for k in ("stage", "seconds", "peak_rss_mb", "reused") if k in s} for s in stages],
    }


def _point(point: str, report: dict[str, Any], pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    about = {s["name"]: s.get("about", "") for s in report["config"]["systems"]}
    return {
        "point": point,
        "systems": [_system(row, about.get(row["name"], "")) for row in report["systems"]],
        "majority_class": next(
            (_at(row, "label_accuracy.majority.rate") for row in report["systems"] if row.get("label_accuracy")), None
        ),
        "paired": [p for pair in pairs for p in _paired(report["paired"], *pair, _declared(report))],
        # which rows Holm's family held (a report written before identical rows were left out has none)
        "paired_family": report["settings"].get("paired_family"),
    }


def _declared(report: dict[str, Any]) -> Optional[list[str]]:
    """The pair the report's config declared primary, in its order (a report's primary row reads first − second
    as declared), or None."""
    primary = report["config"].get("primary")
    return list(primary["pair"]) if isinstance(primary, dict) and isinstance(primary.get("pair"), list) else None


def _system(row: dict[str, Any], about: str) -> dict[str, Any]:
    cost = row.get("cost") or {}
    teacher = cost.get("teacher_estimate") or {}
    tokens = (cost.get("prompt_tokens_per_dialogue") or 0) + (cost.get("completion_tokens_per_dialogue") or 0)
    return {
        "name": row["name"],
        "about": about,
        "figures": {f.path: f.read(row) for f in FIGURES},
        "seconds_per_dialogue": (cost.get("latency_s") or {}).get("value"),
        "tokens_per_dialogue": tokens or None,
        "teacher": {k: teacher[k] for k in teacher if k != "encoding"} or None,
        "failed_traces": row.get("failed_traces"),
    }


def _paired(rows: list[dict[str, Any]], first: str, second: str, declared: Optional[list[str]] = None
            ) -> list[dict[str, Any]]:  # fmt: skip
    """The report's paired rows of this pair on the record's metrics, as first − second; the primary row as it was
    declared (`declared`, else as the report has it), whichever order the record asks."""
    found = []
    for row in rows:
        if row["metric"] not in PAIRED_METRICS or set(row["pair"]) != {first, second}:
            continue
        order = [first, second]
        if row.get("primary"):
            order = list(declared) if declared and set(declared) == {first, second} else list(row["pair"])
        sign = 1 if row["pair"][0] == order[0] else -1
        low, high = (row["ci_low"], row["ci_high"]) if sign == 1 else (-row["ci_high"], -row["ci_low"])
        found.append({"pair": order, "metric": row["metric"], "diff": sign * row["diff"], "ci_low": low,
                      "ci_high": high, "n": row["n"], "p_holm": row.get("p_holm"),
                      "survives_holm": row.get("survives_holm"),
                      **({"primary": True} if row.get("primary") else {}),
                      **({"identical": True} if row.get("identical") else {})})  # fmt: skip
    return found


def _at(row: Any, path: str) -> Any:
    return Figure("", path).read(row)


# --- rendering -------------------------------------------------------------------------------------


def render_compare_record(record: dict[str, Any]) -> list[str]:
    """Per point: the systems' figures and cost, then the four paired differences; last the stages' costs."""
    lines = []
    for point in record["points"]:
        lines += [f"**{_point_title(point['point'])}** (majority class {fmt(point['majority_class'], 3)}):", ""]
        lines += systems_table(point["systems"]) + [""]
        if point["paired"]:
            lines += paired_table(point["paired"]) + ["", *wrap_paragraph(family_line(point)), ""]
    lines += stages_lines(record["stages"])
    return [*lines, *wrap_paragraph(run_line(record))]


def run_line(record: dict[str, Any]) -> str:
    """What the figures were scored on, and the run they came from."""
    test = record["test"]
    return (
        f"Scored on {test['n']} test dialogues ({test['split']}); 95% CIs; Dist/EAD as shares of the reference "
        f"replies. Run at commit `{record['commit']}` on {record['date']}, {record['machine']}: `{record['command']}`"
        f" (record `docs/records/{record['name']}.json`)."
    )


def render_compare_summary(record: dict[str, Any]) -> list[str]:
    """The paired differences in one paragraph (the README's line): at the largest N measured, and on the
    full-chain dialogues; the docs page renders every point."""
    parts = []
    for point in _summary_points(record["points"]):
        said = [paired_in_words(p) for p in point["paired"] if p["metric"] in SUMMARY_METRICS]
        if said:
            parts.append(f"{_point_title(point['point'])}: {'; '.join(said)}")
    largest = _largest(record["points"])
    labels = labels_in_words(largest, record["reference"]) if largest else ""
    return wrap_paragraph(". ".join(parts) + f"{labels} (95% CIs; record `docs/records/{record['name']}.json`).")


def paired_in_words(row: dict[str, Any]) -> str:
    """`first − second metric difference [CI] (who won)`: a paired difference as the README's line states it."""
    first, second = row["pair"]
    said = interval(row["diff"], row["ci_low"], row["ci_high"])
    return f"{first} − {second} {PAIRED_METRICS[row['metric']]} {said} ({_verdict(row)})"


def _verdict(row: dict[str, Any]) -> str:
    """Who won a paired difference, in words. A win is the primary comparison at its own 5%, or a row that survives
    Holm; any other row is "no finding", whatever its unadjusted CI says (the glossary's rule)."""
    first, second = row["pair"]
    if row["ci_low"] <= 0 <= row["ci_high"]:
        return "no finding: CI spans 0"
    winner = first if row["diff"] > 0 else second
    if row.get("primary"):  # declared before the run, tested alone: Holm's family leaves it out
        return (f"{winner} ahead, the primary comparison, holds" if row.get("survives_holm") else
                "no finding: the primary comparison, not at 5%")  # fmt: skip
    return f"{winner} ahead, holds after Holm" if row.get("survives_holm") else "no finding after Holm"


def labels_in_words(point: dict[str, Any], reference: str) -> str:
    """Each system's label accuracy (the reference's own aside) beside always answering the majority class, and
    whether any beats it by its whole CI."""
    majority = point.get("majority_class")
    found = {s["name"]: s["figures"].get("label_accuracy.accuracy") for s in point["systems"] if s["name"] != reference}
    scored = {name: f for name, f in found.items() if f}
    if majority is None or not scored:
        return ""
    above = [name for name, f in scored.items() if f["ci_low"] > majority]
    listed = ", ".join(f"{name} {fmt(f['value'], 3)}" for name, f in scored.items())
    beats = f"{', '.join(above)} above it by the whole CI" if above else "none above it"
    return f". Strategy accuracy at {point['point']}: {listed}; the majority class {fmt(majority, 3)}: {beats}"


def _summary_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    largest = _largest(points)
    return [p for p in points if p is largest or not p["point"].isdigit()]


def _largest(points: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The point with the most train dialogues (a named point, such as the full-chain one, is not sized)."""
    return max((p for p in points if p["point"].isdigit()), key=lambda p: int(p["point"]), default=None)


def _point_title(point: str) -> str:
    return "The 200 full-chain train dialogues" if not point.isdigit() else f"{point} train dialogues"


def systems_table(systems: list[dict[str, Any]]) -> list[str]:
    header = ["system", *(f.header for f in FIGURES), "s / dialogue", "tokens / dialogue", "API $ / 1k dialogues"]
    rows = []
    for s in systems:
        teacher = s.get("teacher") or {}
        tokens = s["tokens_per_dialogue"] or (
            (teacher.get("prompt_tokens_per_dialogue") or 0) + (teacher.get("completion_tokens_per_dialogue") or 0)
        )
        usd = f"{fmt(teacher['usd_per_1k'], 2)} ({teacher['model']}, est.)" if teacher else "0 (local)"
        figures = [cell({"value": s["figures"].get(f.path)}, Figure(f.header, "value", f.decimals)) for f in FIGURES]
        seconds = "–" if teacher else fmt(s["seconds_per_dialogue"], 2)  # an imported run spent none of ours
        rows.append([s["name"], *figures, seconds, fmt(tokens or None, 0), usd])
    return markdown_table(header, rows)


def _p(p: Optional[float]) -> str:
    """A p to 3 decimals; one under 0.001 (a primary row's own p can be) reads `< 0.001`, not 0.000."""
    return "< 0.001" if p is not None and p < 0.001 else fmt(p, 3)


def family_line(point: dict[str, Any]) -> str:
    """Which rows Holm's family held, from the report's `paired_family`; a record without it was written before
    rows identical on every dialogue were left out (eval/compare/paired.py), and its Holm p values count them."""
    family = point.get("paired_family")
    if family is None:
        return ("Holm's family: every paired row of the run's report but a declared primary comparison, rows whose two "
                "systems score identically on every dialogue included (this record predates their leaving out, so "
                "each Holm p is at least what the current rule gives).")  # fmt: skip
    left_out = family.get("identical_rows") or 0
    rows_of = f"{left_out} row{'s' * (left_out != 1)} whose two systems score identically on every dialogue"
    aside = f"; {rows_of} left out" if left_out else ""
    rows = fmt(family.get("rows"), 0)
    return f"Holm's family: every paired row of the run's report ({rows}) but a declared primary comparison{aside}."


def paired_table(paired: list[dict[str, Any]]) -> list[str]:
    # Holm's p at the resampling floor prints 0.050 and still holds: say whether it holds, not only the p
    holds = {True: "yes", False: "no", None: "–"}
    # the declared primary row's p is its own (tested alone), not Holm's
    rows = [[f"{p['pair'][0]} − {p['pair'][1]}", PAIRED_METRICS[p["metric"]],
             interval(p["diff"], p["ci_low"], p["ci_high"]), str(p["n"]),
             "– (identical: left out)" if p.get("identical") else _p(p["p_holm"]),
             holds[p.get("survives_holm")] + " (primary, alone)" * bool(p.get("primary"))]
            for p in paired]  # fmt: skip
    header = ["first − second", "metric", "difference [95% CI]", "dialogues", "p (Holm)", "holds at 5% (Holm)"]
    return markdown_table(header, rows)


def read_stages(folder: Optional[Path]) -> list[dict[str, Any]]:
    """The stage records, in the order they ran: the stage runner's `<out>/stages.json` (`eval.runner`: an `eval
    curve` or `eval students` run's) or a folder of one record per stage (<out>/stages/*.json); a path that is
    neither is an error, never a record without its costs."""
    if folder is None:
        return []
    if Path(folder).is_file() and Path(folder).name == STAGES_FILE:
        runner = read_json_object(Path(folder), "the stage runner's records")
        records = [{"stage": name, **(r if isinstance(r, dict) else {})} for name, r in runner.items()]
        for record in records:
            require_fields(record, Path(folder), f"a stage record ({record['stage']})", STAGE_FIELDS)
        return sorted(records, key=lambda r: r["finished"])
    if not Path(folder).is_dir():
        raise RecordFileError(f"--stages {folder}: {'a file' if Path(folder).exists() else 'no such folder'}, not the "
                              f"runner's {STAGES_FILE} or a stage records folder (<out>/stages)")  # fmt: skip
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        records.append(read_json_object(path, "a stage record"))
        require_fields(records[-1], path, "a stage record", STAGE_FIELDS)
    return sorted(records, key=lambda r: r["finished"])
