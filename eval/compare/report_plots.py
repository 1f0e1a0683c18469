"""The PNG plots of a comparison's report.json: metric bars with CI whiskers, emotion confusion matrices.

Like `eval.compare.report`, they read nothing but report.json and compute no number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from eval.metrics.registry import METRICS


def plot_metrics(report: dict, path: Path) -> Path:
    """A bar chart per headline figure of the registry, one bar per system (and the human replies where they
    have it), with CI whiskers only on figures that have intervals: Dist and EAD are corpus-level, so they
    get none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(s["name"], s, False) for s in report["systems"]]
    if report.get("human_gold"):
        rows.append(("human", report["human_gold"], True))
    panels = []  # a panel per figure some row has; the human row only where it has the metric
    for figure in (f for spec in METRICS.values() for f in spec.headline):
        shown = [(name, _stat(value), human) for name, row, human in rows if (value := figure.read(row)) is not None]
        panels += [(figure.header, shown)] if shown else []
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(3.2 * max(len(panels), 1), 3.2), squeeze=False)
    for ax, (title, shown) in zip(axes[0], panels):
        _bars(ax, shown)
        if _spans_decades(shown):
            ax.set_yscale("log")  # one wide interval (PPL's) would otherwise flatten every other bar
        ax.set_title(title)
        plt.setp(ax.get_xticklabels(), rotation=35, ha="right", rotation_mode="anchor")  # long names don't collide
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _stat(value) -> dict:
    """A figure as a bar: a statistic dict as it is, a corpus number (Dist, EAD) with no interval."""
    return value if isinstance(value, dict) else {"value": value}


def _spans_decades(shown: list[tuple[str, dict, bool]]) -> bool:
    """All bars positive and the tallest whisker over ten times the lowest bar: a linear axis would hide them."""
    values = [st.get("value") for _, st, _ in shown]
    if not values or any(v is None or v <= 0 for v in values):
        return False
    return max(st.get("ci_high") or st["value"] for _, st, _ in shown) > 10 * min(values)


def confusions(report: dict) -> list[tuple[dict, dict]]:
    """(system, its stat holding a confusion matrix) for every matrix a registered metric stored (I-ACC's)."""
    found = []
    for s in report["systems"]:
        for spec in METRICS.values():
            stat = s.get(spec.row_key) if spec.row_key else None
            found += [(s, part) for part in (stat or {}).values() if isinstance(part, dict) and part.get("confusion")]
    return found


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
    """Every confusion matrix of every system (I-ACC's 6-class, where a system ran ASI): gold rows, predicted
    columns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = confusions(report)
    if not found:
        return None
    fig, axes = plt.subplots(1, len(found), figsize=(4.2 * len(found), 4.2), squeeze=False)
    for ax, (s, stat) in zip(axes[0], found):
        conf = stat["confusion"]
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
        ax.set_title(f"{s['name']} (n={stat.get('n', s['n'])})")
        ax.set_xlabel("predicted")
        ax.set_ylabel("gold")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
