"""The results README.md and docs/ quote, kept as small JSON records and rendered into the docs by code.

A record (`docs/records/<name>.json`) is the summary of one run: what ran (commit, date, machine, command), its
test set, and per system the figures with their 95% CIs and what the system learned from whom.
`python -m eval records write` makes one from an `eval curve` run's curve.json, or from `eval compare` reports
(`eval.records.compare`, one report per curve point). `render_record` gives the markdown the docs' record blocks
hold (`eval.records.blocks` places it), its cells formatted by report.md's own functions.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Optional

from distill.pipeline.stage_key import PATH_FIELDS
from distill.roles.duties import reply_role
from distill.roles.roles import ROLES
from eval.compare import shares_table
from eval.compare.markdown import DASH, cell, fmt, interval, markdown_table, wrap_paragraph
from eval.curve.curve_report import METRICS as PAIRED_METRICS  # the paired figures curve.md labels
from eval.curve.target import GUARDS, stat_value, target_rows, verdict
from eval.metrics.diversity import RATIO_KEYS
from eval.metrics.registry import METRICS, Figure
from eval.records.compare import read_json_object, render_compare_record, require_fields

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "records"
RECORD_FIELDS = ("name", "commit", "date", "machine", "command", "test", "systems")
PAIRED_FIELDS = ("pair", "metric", "diff", "ci_low", "ci_high", "dialogues", "reading")
CURVE = "an `eval curve` run's curve.json"
# what the record reads from a curve.json (`eval.curve.curve_report` writes it), and what rendering reads from a record
CURVE_FIELDS = {"test.dialogues": "text", "test.split": "text", "test.n": "number", "against_paper.n": "number",
                "against_paper.systems[].name": "text"}  # fmt: skip
RECORD_FILE_FIELDS = {**dict.fromkeys(RECORD_FIELDS, "any"), "test.n": "number", "test.train_conversations": "number",
                      "systems[].name": "text", "systems[].figures": "object", "systems[].learns": "object",
                      "systems[].decoding": "object"}  # fmt: skip


class RecordError(ValueError):
    """A record that cannot be written or rendered; the message names the file and what is missing."""


# --- writing a record from a curve run ------------------------------------------------------------


def record_from_curve(curve: dict[str, Any], name: str, command: str, commit: str, machine: str) -> dict[str, Any]:
    """The record of a curve run's largest point: each system's figures beside the paper's rows, the target."""
    against = curve.get("against_paper") or {}
    if not against.get("systems"):
        raise RecordError(f"record '{name}': the curve has no systems at its largest point")
    variants = {f"student-{v['name']}": v for v in (curve.get("config") or {}).get("variants") or []}
    systems = [
        _system(s, curve.get("sources", {}).get(s["name"], {}), variants.get(s["name"])) for s in against["systems"]
    ]
    for system in systems:
        system["repeats"] = _repeat_of(variants.get(system["name"]), variants)
    return {
        "name": name,
        "commit": commit,
        "date": dt.date.today().isoformat(),
        "machine": machine,
        "command": command,
        "test": {**curve["test"], "train_conversations": against["n"]},
        "systems": systems,
        "paper": against.get("paper"),
        "target": curve.get("target", []),
        # the rule the target was judged by when this run was made: each guard's allowance
        **{f"target_{g.key}_drop": g.allowance for g in GUARDS},
        # the curve's questions at that point (each lever against the student it is made like, ...), paired
        "paired": [{k: p[k] for k in PAIRED_FIELDS} for p in curve.get("paired", []) if p["n"] == against["n"]],
    }


def read_curve(path: Path) -> dict[str, Any]:
    """A curve.json with what `record_from_curve` reads, or one line naming the file and what it lacks."""
    curve = read_json_object(path, CURVE)
    paired = {f"paired[].{k}": "any" for k in (*PAIRED_FIELDS, "n")} if "paired" in curve else {}
    require_fields(curve, path, CURVE, CURVE_FIELDS | paired)
    if not curve["against_paper"]["systems"]:
        raise RecordError(f"{path}: the curve has no systems at its largest point")
    return curve


