"""A results page states no figure by hand unless it says so: each decimal figure in its prose (`0.365`, `-0.027`,
`12.5%`, `1.9x`) is an inline token rendered from a record or a benchmark's JSON (`<!-- fig: ... -->`,
eval/records/inline.py, checked by `records render --check`), or is marked as read by hand with its n (what it
was counted or measured over: dialogues, prompts, runs): a `<!-- hand: n=30 -->` later in its sentence, or on the
line above a table typed by hand. Record blocks, code and code spans are not prose; a decoding setting (`T 0.5`,
`min-p 0.1`), a version, an arXiv id, a bar (`≥ 0.97`) and the 95% and 5% of the test rule are not figures.
docs/history.md keeps superseded runs' figures as they were typed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# the pages that state results from records, each with the section that does (None: the whole page)
RESULTS_PAGES = {
    "README.md": "## Results",
    "docs/distillation-pays.md": None,
    "docs/teacher-that-can-teach.md": None,
    "docs/table1-frontier.md": None,
    "docs/decoding-levers.md": None,
    "docs/strategy-labels.md": None,
    "docs/escot-equal-tokens.md": None,
    "docs/performance.md": None,
    "docs/quality-recall.md": None,
    "docs/faithfulness.md": None,
    "docs/quality.md": None,
    "docs/real-data.md": None,
    "docs/robustness.md": None,
}
FIGURE = re.compile(r"(?<![\w.])(?<![A-Za-z]-)(?:[+\-−](?=\d))?\d+(?:\.\d+(?:%|x|×)?|%)(?!\w|\.\w|-[A-Za-z])")
NOT_PROSE = re.compile(r"<!-- record:.*?<!-- /record -->|```.*?```|<!-- fig:.*?<!-- /fig -->|`[^`\n]*`", re.S)
NOT_FIGURES = re.compile(
    r"\b(?:T|temperature|top-p|min-p|typical-p)\s+\d+\.\d+"  # a decoding setting names itself
    r"|\b(?:torch|transformers|TRL|PEFT|peft|accelerate|bitsandbytes|Python|llama-cpp-python)\s+\d+\.\d+"  # versions
    r"|\b\d{4}\.\d{4,5}\b"  # arXiv ids
    r"|\bCC BY(?:-NC)?(?:-SA)? \d\.\d"  # a licence's version
    r"|(?<![\w.])(?:95|5)%"  # the test rule's levels
    r"|≥\s*\d+\.\d+"  # a bar, not a measurement
)
HAND = re.compile(r"<!-- hand: n=\d[\d,]* -->")
SENTENCE_END = re.compile(r"\.(?=\s)|\n[ \t]*\n")
TABLE = re.compile(r"<!-- hand: n=\d[\d,]* -->[ \t]*\n((?:\|.*\n?)+)")


def _blank(text: str, pattern: re.Pattern) -> str:
    """`text` with each match of `pattern` blanked, newlines kept (so line numbers stay)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def unmarked_figures(text: str) -> list[tuple[int, str]]:
    """(line, figure) for each decimal figure of the prose that is neither a token nor marked as a hand count."""
    text = _blank(_blank(text, NOT_PROSE), NOT_FIGURES)
    text = TABLE.sub(lambda m: m.group(0).replace(m.group(1), re.sub(r"[^\n]", " ", m.group(1))), text)
    found = []
    for match in FIGURE.finditer(text):
        hand = HAND.search(text, match.end())
        end = SENTENCE_END.search(text, match.end())
        if hand and (end is None or hand.start() < end.start()):
            continue
        found.append((text.count("\n", 0, match.start()) + 1, match.group(0)))
    return found


def _section(text: str, heading: str | None) -> str:
    """The section under `heading` (up to the next heading of its level), the rest blanked; the whole text for None."""
    if heading is None:
        return text
    start = text.index(f"{heading}\n")
    end = text.find(f"\n{heading.split()[0]} ", start + 1)
    end = len(text) if end < 0 else end
    return re.sub(r"[^\n]", " ", text[:start]) + text[start:end] + re.sub(r"[^\n]", " ", text[end:])


@pytest.mark.parametrize("page", RESULTS_PAGES)
def test_every_figure_in_a_results_page_is_a_token_or_a_hand_count(page):
    text = _section((REPO / page).read_text(encoding="utf-8"), RESULTS_PAGES[page])
    unmarked = unmarked_figures(text)
    assert not unmarked, f"{page}: figures typed by hand, neither `<!-- fig: ... -->` nor `<!-- hand: n=N -->`: " + (
        ", ".join(f"line {line} {figure}" for line, figure in unmarked)
    )


def test_the_rule_finds_a_bare_figure_and_passes_tokens_hand_counts_code_and_settings():
    bare = "traces trails by 0.027 [-0.040, -0.014], 12.5% of it, and is 1.9x slower."
    assert [f for _, f in unmarked_figures(bare)] == ["0.027", "-0.040", "-0.014", "12.5%", "1.9x"]
    marked = (
        "It trails by <!-- fig: escot-students points.0.paired[traces/direct] -->0.027<!-- /fig -->, at T 0.5 and "
        "min-p 0.1 (`max_length: 0.5`), with torch 2.11, arXiv 2509.21849, 95% CIs at 5%.\n\n"
        "Read, 0.4 of them made sense <!-- hand: n=30 -->. But 0.6 did not.\n\n"
        "```\n0.5\n```\n\n<!-- record: x -->\n0.7\n<!-- /record -->\n\n<!-- hand: n=2 -->\n| a |\n| 0.9 |\n\n| 1.5 |\n"
    )
    assert unmarked_figures(marked) == [(3, "0.6"), (17, "1.5")]
    versions = "Qwen2.5-0.5B, gpt-3.5-turbo, torch 2.11.0+cu130, v0.1.0 on 2026-11-28, CC BY-NC 4.0; 10% of 3."
    assert [f for _, f in unmarked_figures(versions)] == ["10%"]
