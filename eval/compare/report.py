"""Render a comparison's ``report.json`` as ``report.md`` (TRACE Tables 1-2 layout) and PNG plots.

This module reads nothing but report.json and computes no number: every figure in the markdown is a
value stored in the JSON, rounded for reading. A value with an interval keeps two significant digits
of the interval's half-width (9.7725 [6.9847, 19.5992] reads 9.8 [7.0, 19.6]); any other float keeps
three significant digits, never fewer than its integer digits (1030.1111 reads 1030); integers print
whole. The JSON keeps four decimals, so a test can check report.md against report.json, and anyone
can re-render an old report.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any, Optional

from eval.compare.report_plots import confusions
from eval.metrics.registry import METRICS, Figure

DASH = "–"


def _decimals(magnitude: float, significant: int) -> int:
    """Decimal places that keep `significant` digits of `magnitude` (none beyond the integer part)."""
    if magnitude == 0 or not math.isfinite(magnitude):
        return 0
    return max(0, significant - 1 - math.floor(math.log10(abs(magnitude))))


def fmt(value: Any, decimals: Optional[int] = None) -> str:
    """A stored number rounded for reading (see the module note); missing → a dash."""
    if value is None:
        return DASH
    if not isinstance(value, float):
        return json.dumps(value)
    return f"{value:.{_decimals(value, 3) if decimals is None else decimals}f}"


def interval(value: Any, low: Any, high: Any) -> str:
    """``value [low, high]``, all three to two significant digits of the half-width."""
    if value is None:
        return DASH
    if low is None or high is None:
        return fmt(value)
    half = (high - low) / 2
    decimals = _decimals(half, 2) if half > 0 else _decimals(value, 3)
    return f"{fmt(float(value), decimals)} [{fmt(float(low), decimals)}, {fmt(float(high), decimals)}]"


def with_ci(stat: Optional[dict]) -> str:
    """``value [ci_low, ci_high]`` for a mean-type statistic dict from `eval.metrics.stats.mean_with_ci`."""
    if not stat:
        return DASH
    return interval(stat.get("value"), stat.get("ci_low"), stat.get("ci_high"))


def cell(row: dict, figure: Figure) -> str:
    """One figure of a report row as report.md prints it: a statistic with its interval, or a number."""
    value = figure.read(row)
    return with_ci(value) if isinstance(value, dict) else fmt(value, figure.decimals)


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


def wrap_paragraph(paragraph: str) -> list[str]:
    """A paragraph in lines of at most 120 characters (the docs' width); a code span is never split."""
    return textwrap.wrap(paragraph, 120, break_long_words=False, break_on_hyphens=False)


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


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


def share_figures() -> list[Figure]:
    """The paper's figures that are shares of the human replies (Dist-1/2, EAD-1/2), as the registry names them."""
    return [f for spec in METRICS.values() if spec.versus_human for f in spec.paper]


def share_cells(row: dict) -> list[str]:
    """A `human_ratio_by_size` row's shares, each with its interval, in `share_figures` order."""
    return [with_ci(row.get(f.path.rsplit(".", 1)[-1])) for f in share_figures()]


def shares_above(row: dict, paper_row: dict) -> str:
    """The verdict at one sub-corpus size: how many of its shares have the whole 95% CI above the paper's share."""
    figures = share_figures()
    above = 0
    for f in figures:
        low, published = (row.get(f.path.rsplit(".", 1)[-1]) or {}).get("ci_low"), f.read_paper(paper_row)
        above += low is not None and published is not None and low > published
    return f"{above} of {len(figures)}"


def shares_by_size_rows(by_size: dict[str, list[dict]], paper_row: Optional[dict] = None) -> list[list[str]]:
    """Table rows of each system's shares at each sub-corpus size: system, n, the shares with their intervals, and
    with a paper row, how many lie wholly above its shares."""
    verdict = (lambda row: [shares_above(row, paper_row)]) if paper_row else (lambda row: [])
    return [[name, fmt(row["n"]), *share_cells(row), *verdict(row)] for name, rows in by_size.items() for row in rows]


def verdict_row(paper: Optional[dict]) -> Optional[dict]:
    """The paper row a shares-by-size table gives its verdict against: the first one, if any."""
    return ((paper or {}).get("rows") or [None])[0]


def shares_by_size_header(paper_row: Optional[dict]) -> list[str]:
    """The header of `shares_by_size_rows`' table."""
    verdict = [f"above {paper_row['system']}"] if paper_row else []
    return ["System", "n", *(f.header for f in share_figures()), *verdict]


def shares_by_size_intro(paper: Optional[dict]) -> str:
    """What a shares-by-size table holds, and the test set the paper's rows are on."""
    test_set = (paper or {}).get("test_set")
    rows = (paper or {}).get("rows")
    return (
        "Dist and EAD are corpus figures, so a share of the human replies depends on how many replies the corpus "
        "holds. Each row is a sub-corpus of n test dialogues: the first n of one seeded permutation (nested, so each "
        "holds the smaller ones), in test order; each share is paired with the human replies of the same dialogues, "
        "its 95% CI half-sampled."
        + (f" The paper's rows are on {test_set}." if test_set else "")
        + (" The last column is the verdict at that n: how many shares lie wholly above the paper's." if rows else "")
    )


def shares_by_size_table(report: dict) -> list[str]:
    """Each system's Dist/EAD shares of the human replies at each sub-corpus size (`shares_by_size`), with the
    paper's test set named; not asked: no table."""
    by_size = {s["name"]: s["human_ratio_by_size"] for s in report["systems"] if s.get("human_ratio_by_size")}
    if not by_size:
        return []
    paper = report.get("paper") or {}
    paper_row = verdict_row(paper)
    table = markdown_table(shares_by_size_header(paper_row), shares_by_size_rows(by_size, paper_row))
    intro = shares_by_size_intro(paper)
    return ["## Shares of the human replies against corpus size", "", intro, "", *table, ""]


def checks_table(report: dict) -> list[str]:
    """Per system and role, the share of its outputs failing each quality check (distill.quality), the human
    replies last; a check that does not apply to a role shows a dash."""
    from distill.quality import CHECKS

    rows = []
    for s in [*report["systems"], report.get("human_gold") or {}]:
        for role, q in (s.get("quality") or {}).items():
            rates = q["rates"]
            rows.append([s["name"], role, fmt(q["checked"]), *(fmt(rates.get(c), 3) for c in CHECKS)])
    if not rows:
        return []
    header = ["System", "role", "outputs", *CHECKS]
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
            fmt(p.get("p_holm")),
            "yes" if p.get("survives_holm") else "no",
        ]
        for p in report.get("paired") or []
    ]
    header = ["Pair (first − second)", "metric", "difference [95% CI]", "n", "reading", "bootstrap p", "Holm p"]
    return markdown_table([*header, "survives Holm"], rows)


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
        f"every row of this table ({fam.get('rows', DASH)}); Holm's adjustment holds its family-wise error rate "
        f"at {fam.get('alpha', DASH)}, and only a row that survives it is a finding.",
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
