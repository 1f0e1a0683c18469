"""The docs' shape: no table cell over 300 characters (README and docs/), no guide over 200 lines, and no result
figure outside a record block in the pages a newcomer reads (the README, the guides, the reference, the glossary).

A **result figure** is a measured value with its uncertainty: a number followed by a bracketed pair of numbers
(`0.48 [0.33, 0.60]`, `+0.25 [+0.04, +0.46]`, `72% [65%, 80%]`), or a number with ± (`0.41 ± 0.05`). Figures may
sit inside a record block (`<!-- record: NAME -->` ... `<!-- /record -->`), which eval/records.py renders from a
run's record and tests/test_records.py checks; superseded runs' hand-typed figures live in docs/history.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MAX_CELL, MAX_GUIDE_LINES = 300, 200
_NUMBER = r"[+\-−]?\d+(?:[.,]\d+)*%?"
FIGURE = re.compile(rf"{_NUMBER} \[{_NUMBER}, {_NUMBER}\]|{_NUMBER} ?± ?{_NUMBER}")
RECORD_BLOCK = re.compile(r"<!-- record: .*?<!-- /record -->", re.S)


def markdown_pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def newcomer_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((DOCS / "guides").glob("*.md")), *sorted((DOCS / "reference").glob("*.md")),
            DOCS / "glossary.md"]  # fmt: skip


def long_cells(text: str) -> list[str]:
    """Table cells over MAX_CELL characters, as `line N: start of the cell`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("|"):
            found += [f"line {number}: {cell.strip()[:60]}" for cell in line.split("|") if len(cell) > MAX_CELL]
    return found


def figures_outside_records(text: str) -> list[str]:
    return FIGURE.findall(RECORD_BLOCK.sub("", text))


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_table_cell_is_over_300_characters(page):
    assert not long_cells(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("guide", sorted((DOCS / "guides").glob("*.md")), ids=lambda p: p.name)
def test_no_guide_is_over_200_lines(guide):
    assert len(guide.read_text(encoding="utf-8").splitlines()) <= MAX_GUIDE_LINES


@pytest.mark.parametrize("page", newcomer_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_result_figure_outside_a_record_block(page):
    assert not figures_outside_records(page.read_text(encoding="utf-8")), "move it to docs/history.md or a record"


def test_the_rules_catch_what_they_name():
    cell = "| a | " + "x" * (MAX_CELL + 1) + " |"
    assert long_cells(f"text\n{cell}\n") and not long_cells("| a | b |\n")
    for typed in ("accuracy 0.48 [0.33, 0.60] against", "+0.25 [+0.04, +0.46]", "72% [65%, 80%]", "0.41 ± 0.05"):
        assert figures_outside_records(typed), typed
    block = "<!-- record: ed-400-levers -->\n| s | 0.584 [0.547, 0.625] |\n<!-- /record -->"
    assert not figures_outside_records(block) and figures_outside_records(block + "\n0.5 [0.4, 0.6]")
    assert not figures_outside_records("`points: [8, 16, 24]` and asi=24000 tokens, a link [x](y)")
