"""Render a comparison's ``report.json`` as ``report.md`` (TRACE Tables 1-2 layout) and PNG plots.

This module reads nothing but report.json and computes no number: every figure in the markdown is a
value stored in the JSON, rounded for reading (`eval.compare.markdown`). The JSON keeps four decimals, so a test
can check report.md against report.json, and anyone can re-render an old report.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval.compare.markdown import DASH, cell, fmt, interval, markdown_table, with_ci
from eval.compare.report_plots import confusions
from eval.compare.shares_table import shares_by_size_table
from eval.metrics.registry import METRICS


def system_figures(report: dict, name: str) -> dict[str, str]:
    """One system's headline figures (the registry's), as report.md prints them, for an adapter's model card."""
    s = next((s for s in report["systems"] if s["name"] == name), None)
    if s is None:
        return {}
    figures = {"test dialogues": fmt(s["n"])}
    for figure in (f for spec in METRICS.values() for f in spec.headline):
        value = figure.read(s)
        if value is not None:
            figures[figure.header + (" [95% CI]" if isinstance(value, dict) else "")] = cell(s, figure)
    figures["test split"] = f"`{report['test']['split']}` of `{report['test']['dialogues']}`"
    return figures


def quality_table(report: dict) -> list[str]:
    """TRACE Table 1/3 layout: one row per system, a column per figure of each registered metric that some row
    has (a strategy's accuracy on a dataset without strategies is no column of dashes), and the human replies
    for scale."""
    rows = [*report["systems"], *([report["human_gold"]] if report.get("human_gold") else [])]
    figures = [f for spec in METRICS.values() for f in spec.shown if any(f.read(s) is not None for s in rows)]
    body = [[_name(s), fmt(s["n"]), *(cell(s, f) for f in figures)] for s in rows]
    return markdown_table(["System", "n", *(f.header for f in figures)], body)


def _name(s: dict) -> str:
    return s["name"] + (f" (the same outputs as {s['same_outputs_as']})" if s.get("same_outputs_as") else "")


def paper_table(report: dict) -> list[str]:
    """The registry's figures that compare with a paper (Dist/EAD as shares of the human replies, each on
    its own test set, and I-ACC), every system beside the published rows of `paper_reference`; no paper
    asked and no ratios: no table."""
    systems = [s for s in report["systems"] if s.get("human_ratio")]
    paper = report.get("paper") or {}
    if not systems and not paper:
        return []
    figures = [f for spec in METRICS.values() for f in spec.paper]
    rows = [[s["name"], *(cell(s, f) for f in figures)] for s in systems]
    rows += [[f"{r['system']} *", *(fmt(f.read_paper(r), f.decimals) for f in figures)] for r in paper.get("rows", [])]
    header = ["System", *(f.header for f in figures)]
    shares = " and ".join(name for name, spec in METRICS.items() if spec.versus_human)
    title = "## Against the paper" + (f": {shares} as a share of the human replies" if shares else "")
    lines = [title, "", *markdown_table(header, rows), ""]
    shown_first = sorted(METRICS.values(), key=lambda spec: not spec.paper)  # then why the others are not
    notes = " ".join(spec.paper_note for spec in shown_first if spec.paper_note)
    lines += [notes] if notes else []
    if paper:
        lines.append(f"\\* {paper['source']} Its ratios use the human replies on {paper['test_set']}.")
    return [*lines, ""]


def checks_table(report: dict) -> list[str]:
    """Per system and role, the share of its outputs failing each quality check (distill.quality), the human
    replies last; a check that does not apply to a role shows a dash."""
    from distill.quality import CHECKS

    rows = []
    for s in [*report["systems"], report.get("human_gold") or {}]:
        for role, q in (s.get("quality") or {}).items():
            rates, passed = q["rates"], q.get("passed")  # a report made before the pass count has none
            passing = fmt(passed) if passed is not None else DASH  # a count: the report's own figure, not a share
            rows.append([s["name"], role, fmt(q["checked"]), passing, *(fmt(rates.get(c), 3) for c in CHECKS)])
    if not rows:
        return []
    header = ["System", "role", "outputs", "passing every check", *CHECKS]
    return [
        "## Trace quality (share of outputs failing each check; `distill inspect`, docs/quality.md)",
        "",
        *markdown_table(header, rows),
        "",
    ]