def _system(report_row: dict[str, Any], sources: dict[str, dict[str, str]], variant: Optional[dict]) -> dict[str, Any]:
    figures = {f.path: f.read(report_row) for f in _figures()}
    # what a decoding lever costs: the reply's generated tokens per dialogue and the dialogue's seconds (its
    # steps' summed latency), each counting all k samples of a consensus
    cost = report_row.get("cost") or {}
    reply = (cost.get("tokens_per_role") or {}).get(reply_role()) or {}
    return {
        "name": report_row["name"],
        "learns": {role: source["target"] for role, source in sources.items()},
        "adapters_of": next((s["adapter"] for s in sources.values() if s.get("adapter")), None),
        "decoding": (variant or {}).get("decoding") or {},
        "seed": (variant or {}).get("seed"),
        "figures": figures,
        "reply_tokens_per_dialogue": reply.get("completion_per_dialogue"),
        "seconds_per_dialogue": (cost.get("latency_s") or {}).get("value"),
        # Dist/EAD shares on nested sub-corpora (compare's `shares_by_size`), where the run asked for them
        "shares_by_size": [
            {"n": row["n"], **{k: _interval(row.get(k)) for k in RATIO_KEYS}}
            for row in report_row.get("human_ratio_by_size") or []
        ]
        or None,
    }


def _repeat_of(variant: Optional[dict[str, Any]], variants: dict[str, dict[str, Any]]) -> Optional[str]:
    """The system a seed variant repeats: the variant with the same settings but for its name and seed."""
    if not variant or variant.get("seed") is None:
        return None

    def settings(v: dict[str, Any]) -> dict[str, Any]:
        return {k: x for k, x in v.items() if k not in ("name", "seed")}

    same = [n for n, v in variants.items() if v.get("seed") is None and settings(v) == settings(variant)]
    return same[0] if same else None


