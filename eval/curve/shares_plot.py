"""The Dist/EAD shares of the human replies against corpus size (`shares_by_size`), as a figure: curve.md shows it
beside its table, so a share's trend toward the paper's test-set size can be read at a glance."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from eval.compare.shares_table import share_figures

SHARES_PNG = "shares.png"


def has_shares(against: dict[str, Any]) -> bool:
    return any(s.get("human_ratio_by_size") for s in against.get("systems", []))


def plot_shares_by_size(against: dict[str, Any], path: Path) -> Optional[Path]:
    """One panel per share (Dist-1/2, EAD-1/2): each system's share at each n with its CI whiskers, the human
    replies' level (1.0), and the paper's rows at the paper's own n. None when no system has shares by size."""
    if not has_shares(against):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = share_figures()
    fig, axes = plt.subplots(1, len(figures), figsize=(4 * len(figures), 3.6), squeeze=False)
    systems = [s for s in against["systems"] if s.get("human_ratio_by_size")]
    paper = against.get("paper") or {}
    for ax, figure in zip(axes[0], figures):
        key = figure.path.rsplit(".", 1)[-1]
        for i, system in enumerate(systems):
            rows = [r for r in system["human_ratio_by_size"] if (r.get(key) or {}).get("value") is not None]
            ns, stats = [r["n"] for r in rows], [r[key] for r in rows]
            ys = [s["value"] for s in stats]
            err = [[y - s["ci_low"] for s, y in zip(stats, ys)], [s["ci_high"] - y for s, y in zip(stats, ys)]]
            ax.errorbar(ns, ys, yerr=err, marker="o", capsize=3, label=system["name"], color=f"C{i}")
        for row in paper.get("rows", []) if paper.get("test_conversations") else []:
            ax.plot([paper["test_conversations"]], [figure.read_paper(row)], "k*", markersize=10, label=row["system"])
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")  # the human replies' own level
        ax.set_xscale("log")
        ax.set_xlabel("test conversations in the corpus (n)")
        ax.set_title(figure.header)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
