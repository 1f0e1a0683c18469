"""The learning curve's report: curve.json from the point reports, then curve.md and curve.png from it.

Every figure is read from a point's `eval compare` report.json, so the curve shows exactly what those
reports hold. curve.md opens with the answer: at the largest point, what the traces add over direct
fine-tuning on the same labels, for the emotion and for the reply, with paired CIs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from distill.adapters.adapters import has_metadata, read_metadata
from eval.compare.markdown import fmt, interval, markdown_table, with_ci
from eval.compare.report import paper_table
from eval.compare.shares_table import shares_by_size_table
from eval.curve.shares_plot import SHARES_PNG, plot_shares_by_size
from eval.curve.target import render_target, stat_value, target_rows
from eval.metrics.diversity import RATIO_KEYS

CURVE_JSON, CURVE_MD, CURVE_PNG = "curve.json", "curve.md", "curve.png"
# (first, second, what the difference says): the comparisons the question needs, first − second
QUESTIONS = (
    ("student-traces", "student-direct", "what the traces add over fine-tuning on the same labels"),
    ("student-rationale", "student-direct", "what the rationale task adds over fine-tuning on the same labels"),
    ("student-rationale", "student-traces", "what the rationale task adds to the distilled pipeline"),
    ("student-traces", "probe", "the distilled emotion agent against a linear probe"),
    ("student-rationale", "probe", "the rationale-task emotion agent against a linear probe"),
    ("student-direct", "probe", "the fine-tuned emotion agent against a linear probe"),
    ("student-direct", "base", "what fine-tuning on gold labels gives over the zero-shot prompted model"),
    ("student-traces", "base", "the distilled student against the zero-shot prompted model"),
    ("student-joint", "student-traces", "one adapter for all roles against one adapter per role"),
    ("student-teacher-reply", "student-traces", "the teacher's replies as the reply target, against the human ones"),
    ("student-teacher-reply", "student-direct", "the teacher's replies as the target, against direct fine-tuning"),
)
METRICS = {
    "i_acc": "I-ACC (6)",
    "bertscore_f1": "BERTScore F",
    "relevance": "relevance",
    "ppl": "PPL",
    "dialogue_ppl": "PPL given the dialogue",
} | {key: label for key, label in zip(RATIO_KEYS, ("Dist-1", "Dist-2", "EAD-1", "EAD-2"))}
PANELS = (("i_acc", "I-ACC (6 classes)"), ("bertscore", "BERTScore F"))
# students of one point whose tokens seen for a role differ by more than this share are flagged in curve.md
UNEQUAL_TOKENS = 0.15


def _row(n: int, s: dict) -> dict[str, Any]:
    acc = (s.get("i_acc") or {}).get("ekman6") or {}
    div = s.get("diversity") or {}
    return {
        "n": n,
        "system": s["name"],
        "i_acc": acc.get("accuracy"),
        "macro_f1": acc.get("macro_f1"),
        "bertscore": (s.get("bertscore") or {}).get("f1"),
        "dist2": div.get("dist2"),
        "ead2": div.get("ead2"),
        "ppl": s.get("ppl"),
    }


def questions(config=None) -> tuple[tuple[str, str, str], ...]:
    """`QUESTIONS`, and each variant of the config against the student it is made like, the direct student and
    the probe."""
    extra = []
    for v in getattr(config, "variants", None) or []:
        decoding = v.decoding.model_dump(exclude_none=True) if v.decoding else {}
        changed = {**v.options.model_dump(exclude_none=True), **decoding}
        lever = f"{v.name} (like {v.like}: {changed or 'its own budget'})"
        extra += [
            (f"student-{v.name}", f"student-{v.like}", f"{lever} against the student it is made like"),
            (f"student-{v.name}", "student-direct", f"{lever} against fine-tuning on the same labels"),
            (f"student-{v.name}", "probe", f"{lever} against a linear probe"),
        ]
    asked = {}  # a variant made like direct asks its first two questions once
    for first, second, meaning in (*QUESTIONS, *extra):
        asked.setdefault((first, second), meaning)
    return tuple((first, second, meaning) for (first, second), meaning in asked.items())


def _paired(n: int, report: dict, asked: tuple[tuple[str, str, str], ...]) -> list[dict[str, Any]]:
    """The report's paired differences for the pairs `asked`, oriented as they are named."""
    out = []
    for p in report.get("paired") or []:
        for first, second, meaning in asked:
            if p["metric"] not in METRICS or {first, second} != set(p["pair"]) or p["diff"] is None:
                continue
            sign = 1 if p["pair"][0] == first else -1
            # + 0.0 turns a flipped 0 into 0, not -0
            low, high = sorted((sign * p["ci_low"] + 0.0, sign * p["ci_high"] + 0.0))
            out.append(
                {
                    "n": n,
                    "pair": [first, second],
                    "metric": p["metric"],
                    "meaning": meaning,
                    "diff": sign * p["diff"] + 0.0,
                    "ci_low": low,
                    "ci_high": high,
                    "dialogues": p["n"],
                    "reading": p["reading"],
                }
            )
    return out