def paired_table(report: dict) -> list[str]:
    rows = [
        [
            f"{p['pair'][0]} − {p['pair'][1]}",
            p["metric"],
            interval(p["diff"], p["ci_low"], p["ci_high"]),
            fmt(p["n"]),
            p["reading"],
            fmt(p.get("p_value")),
            _holm_cell(p),
            "yes" if p.get("survives_holm") else "no",
        ]
        for p in report.get("paired") or []
    ]
    header = ["Pair (first − second)", "metric", "difference [95% CI]", "n", "reading", "bootstrap p", "Holm p"]
    return markdown_table([*header, "survives Holm"], rows)


def _holm_cell(row: dict) -> str:
    """A row's Holm p, or why it has none: the primary is tested alone; identical systems test nothing."""
    if row.get("primary"):
        return "– (primary: tested alone)"
    return "– (identical: left out)" if row.get("identical") else fmt(row.get("p_holm"))


def _family_sentence(fam: dict) -> str:
    """How many rows Holm's family holds, and the identical ones it leaves out."""
    left_out = fam.get("identical_rows")
    aside = (f"; {left_out} rows whose two systems are equal on every dialogue are left out: they test nothing"
             if left_out else "")  # fmt: skip
    return f"every row of this table ({fam.get('rows', DASH)}{aside})"


def retries_table(report: dict) -> list[str]:
    """Per system and role: calls, calls retried, retries (invalid output) and transport retries."""
    rows = []
    for s in report["systems"]:
        retries = s.get("retries") or {}
        shown = "same settings" if retries.get("retry_temperature") is None else f"≥ {retries['retry_temperature']}"
        for role, r in (retries.get("roles") or {}).items():
            counts = (r["calls"], r["retried_calls"], r["retries"], r["transport_retries"])
            rows.append([s["name"], shown, role, *map(fmt, counts)])
    header = ["System", "retry temperature", "role", "calls", "retried calls", "retries", "transport retries"]
    return markdown_table(header, rows)


def reflection_table(report: dict) -> list[str]:
    """The reflection figures of the systems that ran reflection (empty when none did)."""
    rows = []
    for s in report["systems"]:
        r = s.get("reflection")
        if not r:
            continue
        blamed = ", ".join(f"{stage} {count}" for stage, count in r["blamed"].items()) or "none"
        audits = f"{fmt(r['valid_audits'])} / {fmt(r['audit_calls'])}"
        figures = (r["rerun_rate"], r["mean_selected_iteration"], r["reply_changed_by_pick"])
        rows.append([s["name"], audits, fmt(r["clean_audits"]), blamed, *map(with_ci, figures)])
    header = ["System", "valid audits / calls", "clean audits", "blamed stage (per audit)", "rerun rate"]
    return markdown_table([*header, "mean selected iteration", "reply changed by the pick"], rows) if rows else []


def agreement_table(report: dict) -> list[str]:
    rows = []
    for s in report["systems"]:
        agree = s.get("agreement") or {}
        rows.append(
            [
                s["name"],
                fmt((agree.get("emotion") or {}).get("n")),
                with_ci(agree.get("emotion")),
                with_ci(agree.get("cause_category")),
                with_ci(agree.get("strategy")),
                with_ci(agree.get("trigger_f1")),
                fmt(s["schema_valid"]["overall"]["n"]),
                with_ci(s["schema_valid"]["overall"]),
            ]
        )
    return markdown_table(
        ["System", "n pairs", "emotion", "cause category", "strategy", "trigger F1", "n calls", "schema-valid"], rows
    )


def cost_table(report: dict) -> list[str]:
    rows = []
    for s in report["systems"]:
        c = s["cost"]
        rows.append(
            [
                s["name"],
                fmt(c["latency_p50_s"]),
                fmt(c["latency_p95_s"]),
                with_ci(c["latency_s"]),
                fmt(c["throughput_dps"]),
                fmt(c["prompt_tokens_per_dialogue"]),
                fmt(c["completion_tokens_per_dialogue"]),
                fmt(c["usd_per_1k"]),
                fmt(c["peak_rss_mb"]),
            ]
        )
    return markdown_table(
        [
            "System",
            "latency p50 (s)",
            "p95 (s)",
            "mean (s)",
            "dialogues/s",
            "tokens in / dialogue",
            "tokens out / dialogue",
            "$ / 1k dialogues",
            "peak RSS (MiB)",
        ],
        rows,
    )


