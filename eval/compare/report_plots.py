"""The PNG plots of a comparison's report.json: metric bars with CI whiskers, emotion confusion matrices.

Like `eval.compare.report`, they read nothing but report.json and compute no number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def plot_metrics(report: dict, path: Path) -> Path:
    """Bar chart per metric, one bar per system (and the human replies where they have the metric), with
    CI whiskers only on metrics that have intervals: Dist and EAD are corpus-level, so they get none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("I-ACC (6)", lambda s: ((s.get("i_acc") or {}).get("ekman6") or {}).get("accuracy")),
        ("BERTScore F", lambda s: (s.get("bertscore") or {}).get("f1")),
        ("PPL", lambda s: s.get("ppl")),
        ("Dist-2", lambda s: {"value": s["diversity"]["dist2"]} if s.get("diversity") else None),
        ("EAD-2", lambda s: {"value": s["diversity"]["ead2"]} if s.get("diversity") else None),
        ("latency (s)", lambda s: (s.get("cost") or {}).get("latency_s")),
    ]
    rows = [(s["name"], s, False) for s in report["systems"]]
    if report.get("human_gold"):
        rows.append(("human", report["human_gold"], True))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2))
    for ax, (title, get) in zip(axes, panels):
        # the human row only where it has the metric
        shown = [(name, stat, human) for name, row, human in rows if (stat := get(row))]
        _bars(ax, shown)
        if title == "PPL" and all(st.get("value", 0) > 0 for _, st, _ in shown):
            ax.set_yscale("log")  # one wide interval would otherwise flatten every other bar
        ax.set_title(title)
        plt.setp(ax.get_xticklabels(), rotation=35, ha="right", rotation_mode="anchor")  # long names don't collide
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _bars(ax, shown: list[tuple[str, dict, bool]]) -> None:
    """One bar per (name, stat, is the human row); the human replies in their own colour."""
    names = [name for name, _, _ in shown]
    stats = [st for _, st, _ in shown]
    values = [st.get("value") or 0.0 for st in stats]
    has_ci = any(st.get("ci_low") is not None for st in stats)
    err = None
    if has_ci:
        low = [max(0.0, v - (st["ci_low"] if st.get("ci_low") is not None else v)) for v, st in zip(values, stats)]
        high = [max(0.0, (st["ci_high"] if st.get("ci_high") is not None else v) - v) for v, st in zip(values, stats)]
        err = [low, high]
    colours = ["#DD8452" if human else "#4C72B0" for _, _, human in shown]
    ax.bar(names, values, yerr=err, capsize=4 if has_ci else 0, color=colours)


def plot_confusions(report: dict, path: Path) -> Optional[Path]:
    """The 6-class emotion confusion matrix of every system that ran ASI (gold rows, predicted columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in report["systems"] if (s.get("i_acc") or {}).get("ekman6")]
    if not systems:
        return None
    fig, axes = plt.subplots(1, len(systems), figsize=(4.2 * len(systems), 4.2), squeeze=False)
    for ax, s in zip(axes[0], systems):
        conf = s["i_acc"]["ekman6"]["confusion"]
        ax.imshow(conf["matrix"], cmap="Blues")
        peak = max((c for row in conf["matrix"] for c in row), default=0)
        ax.set_xticks(range(len(conf["columns"])), conf["columns"], rotation=60, fontsize=7)
        ax.set_yticks(range(len(conf["rows"])), conf["rows"], fontsize=7)
        for i, row in enumerate(conf["matrix"]):
            for j, count in enumerate(row):
                if count:
                    # white on the dark cells, black on the light ones: legible on every shade
                    colour = "white" if count > peak / 2 else "black"
                    ax.text(j, i, str(count), ha="center", va="center", fontsize=7, color=colour)
        ax.set_title(f"{s['name']} (n={s['n']})")
        ax.set_xlabel("predicted")
        ax.set_ylabel("gold")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
