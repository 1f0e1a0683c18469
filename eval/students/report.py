"""`students.json` and `students.md`, beside the compare's report: how each student trained, and what it cost.

Per student and seed: each role's convergence as its adapter's metadata records it (the epoch it stopped at, its
steps, the epoch it kept and that epoch's validation loss), its rows and training seconds; the seconds and peak
RSS of every stage; each student's headline figures from the compare (`eval.compare.markdown.FIGURES`, seconds and
tokens per dialogue) and, with several seeds, their spread (max − min) across the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from eval.compare.markdown import FIGURES, fmt, markdown_table, stages_lines
from eval.students.config import StudentsConfig, system_name

STUDENTS_JSON, STUDENTS_MD = "students.json", "students.md"


def role_convergence(adapter: Path) -> dict[str, Any]:
    """What the adapter's metadata says about its training: where it stopped and what it kept."""
    from distill.adapters.adapters import read_metadata

    meta = read_metadata(adapter)
    converged = meta.get("convergence") or {}
    keep = ("stopped_at_epoch", "stopped_at_step", "stopped_early", "best_epoch", "best_eval_loss", "max_epochs",
            "eval_loss_by_epoch")  # fmt: skip
    return {
        **{k: converged.get(k) for k in keep},
        "steps": meta.get("global_step"),
        "train_rows": (meta.get("tokens") or {}).get("examples"),
        "tokens_seen": meta.get("tokens_seen"),
        "train_seconds": meta.get("train_seconds"),
    }


def headline(row: dict[str, Any]) -> dict[str, Optional[float]]:
    """A system's headline figures in a report row: each statistic's value, seconds and tokens per dialogue."""
    figures = {}
    for figure in FIGURES:
        value = figure.read(row)
        figures[figure.path] = value.get("value") if isinstance(value, dict) else value
    cost = row.get("cost") or {}
    figures["seconds_per_dialogue"] = (cost.get("latency_s") or {}).get("value")
    tokens = (cost.get("prompt_tokens_per_dialogue") or 0) + (cost.get("completion_tokens_per_dialogue") or 0)
    figures["tokens_per_dialogue"] = tokens or None
    return figures


def spread(values: list[Optional[float]]) -> Optional[float]:
    """max − min of the seeds' values; None unless every seed has one."""
    if len(values) < 2 or any(v is None for v in values):
        return None
    return round(max(values) - min(values), 4)


def fold_convergence(student, folds: Optional[list[Path]]) -> dict[str, Any]:
    """A student-forced student's fold adapters (`eval.students.forced`), each upstream role's convergence per fold;
    nothing for another student."""
    if not folds:
        return {}
    upstream = [role for role in student.roles if role != student.reply_role]
    return {"folds": [{role: role_convergence(fold / role) for role in upstream} for fold in folds]}


def students_record(config: StudentsConfig, report: dict[str, Any], ran: dict[str, Any]) -> dict[str, Any]:
    rows = {row["name"]: row for row in report["systems"]}
    stages = ran["stages"]
    students = []
    for student in config.chosen():
        seeds = []
        for seed, adapters in ran["adapters"][student.name].items():
            name = system_name(student.name, seed, config)
            train = stages.get(f"{student.name} seed {seed}: train", {})
            seeds.append({
                "seed": seed,
                "system": name,
                "roles": {role: role_convergence(adapters / role) for role in student.roles},
                "train_stage": {k: train.get(k) for k in ("seconds", "peak_rss_mb", "reused")},
                "figures": headline(rows[name]) if name in rows else None,
                **fold_convergence(student, ran.get("folds", {}).get(student.name, {}).get(seed)),
            })  # fmt: skip
        by_figure = [s["figures"] or {} for s in seeds]
        spreads = {key: spread([f.get(key) for f in by_figure]) for key in (by_figure[0] if by_figure else {})}
        students.append({"name": student.name, "learns": student.learns, "varies": config.varies(student),
                         "roles": student.roles, "seeds": seeds,
                         "spread": spreads if len(seeds) > 1 else None})  # fmt: skip
    return {"n": ran["n"], "seeds": config.seeds, "students": students, "stages": stages}


def write_students(out: Path, config: StudentsConfig, report_path: Path, ran: dict[str, Any]) -> Path:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    record = students_record(config, report, ran)
    (out / STUDENTS_JSON).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    (out / STUDENTS_MD).write_text(students_markdown(record, report_path), encoding="utf-8")
    return out / STUDENTS_JSON


def students_markdown(record: dict[str, Any], report_path: Path) -> str:

    seeds = ", ".join(map(str, record["seeds"]))
    lines = [f"# Students at convergence: N = {record['n']}, seeds {seeds}", ""]
    lines.append(f"Each system's figures, with paired 95% CIs: [report.md]({report_path.parent.name}/report.md).")
    lines += ["", "## Where each role stopped", "", *stopped_table(record["students"])]
    spreads = [s for s in record["students"] if s["spread"]]
    if spreads:
        keys = list(spreads[0]["spread"])
        rows = [[s["name"], *(fmt(s["spread"][k], 4) for k in keys)] for s in spreads]
        lines += ["", "## Spread across seeds (max − min)", "", *markdown_table(["student", *keys], rows)]
    stages = [{"stage": name, **r} for name, r in record["stages"].items()]
    lines += ["", "## Stages", "", *stages_lines(stages)]
    return "\n".join(lines).rstrip("\n") + "\n"


def stopped_table(students: list[dict[str, Any]]) -> list[str]:
    """Per student, seed and role where training stopped: students.json's shape, which a record keeps."""
    header = ["student", "seed", "role", "stopped at epoch", "of at most", "stop", "steps", "best epoch",
              "best val. loss", "train s"]  # fmt: skip
    rows = [
        [s["system"], str(s["seed"]), role, epoch_text(c.get("stopped_at_epoch")), epoch_text(c.get("max_epochs")),
         stop_kind(c), fmt(c.get("steps")), epoch_text(c.get("best_epoch")), fmt(c.get("best_eval_loss"), 4),
         fmt(c.get("train_seconds"), 1)]
        for s in own_runs(students) for role, c in s["roles"].items()
    ]  # fmt: skip
    return markdown_table(header, rows)


def stop_kind(role: dict[str, Any]) -> str:
    """How a role's training ended: `early` (its patience ran out), `flat at the cap` (its best epoch came before
    its last, so the validation loss had stopped falling) or `not converged at the cap` (its last epoch was its
    best: the loss was still falling when the cap stopped it)."""
    if role.get("stopped_early"):
        return "early"
    best, last = role.get("best_epoch"), role.get("stopped_at_epoch")
    if best is None or last is None:
        return fmt(None)
    return "flat at the cap" if best < last else "not converged at the cap"


def own_runs(students: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every student's seeds with the roles it trained itself: a variant's role whose training is the one it
    varies (an adapter copied from it) is left out, and a variant that trained none is left out."""
    runs = {(student["name"], s["seed"]): s for student in students for s in student["seeds"]}
    own = []
    for student in students:
        for s in student["seeds"]:
            lender = runs.get((student.get("varies"), s["seed"]), {}).get("roles", {})
            roles = {role: c for role, c in s["roles"].items() if lender.get(role) != c}
            own += [{**s, "roles": roles}] if roles else []
    return own


def epoch_text(value: Any) -> str:
    """An epoch as a whole number where it is one (the trainer counts them as floats)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return str(int(value))
    return fmt(value, 2)