def judge_table(judge: dict) -> list[str]:
    rows = []
    for system, res in judge["results"].items():
        for aspect, c in res["aspects"].items():
            rows.append(
                [
                    f"{system} vs {judge['against']}",
                    aspect,
                    fmt(c["win"]),
                    fmt(c["lose"]),
                    fmt(c["tie"]),
                    fmt(c["n"]),
                    fmt(c["p_value"]),
                    fmt(c.get("p_holm")),
                    fmt(c["invalid"]),
                    fmt(c.get("identical", 0)),
                ]
            )
    header = [
        "Pair",
        "Aspect",
        "Win",
        "Lose",
        "Tie",
        "n",
        "sign-test p",
        "Holm p",
        "invalid verdicts",
        "identical replies",
    ]
    return markdown_table(header, rows)


def _notes(report: dict) -> list[str]:
    st, boot = report["settings"], report["settings"]["bootstrap"]
    notes = [
        f"Test set: split `{report['test']['split']}` of `{report['test']['dialogues']}`, "
        f"n = {report['test']['n']} dialogues; exemplar index `{report['test']['index']}`.",
        f"Mean-type metrics show value [bootstrap {boot['level_percent']}% CI] "
        f"({boot['resamples']} resamples, seed {boot['seed']}). Figures with an interval keep two significant "
        "digits of its half-width, others three; report.json has four decimals.",
    ]
    scored = st.get("registered_metrics") or {}
    for name, spec in METRICS.items():
        # a report written before the built-ins joined the registry keeps their settings in their sections
        settings = scored[name] if name in scored else st.get(spec.config) if spec.config else None
        if spec.note and settings is not None:
            notes.append(spec.note.format(**settings))
    notes.append(f"Agreement is with `{st['reference_system']}` on the same dialogue ids.")
    notes += [f"`{s['name']}`: {s['about']}" for s in report.get("config", {}).get("systems", []) if s.get("about")]
    methods = {s["cost"].get("memory_method") for s in report["systems"]} - {None}
    if methods:
        notes.append("Peak memory: " + "; ".join(sorted(methods)) + ".")
    return ["- " + n for n in notes]


def render_markdown(report: dict) -> str:
    fam = report["settings"].get("paired_family") or {}
    lines = [
        "# Evaluation report",
        "",
        *_notes(report),
        "",
        "## Response quality (TRACE Table 1 layout)",
        "",
        *quality_table(report),
        "",
        *paper_table(report),
        *shares_by_size_table(report),
        *checks_table(report),
        f"## Agreement with `{report['settings']['reference_system']}`",
        "",
        *agreement_table(report),
        "",
        "## Paired differences (same dialogues, bootstrap over dialogues)",
        "",
        "Each row resamples the test dialogues and takes both systems' values on the same draw, so the "
        "interval is for the difference itself; a corpus statistic (PPL) is recomputed on each draw. The family is "
        f"{_family_sentence(fam)}; Holm's adjustment holds its family-wise error rate "
        f"at {fam.get('alpha', DASH)}, and only a row that survives it is a finding." + _primary_sentence(report),
        "",
        *paired_table(report),
        "",
        "## Retries per role",
        "",
        *retries_table(report),
        "",
        "## Cost and speed",
        "",
        *cost_table(report),
        "",
        "## Plots",
        "",
        "![metrics per system](metrics.png)",
        "",
    ]
    if confusions(report):
        lines += ["![emotion confusion matrices](confusion.png)", ""]
    reflection = reflection_table(report)
    if reflection:
        lines += ["## Reflection (MERG's global reflection agent)", "", *reflection, ""]
    if report.get("judge"):
        j = report["judge"]
        lines += [
            f"## Pairwise judge (Win/Lose/Tie vs `{j['against']}`, judge `{j['judge'].get('model', '?')}`)",
            "",
            f"Rule: {j['rule']}.",
            "",
            *judge_table(j),
            "",
        ]
    return "\n".join(lines)


def write_report_files(report_json: Path, out: Path) -> list[Path]:
    """report.md and the PNGs in ``out``, all from ``report_json``."""
    from eval.compare.report_plots import plot_confusions, plot_metrics

    report = json.loads(Path(report_json).read_text(encoding="utf-8"))
    md = out / "report.md"
    md.write_text(render_markdown(report) + "\n", encoding="utf-8")
    written = [md, plot_metrics(report, out / "metrics.png")]
    confusion = plot_confusions(report, out / "confusion.png")
    return written + ([confusion] if confusion else [])


def _primary_sentence(report: dict) -> str:
    """The row the config declared primary before the run: tested alone, out of Holm's family."""
    row = next((p for p in report.get("paired") or [] if p.get("primary")), None)
    if row is None:
        return ""
    return (
        f" The config declared `{row['pair'][0]} − {row['pair'][1]}` on `{row['metric']}` the one primary comparison "
        "before the run: it is tested alone, and the family is the other rows (the count above)."
    )