def trained_tokens(n: int, point: Path) -> list[dict[str, Any]]:
    """Per student and role trained at the point (`adapters-<student>/<role>`, borrowed links left out):
    the budget it was given and the tokens it saw, from the adapter's own metadata."""
    rows = []
    for folder in sorted(point.glob("adapters-*/*")):
        if folder.is_symlink() or not has_metadata(folder):
            continue
        meta = read_metadata(folder)
        data = meta.get("tokens") or {}
        seen = meta.get("tokens_seen")
        rows.append(
            {
                "n": n,
                "system": "student-" + folder.parent.name.removeprefix("adapters-"),
                "role": meta.get("role", folder.name),
                "budget": (meta.get("train_config") or {}).get("max_tokens_budget"),
                "tokens_seen": seen,
                "steps": meta.get("global_step"),
                "rows": data.get("examples"),
                "passes": round(seen / data["tokens"], 2) if seen and data.get("tokens") else None,
            }
        )
    return rows


def unequal_tokens(tokens: list[dict[str, Any]], tolerance: float = UNEQUAL_TOKENS) -> list[str]:
    """Each (point, role) whose students saw token counts further apart than `tolerance` of the largest."""
    found = []
    for key in sorted({(t["n"], t["role"]) for t in tokens if t["role"] != "joint"}):
        seen = {t["system"]: t["tokens_seen"] or 0 for t in tokens if (t["n"], t["role"]) == key}
        if len(seen) > 1 and max(seen.values()) - min(seen.values()) > tolerance * max(seen.values()):
            found.append(f"N = {key[0]}, {key[1]}: " + ", ".join(f"{s} {v:,}" for s, v in seen.items()))
    return found


def collect_curve(reports: dict[int, Path], config=None) -> dict[str, Any]:
    rows, paired, tokens, test, asked = [], [], [], None, questions(config)
    report: dict = {}
    for n, path in sorted(reports.items()):
        report = json.loads(path.read_text())
        test = report["test"]
        rows += [_row(n, s) for s in report["systems"]]
        paired += _paired(n, report, asked)
        tokens += trained_tokens(n, path.parent.parent)  # the report is <point>/eval/report.json
    n = max(reports)
    against = {"n": n, "systems": report.get("systems", []), "paper": report.get("paper")}
    return {
        "points": sorted(reports),
        "test": {k: test[k] for k in ("dialogues", "split", "n")},
        "rows": rows,
        "paired": paired,
        "tokens": tokens,
        "sources": config.sources() if config is not None else {},
        # the largest point's systems as shares of the human replies, beside the paper's rows when asked
        "against_paper": against,
        # judged on the largest point's paired falls: the rows the record keeps
        "target": target_rows(
            against, config.at_paper_decoding() if config is not None else {}, [p for p in paired if p["n"] == n]
        ),
    }


def _verdict(p: dict) -> str:
    if p["ci_low"] <= 0 <= p["ci_high"]:
        return "the interval includes 0: no difference this test set can show"
    better = (p["diff"] > 0) == (p["reading"] == "higher is better")
    return "the interval excludes 0: " + ("the first is better" if better else "the first is worse")


def headline(curve: dict) -> list[str]:
    """The answer in the report's first lines: every question at the largest point."""
    n = max(curve["points"])
    lines = [f"At N = {n} train conversations, on {curve['test']['n']} test dialogues (paired bootstrap 95% CIs):"]
    for p in (p for p in curve["paired"] if p["n"] == n and p["metric"] in ("i_acc", "bertscore_f1")):
        what = "emotion (I-ACC)" if p["metric"] == "i_acc" else "reply (BERTScore F)"
        lines.append(
            f"- {what}, {p['pair'][0]} − {p['pair'][1]} ({p['meaning']}): "
            f"{interval(p['diff'], p['ci_low'], p['ci_high'])}; {_verdict(p)}."
        )
    return lines


def _results_table(curve: dict) -> list[str]:
    rows = [
        [fmt(r["n"]), r["system"], with_ci(r["i_acc"]), fmt(r["macro_f1"]), with_ci(r["bertscore"]),
         fmt(r["dist2"]), fmt(r["ead2"]), with_ci(r["ppl"])]
        for r in curve["rows"]
    ]  # fmt: skip
    return markdown_table(["N", "system", "I-ACC (6)", "macro-F1", "BERTScore F", "Dist-2", "EAD-2", "PPL"], rows)


def _paired_table(curve: dict) -> list[str]:
    pairs = [
        [fmt(p["n"]), f"{p['pair'][0]} − {p['pair'][1]}", METRICS[p["metric"]],
         interval(p["diff"], p["ci_low"], p["ci_high"]), "no" if p["ci_low"] <= 0 <= p["ci_high"] else "yes"]
        for p in curve["paired"]
    ]  # fmt: skip
    return markdown_table(["N", "first − second", "metric", "difference [95% CI]", "CI excludes 0"], pairs)


