"""A record made from `eval compare` reports, one per curve point (ESCoT's curve, benchmarks/escot_curve.py).

The record (`docs/records/<name>.json`, `kind: compare`) keeps, per point, each system's figures with their 95%
CIs and what it learned from whom (the config's `about`), the paired differences the docs state (first − second
on the same test dialogues, as each pair was asked: `PAIRS`), and what each stage of the run cost (seconds and
peak RSS, from the runner's stage records). `eval.records_blocks` renders it into the docs' record blocks like any
record.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Optional

from eval.compare.markdown import cell, fmt, interval, markdown_table, wrap_paragraph
from eval.metrics.registry import Figure

# (header, where in a report's system row); each a statistic with its CI, or a number
FIGURES = (
    Figure("strategy acc.", "label_accuracy.accuracy", 3),
    Figure("EM similarity", "answer_similarity", 3),
    Figure("BERTScore F", "bertscore.f1", 3),
    Figure("ROUGE-L", "rouge_l", 3),
    Figure("BLEU-2", "bleu2", 3),
    Figure("relevance", "relevance", 3),
    Figure("Dist-2 / ref.", "human_ratio.dist2", 2),
    Figure("EAD-2 / ref.", "human_ratio.ead2", 2),
    Figure("loop", "reply_checks.rates.loop", 3),
    Figure("non-reply", "reply_checks.rates.non_reply", 3),
)
# the pairs the docs answer, as "first − second"; a report holds each pair once, in either order
PAIRS = (("traces", "direct"), ("joint", "direct"), ("traces", "joint"), ("full-chain", "traces"))
PAIRED_METRICS = {"bertscore_f1": "BERTScore F", "label_accuracy": "strategy accuracy", "relevance": "relevance"}
SUMMARY_METRICS = ("bertscore_f1", "label_accuracy")  # what the README's line states (the answer)


class CompareRecordError(ValueError):
    """A report the record cannot be made from; the message names the file."""


def record_from_compares(
    reports: dict[str, dict[str, Any]], stages: list[dict[str, Any]], name: str, command: str, commit: str, machine: str
) -> dict[str, Any]:
    """The record of a run's compare reports (point -> report.json), with its stages' costs."""
    if not reports:
        raise CompareRecordError(f"record '{name}': no compare report given")
    first = next(iter(reports.values()))
    return {
        "name": name,
        "kind": "compare",
        "commit": commit,
        "date": dt.date.today().isoformat(),
        "machine": machine,
        "command": command,
        "test": {k: first["test"][k] for k in ("dialogues", "split", "n")},
        "reference": first["settings"]["reference_system"],
        "points": [_point(point, report) for point, report in reports.items()],
        "stages": [{k: s[k] for k in ("stage", "seconds", "peak_rss_mb")} for s in stages],
    }


def _point(point: str, report: dict[str, Any]) -> dict[str, Any]:
    about = {s["name"]: s.get("about", "") for s in report["config"]["systems"]}
    return {
        "point": point,
        "systems": [_system(row, about.get(row["name"], "")) for row in report["systems"]],
        "majority_class": next(
            (_at(row, "label_accuracy.majority.rate") for row in report["systems"] if row.get("label_accuracy")), None
        ),
        "paired": [p for first, second in PAIRS for p in _paired(report["paired"], first, second)],
    }


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


def _paired(rows: list[dict[str, Any]], first: str, second: str) -> list[dict[str, Any]]:
    """The report's paired rows of this pair on the record's metrics, as first − second."""
    found = []
    for row in rows:
        if row["metric"] not in PAIRED_METRICS or set(row["pair"]) != {first, second}:
            continue
        sign = 1 if row["pair"][0] == first else -1
        low, high = (row["ci_low"], row["ci_high"]) if sign == 1 else (-row["ci_high"], -row["ci_low"])
        found.append({"pair": [first, second], "metric": row["metric"], "diff": sign * row["diff"], "ci_low": low,
                      "ci_high": high, "n": row["n"], "p_holm": row.get("p_holm"),
                      "survives_holm": row.get("survives_holm")})  # fmt: skip
    return found


def _at(row: Any, path: str) -> Any:
    return Figure("", path).read(row)


# --- rendering -------------------------------------------------------------------------------------


def render_compare_record(record: dict[str, Any]) -> list[str]:
    """Per point: the systems' figures and cost, then the four paired differences; last the stages' costs."""
    lines = []
    for point in record["points"]:
        lines += [f"**{_point_title(point['point'])}** (majority class {fmt(point['majority_class'], 3)}):", ""]
        lines += _systems_table(point["systems"]) + [""]
        if point["paired"]:
            lines += _paired_table(point["paired"]) + [""]
    lines += _stages_lines(record["stages"])
    test = record["test"]
    run = (
        f"Scored on {test['n']} test dialogues ({test['split']}); 95% CIs; Dist/EAD as shares of the reference "
        f"replies. Run at commit `{record['commit']}` on {record['date']}, {record['machine']}: `{record['command']}`"
        f" (record `docs/records/{record['name']}.json`)."
    )
    return [*lines, *wrap_paragraph(run)]


def render_compare_summary(record: dict[str, Any]) -> list[str]:
    """The paired differences in one paragraph (the README's line): at the largest N measured, and on the
    full-chain dialogues; the docs page renders every point."""
    parts = []
    for point in _summary_points(record["points"]):
        said = [f"{p['pair'][0]} − {p['pair'][1]} {PAIRED_METRICS[p['metric']]} "
                f"{interval(p['diff'], p['ci_low'], p['ci_high'])}"
                for p in point["paired"] if p["metric"] in SUMMARY_METRICS]  # fmt: skip
        if said:
            parts.append(f"{_point_title(point['point'])}: {'; '.join(said)}")
    return wrap_paragraph(". ".join(parts) + f" (95% CIs; record `docs/records/{record['name']}.json`).")


def _summary_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sized = [p for p in points if p["point"].isdigit()]
    largest = max(sized, key=lambda p: int(p["point"]), default=None)
    return [p for p in points if p is largest or not p["point"].isdigit()]


def _point_title(point: str) -> str:
    return "The 200 full-chain train dialogues" if not point.isdigit() else f"{point} train dialogues"


def _systems_table(systems: list[dict[str, Any]]) -> list[str]:
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


def _paired_table(paired: list[dict[str, Any]]) -> list[str]:
    # Holm's p at the resampling floor prints 0.050 and still holds: say whether it holds, not only the p
    holds = {True: "yes", False: "no", None: "–"}
    rows = [[f"{p['pair'][0]} − {p['pair'][1]}", PAIRED_METRICS[p["metric"]],
             interval(p["diff"], p["ci_low"], p["ci_high"]), str(p["n"]), fmt(p["p_holm"], 3),
             holds[p.get("survives_holm")]] for p in paired]  # fmt: skip
    header = ["first − second", "metric", "difference [95% CI]", "dialogues", "p (Holm)", "holds at 5% (Holm)"]
    return markdown_table(header, rows)


def _stages_lines(stages: list[dict[str, Any]]) -> list[str]:
    if not stages:
        return []
    rows = [[s["stage"], fmt(s["seconds"], 0), fmt(s["peak_rss_mb"], 0)] for s in stages]
    total = sum(s["seconds"] for s in stages)
    return [*markdown_table(["stage", "seconds", "peak RSS (MiB)"], rows), "", f"All stages: {total:,.0f} s.", ""]


def read_stages(folder: Optional[Path]) -> list[dict[str, Any]]:
    """The runner's stage records (<out>/stages/*.json), in the order they ran."""
    if folder is None:
        return []
    records = [json.loads(p.read_text(encoding="utf-8")) for p in Path(folder).glob("*.json")]
    return sorted(records, key=lambda r: r["finished"])