def _interval(stat: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return {k: stat[k] for k in ("value", "ci_low", "ci_high")} if stat else None


# the guards' metrics that joined the target after records were first written
LATER_GUARDS = ("relevance", "dialogue_ppl")


def _figures() -> list[Figure]:
    """The record's columns: the registry's paper figures (Dist/EAD shares of the human replies, I-ACC), then
    BERTScore against the human reply, the reply's relevance to the seeker's last turn and its PPL given the
    dialogue (the target's guards)."""
    return [
        *(f for spec in METRICS.values() for f in spec.paper),
        *METRICS["bertscore_f1"].shown,
        *(f for name in LATER_GUARDS for f in METRICS[name].shown),
    ]


def _shown_figures(systems: list[dict[str, Any]]) -> list[Figure]:
    """The columns a record's table shows: relevance and PPL given the dialogue only where a system has them
    (records made before them have not)."""
    later = {f.path for name in LATER_GUARDS for f in METRICS[name].shown}
    return [f for f in _figures() if f.path not in later or any(s["figures"].get(f.path) for s in systems)]


def machine_line() -> str:
    """The CPU as the figures depend on it: model, cores, and whether it has native bf16."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    return machine_text(os.cpu_count(), model or platform.processor() or platform.machine(), flags)


def machine_text(cores: object, model: str, flags: set[str]) -> str:
    """`2-core AMD EPYC, AVX512_BF16`: a CPU's cores, model and whether it has native bf16."""
    bf16 = "AVX512_BF16" if "avx512_bf16" in flags else "AMX" if "amx_bf16" in flags else "no native bf16"
    return f"{cores}-core {model}, {bf16}"


def git_commit(where: Path = ROOT) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


# --- rendering -------------------------------------------------------------------------------------


def render_record(record: dict[str, Any], only: Optional[list[str]] = None) -> list[str]:
    """The record as the docs show it: a table of its systems (`only` these, in this order, when given) beside the
    paper's rows, the target's verdict over every system, and the run it came from. A record of compare reports
    (`kind: compare`) renders as `eval.records.compare` does."""
    if record.get("kind") == "compare":
        return render_compare_record(record)
    missing = [f for f in RECORD_FIELDS if f not in record]
    if missing:
        raise RecordError(f"record '{record.get('name', '?')}': missing {', '.join(missing)}")
    target = _target(record)  # over every system, before `only` picks those the table shows
    if only:
        by_name = {s["name"]: s for s in record["systems"]}
        unknown = [name for name in only if name not in by_name]
        if unknown:
            known = ", ".join(by_name)
            raise RecordError(f"record '{record['name']}' has no system {', '.join(unknown)} (it has {known})")
        record = {**record, "systems": [by_name[name] for name in only]}
    figures = _shown_figures(record["systems"])
    header = ["system", "reply decoding", *(f.header for f in figures), "reply tokens / dialogue", "s / dialogue"]
    rows = [
        [s["name"], _decoding(s["decoding"]), *(_cell(s["figures"], f) for f in figures), *_cost_cells(s)]
        for s in record["systems"]
    ]
    for paper_row in (record.get("paper") or {}).get("rows", []):
        rows.append(
            [f"{paper_row['system']} *", "–", *(fmt(f.read_paper(paper_row), f.decimals) for f in figures), "–", "–"]
        )
    test = record["test"]
    intro = (
        f"{_learns(record['systems'])} Trained on {test['train_conversations']} train conversations, scored on "
        f"{test['n']} test conversations (95% CIs; Dist/EAD as shares of the human replies, paired with them, "
        "half-sampled):"
    )
    run = (
        f"Run at commit `{record['commit']}` on {record['date']}, {record['machine']}: `{record['command']}`"
        f" (record `docs/records/{record['name']}.json`)."
    )
    paper = f"\\* {record['paper']['source']} " if record.get("paper") else ""
    lines = [*wrap_paragraph(intro), "", *markdown_table(header, rows), ""]
    verdicts = [verdict(target, _allowances(record))] if target else []
    lines += [line for p in verdicts for line in [*wrap_paragraph(p), ""]]
    if not only and record.get("paired"):
        lines += [*_paired_table(record["paired"]), ""]
    if not only:
        lines += _shares_by_size(record) + _seed_spread(record)
    return [*lines, *wrap_paragraph(paper + run)]


def _shares_by_size(record: dict[str, Any]) -> list[str]:
    """Each system's Dist/EAD shares against corpus size as report.md shows them, plus the paper's rows at its own
    test-set size: a share's trend says whether the verdict at the largest n would hold at the paper's n."""
    by_size = {s["name"]: s["shares_by_size"] for s in record["systems"] if s.get("shares_by_size")}
    if not by_size:
        return []
    paper = record.get("paper") or {}
    paper_row = shares_table.verdict_row(paper)
    rows, figures = shares_table.shares_by_size_rows(by_size, paper_row), shares_table.share_figures()
    for row in paper.get("rows", []):
        n = f"{paper['test_conversations']:,}" if paper.get("test_conversations") else DASH
        rows.append([f"{row['system']} *", n, *(fmt(f.read_paper(row), f.decimals) for f in figures), DASH])
    header = shares_table.shares_by_size_header(paper_row)
    return [*wrap_paragraph(shares_table.shares_by_size_intro(paper)), "", *markdown_table(header, rows), ""]


def _seed_spread(record: dict[str, Any]) -> list[str]:
    """Each setting that seed variants repeat: every figure under each seed, and its spread (largest − smallest)."""
    by_name = {s["name"]: s for s in record["systems"]}
    groups: dict[str, list[dict[str, Any]]] = {}
    for system in record["systems"]:
        if system.get("repeats") in by_name:
            groups.setdefault(system["repeats"], [by_name[system["repeats"]]]).append(system)
    lines = []
    for name, runs in groups.items():
        seeds = ", ".join(f"{s['name']} (seed {s['seed'] if s.get('seed') is not None else 'default'})" for s in runs)
        header = ["figure", *(s["name"] for s in runs), "spread"]
        rows = [[f.header, *(_cell(s["figures"], f) for s in runs), _spread(runs, f)] for f in _shown_figures(runs)]
        intro = f"{name} under {len(runs)} seeds (LoRA init, data order and sampling): {seeds}."
        lines += [*wrap_paragraph(intro), "", *markdown_table(header, rows), ""]
    return lines


def _spread(runs: list[dict[str, Any]], figure: Figure) -> str:
    values = [stat_value(s["figures"].get(figure.path)) for s in runs]
    values = [v for v in values if v is not None]
    return fmt(max(values) - min(values), 3) if len(values) > 1 else DASH


def _paired_table(paired: list[dict[str, Any]]) -> list[str]:
    """Each of the run's questions (first − second, on the same dialogues) per metric, with its paired 95% CI."""
    order = {metric: i for i, metric in enumerate(PAIRED_METRICS)}
    rows = [
        [f"{p['pair'][0]} − {p['pair'][1]}", PAIRED_METRICS.get(p["metric"], p["metric"]),
         interval(p["diff"], p["ci_low"], p["ci_high"]), p["reading"]]
        for p in sorted(paired, key=lambda p: (p["pair"], order.get(p["metric"], 99)))
    ]  # fmt: skip
    return markdown_table(["first − second", "metric", "difference [95% CI]", "reading"], rows)


def _cell(figures: dict[str, Any], figure: Figure) -> str:
    return cell({"value": figures.get(figure.path)}, Figure(figure.header, "value", figure.decimals))


def _cost_cells(system: dict[str, Any]) -> list[str]:
    """Reply tokens and seconds per dialogue ("–" in a record written before it kept them)."""
    return [fmt(system.get("reply_tokens_per_dialogue"), 1), fmt(system.get("seconds_per_dialogue"), 2)]


def _decoding(decoding: dict[str, Any]) -> str:
    reply = reply_role()
    if not decoding:
        return f"TRACE's (T {ROLES[reply].temperature})"
    parts = []
    for key, label in (
        ("temperatures", "T"),
        ("top_p", "top-p"),
        ("min_p", "min-p"),
        ("typical_p", "typical-p"),
        ("consensus", "consensus of"),
    ):
        if reply in (decoding.get(key) or {}):
            parts.append(f"{label} {decoding[key][reply]}")
    if decoding.get("consensus_by") and reply in (decoding.get("consensus") or {}):
        parts[-1] += f" by {decoding['consensus_by']}"
    return ", ".join(parts)


def _learns(systems: list[dict[str, Any]]) -> str:
    """One sentence per distinct recipe: which role learns what (its adapters may be another system's)."""
    recipes: dict[str, list[str]] = {}
    for s in systems:
        by_target: dict[str, list[str]] = {}
        for role, target in s["learns"].items():
            by_target.setdefault(target, []).append(role)
        recipe = "; ".join(f"{', '.join(roles)}: {target}" for target, roles in by_target.items())
        owner = (s.get("adapters_of") or s["name"]).removesuffix("'s")
        recipes.setdefault(recipe, []).append(owner)
    return " ".join(
        f"What {', '.join(dict.fromkeys(owners))}'s adapters learned, from whom: {recipe}."
        for recipe, owners in recipes.items()
    )


def _allowances(record: dict[str, Any]) -> dict[str, float]:
    """Each guard's allowance as the record states it: a required guard's, and that of a guard whose figure the
    record's systems carry (a record made before a guard joined the target has neither)."""
    out = {}
    for guard in GUARDS:
        given = record.get(f"target_{guard.key}_drop")
        carried = any(s["figures"].get(guard.figure) is not None for s in record["systems"])
        if given is None and (guard.required or carried):
            raise RecordError(
                f"record '{record['name']}': a target without the rule it was judged by (target_{guard.key}_drop)"
            )
        if given is not None:
            out[guard.key] = given
    return out


# a stored target row's fields the record's figures must give again, each with whether a row must have it (a guard
# that joined the target later is absent from the rows of a record made before, which were not judged on it)
CHECKED = {"beats": True, "met": True} | {
    f"{g.key}_{part}": g.required for g in GUARDS for part in ("drop", "drop_ci", "held")
}


def _target(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The target's rows recomputed from the record's figures, its paired falls and its rule
    (`eval.curve.target.target_rows`), each system against the reference its stored row names; a stored verdict
    that these do not give is an error, so a `met` or a `beats` typed into the record cannot reach the docs. A row
    judged before the falls were judged on their intervals (no `bertscore_drop_ci`) is refused."""
    stored = record.get("target") or []
    if not stored:
        return []
    name = record["name"]
    rows = _judged(record, _allowances(record))
    by_key = {(t["system"], t["paper"]): t for t in rows}
    for t in stored:
        mine = by_key.get((t["system"], t["paper"]))
        if mine is None:
            raise RecordError(f"record '{name}': target row {t['system']} against {t['paper']}: no such figures")
        for key, required in CHECKED.items():
            if required and key not in t:
                raise RecordError(
                    f"record '{name}': target row {t['system']} has no {key}: judged by an older rule (write the "
                    "record again, or re-judge it with eval.records.rejudged)"
                )
            if not _same(t.get(key), mine[key]):
                given = f"its figures give {mine[key]!r}"
                raise RecordError(f"record '{name}': target row {t['system']}: stored {key} {t.get(key)!r}, {given}")
    return rows


def rejudged(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its target judged again by the current rule, from its own figures and paired falls (each
    system against the reference its stored row names); what a record written under an older rule needs."""
    return {**record, "target": _judged(record), **{f"target_{g.key}_drop": g.allowance for g in GUARDS}}


def _judged(record: dict[str, Any], allowances: Optional[dict[str, float]] = None) -> list[dict[str, Any]]:
    """The target rows the record's figures and paired falls give, each system against the reference its stored
    row names."""
    systems = [{"name": s["name"], **_nested(s["figures"])} for s in record["systems"]]
    lenders = {t["system"]: t["bertscore_reference"] for t in record.get("target") or []}
    against = {"systems": systems, "paper": record.get("paper")}
    return target_rows(against, lenders, record.get("paired") or [], allowances)


def _nested(figures: dict[str, Any]) -> dict[str, Any]:
    """A record's figures (keyed by dotted path) as the report row `Figure.read` reads."""
    row: dict[str, Any] = {}
    for path, value in figures.items():
        *parents, leaf = path.split(".")
        node = row
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return row


def _same(stored: Any, computed: Any) -> bool:
    if isinstance(stored, list) and isinstance(computed, list):
        return len(stored) == len(computed) and all(_same(a, b) for a, b in zip(stored, computed))
    if isinstance(stored, (int, float)) and isinstance(computed, (int, float)) and not isinstance(stored, bool):
        return abs(stored - computed) < 1e-9
    return stored == computed


def repo_relative(value: Any, path_field: bool = False) -> Any:
    """`value` (a record as JSON) with every path in a path field (`distill.pipeline.stage_key.PATH_FIELDS`: test
    dialogues, adapters, data...) relative to the repository (`../shared/data/...` outside it), whatever folder the
    run was made from: a record names where a reader's checkout has the run, not where the writer's machine had it.
    A relative string that names nothing here (a model's alias) is kept."""
    if isinstance(value, str) and path_field and (os.path.isabs(value) or os.path.exists(value)):
        return os.path.relpath(os.path.abspath(value), ROOT)
    if isinstance(value, list):
        return [repo_relative(v) for v in value]
    if isinstance(value, dict):
        return {k: repo_relative(v, k in PATH_FIELDS) for k, v in value.items()}
    return value
