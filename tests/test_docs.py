"""The docs' shape: no table cell over 300 characters (README and docs/), no guide over 200 lines, no page of docs/
(nor the CHANGELOG, nor the README as a reader sees it: its record blocks rendered in) over 300 lines, no result
figure outside a record block in the pages a newcomer reads (the README, the guides, the reference, the glossary),
no heading that claims a comparison with TRACE's Table 1 is "like for like" without the paper's n (2,465), and
every relative link of README.md and docs/ (a file, and a heading's anchor in it) resolves.

A **result figure** is a measured value with its uncertainty: a number followed by a bracketed pair of numbers
(`0.48 [0.33, 0.60]`, `+0.25 [+0.04, +0.46]`, `72% [65%, 80%]`), or a number with ± (`0.41 ± 0.05`). Figures may
sit inside a record block (`<!-- record: NAME -->` ... `<!-- /record -->`), which eval/records/curve.py renders from a
run's record and tests/test_records.py checks, or be an inline figure rendered from one (`<!-- fig: ... -->`);
superseded runs' hand-typed figures live in docs/history.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MAX_CELL, MAX_GUIDE_LINES, MAX_PAGE_LINES = 300, 200, 300
# written from the code by `python -m eval.reference write` (a line per key or flag): its length is the code's
GENERATED = (DOCS / "reference" / "config-files.md", DOCS / "reference" / "commands.md")
_NUMBER = r"[+\-−]?\d+(?:[.,]\d+)*%?"
FIGURE = re.compile(rf"{_NUMBER} \[{_NUMBER}, {_NUMBER}\]|{_NUMBER} ?± ?{_NUMBER}")
# a record block, or an inline figure (eval/records/inline.py): each rendered from its record
RECORD_BLOCK = re.compile(r"<!-- record: .*?<!-- /record -->|<!-- fig: .*?<!-- /fig -->", re.S)
# The paper's Table 1 is on TRACE's prepared ED test set of 2,465 conversations; a run on fewer is not like for like.
PAPER_N = re.compile(r"2,?465")
LIKE_FOR_LIKE = re.compile(r"like[\s-]+for[\s-]+like", re.I)
HEADING = re.compile(r"^#{1,6} .*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)  # a bash comment in a code block is not a heading


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


LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors: each heading lower-cased, punctuation but hyphens dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.lstrip("#").strip().lower()).replace(" ", "-")
            for h in HEADING.findall(FENCE.sub("", text))}  # fmt: skip


def broken_links(page: Path) -> list[str]:
    found = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            found.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
            found.append(f"{target}: no such heading")
    return found


def like_for_like_headings(text: str) -> list[str]:
    """Headings that claim "like for like" without the paper's n (2,465) in the same heading."""
    return [h for h in HEADING.findall(FENCE.sub("", text)) if LIKE_FOR_LIKE.search(h) and not PAPER_N.search(h)]


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_table_cell_is_over_300_characters(page):
    assert not long_cells(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("guide", sorted((DOCS / "guides").glob("*.md")), ids=lambda p: p.name)
def test_no_guide_is_over_200_lines(guide):
    assert len(guide.read_text(encoding="utf-8").splitlines()) <= MAX_GUIDE_LINES


def hand_written_pages() -> list[Path]:
    return [page for page in sorted(DOCS.rglob("*.md")) if page not in GENERATED] + [REPO / "CHANGELOG.md"]


@pytest.mark.parametrize("page", [*hand_written_pages(), REPO / "README.md"], ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_is_over_300_lines(page):
    """A page is read in one sitting: a longer one is split by kind (guide, results, history). The README counts
    whole, its record blocks included (tests/test_readme_layout.py bounds its own text): the reader reads both."""
    lines = len(page.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_PAGE_LINES, f"{lines} lines: split it by kind (a results page per record, history apart)"


@pytest.mark.parametrize("page", newcomer_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_result_figure_outside_a_record_block(page):
    assert not figures_outside_records(page.read_text(encoding="utf-8")), "move it to docs/history.md or a record"


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_heading_claims_like_for_like_without_the_papers_n(page):
    assert not like_for_like_headings(page.read_text(encoding="utf-8")), "name the paper's n (2,465) or drop the claim"


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page)


def test_the_rules_catch_what_they_name():
    cell = "| a | " + "x" * (MAX_CELL + 1) + " |"
    assert long_cells(f"text\n{cell}\n") and not long_cells("| a | b |\n")
    for typed in ("accuracy 0.48 [0.33, 0.60] against", "+0.25 [+0.04, +0.46]", "72% [65%, 80%]", "0.41 ± 0.05"):
        assert figures_outside_records(typed), typed
    block = "<!-- record: ed-400-levers -->\n| s | 0.584 [0.547, 0.625] |\n<!-- /record -->"
    assert not figures_outside_records(block) and figures_outside_records(block + "\n0.5 [0.4, 0.6]")
    assert not figures_outside_records("`points: [8, 16, 24]` and asi=24000 tokens, a link [x](y)")
    for claim in ("### Table 1 like for like (2026-11-28)", "## TRACE, Like-for-like", "# like  for like at n = 253"):
        assert like_for_like_headings(f"text\n{claim}\nmore"), claim
    for fine in (
        "### Table 1 like for like at the paper's n = 2,465",
        "### like for like (n 2465)",
        "prose that says like for like is not a heading",
        "### Beside Table 1 at n = 253",
        "```bash\n# like for like\n```",
    ):
        assert not like_for_like_headings(f"text\n{fine}\n"), fine
    assert heading_anchors("## On a GPU\n### Saving under DDP, ZeRO-2 and FSDP\n") == {
        "on-a-gpu", "saving-under-ddp-zero-2-and-fsdp"}  # fmt: skip


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n## On a GPU\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#on-a-gpu) [web](https://x.org/y) [self](#top)\n# Top\n", encoding="utf-8")
    assert not broken_links(page)
    page.write_text("[gone](c.md) [anchor](a.md#on-a-cpu)\n", encoding="utf-8")
    assert len(broken_links(page)) == 2
