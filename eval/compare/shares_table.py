"""The Dist/EAD shares of the human replies against corpus size: report.md's table, the records' and the plot's
figures, and the verdict per size against the paper's row."""

from __future__ import annotations

from typing import Optional

from eval.compare.markdown import fmt, markdown_table, with_ci
from eval.metrics.registry import METRICS, Figure


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