def _against_paper(against: dict) -> list[str]:
    largest = {"systems": against.get("systems", []), "paper": against.get("paper")}
    table = paper_table(largest)
    shares = shares_by_size_table(largest)  # where the run asked for shares by size, with their figure
    figure = ["![shares against corpus size](shares.png)", ""] if shares else []
    return ([table[0] + f" (N = {against['n']})", *table[1:]] if table else []) + shares + figure


def render_sources(sources: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    rows = [
        [system, role, r["target"], r["input"], r.get("adapter", "its own")]
        for system, roles in sources.items()
        for role, r in roles.items()
    ]
    if not rows:
        return []
    head = ["system", "role", "target learned", "training input", "adapter"]
    return ["## What each student learns, from whom", "", *markdown_table(head, rows), ""]


def render_tokens(tokens: list[dict[str, Any]]) -> list[str]:
    if not tokens:
        return []
    rows = [
        [fmt(t["n"]), t["system"], t["role"], fmt(t["budget"]), fmt(t["tokens_seen"]), fmt(t["steps"]),
         fmt(t["rows"]), fmt(t["passes"])]
        for t in tokens
    ]  # fmt: skip
    head = ["N", "system", "role", "budget", "tokens seen", "steps", "rows", "passes"]
    lines = ["## Training tokens seen per role", "", *markdown_table(head, rows), ""]
    unequal = unequal_tokens(tokens)
    if unequal:
        lines += [f"**Unequal budgets** (students of one point more than {UNEQUAL_TOKENS:.0%} apart):", ""]
        lines += [f"- {line}" for line in unequal] + [""]
    return lines


def render_curve(curve: dict) -> str:
    return "\n".join(
        [
            "# Does distillation pay? Learning curves",
            "",
            *headline(curve),
            "",
            f"Test set: split `{curve['test']['split']}` of `{curve['test']['dialogues']}`; each point's full "
            "report is `n<N>/eval/report.md`.",
            "",
            "![learning curves](curve.png)",
            "",
            "## Every system at every point",
            "",
            *_results_table(curve),
            "",
            "## Paired differences",
            "",
            *_paired_table(curve),
            "",
            *_against_paper(curve.get("against_paper") or {}),
            *render_target(curve.get("target") or []),
            *render_sources(curve.get("sources") or {}),
            *render_tokens(curve.get("tokens") or []),
        ]
    )


def plot_curve(curve: dict, path: Path) -> Optional[Path]:
    """I-ACC and BERTScore against N, one line per system with CI whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # an emotion-only curve has no BERTScore: its one panel is I-ACC
    # a statistic without a value (`{"value": None}`: nothing to score) is not a point
    panels = [(k, t) for k, t in PANELS if any(stat_value(r.get(k)) is not None for r in curve["rows"])] or PANELS[:1]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    axes = axes[0]
    systems = list(dict.fromkeys(r["system"] for r in curve["rows"]))
    for ax, (key, title) in zip(axes, panels):
        for i, system in enumerate(systems):
            rows = [r for r in curve["rows"] if r["system"] == system and stat_value(r.get(key)) is not None]
            points = [(r["n"], r[key]) for r in rows]
            if not points:
                continue
            # one colour per system in both panels (the probe has no BERTScore), and a small offset
            # along N so that overlapping intervals stay readable
            offset = 1 + 0.04 * (i - (len(systems) - 1) / 2)
            xs = [n * offset for n, _ in points]
            ys = [s["value"] for _, s in points]
            err = [
                [y - (s.get("ci_low") or y) for (_, s), y in zip(points, ys)],
                [(s.get("ci_high") or y) - y for (_, s), y in zip(points, ys)],
            ]
            ax.errorbar(
                xs,
                ys,
                yerr=err,
                marker="o",
                capsize=3,
                label=system,
                color=f"C{i}",
                linestyle="--" if system == "base" else "-",
            )
        ax.set_xscale("log")
        ax.set_xlim(min(curve["points"]) / 1.3, max(curve["points"]) * 1.3)
        ax.set_xticks(curve["points"], [str(n) for n in curve["points"]])
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
        ax.set_xlabel("train conversations (N)")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_curve(reports: dict[int, Path], out: Path, config=None) -> dict[str, Any]:
    curve = collect_curve(reports, config)
    if config is not None:
        curve["config"] = config.model_dump()
    (out / CURVE_JSON).write_text(json.dumps(curve, indent=2) + "\n")
    (out / CURVE_MD).write_text(render_curve(curve))
    plot_curve(curve, out / CURVE_PNG)
    plot_shares_by_size(curve["against_paper"], out / SHARES_PNG)
    return curve
