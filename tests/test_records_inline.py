"""Inline figures (eval/records/inline.py): a figure in a paragraph, rendered from one field of a record or of a
benchmark's JSON, and checked like the record blocks (`records render --check`); a stale token is named in one line
with its file and line, and a token that cannot be rendered is one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.records.blocks import rendered_docs, stale_blocks
from eval.records.inline import FigureError, render_inline, stale_figures


def _paired(metric: str, diff: float, low: float, high: float) -> dict:
    return {"pair": ["traces", "direct"], "metric": metric, "diff": diff, "ci_low": low, "ci_high": high}


def _stat(value: float | None, low: float, high: float) -> dict:
    return {"value": value, "ci_low": low, "ci_high": high}


RECORD = {
    "name": "demo",
    "points": [{"point": "200", "systems": [
        {"name": "traces", "figures": {"bertscore.f1": _stat(0.3391, 0.3281, 0.3502), "relevance": _stat(None, 0, 0)}},
        {"name": "direct", "figures": {"bertscore.f1": _stat(0.3652, 0.3549, 0.3762)}}],
        "paired": [_paired("bertscore_f1", -0.0266, -0.0398, -0.014), _paired("relevance", -0.0281, -0.044, -0.013)]}],
    "stages": [{"stage": "compare", "seconds": 1414.76}],
    "target": [{"system": "traces", "bertscore_drop": 0.0045, "bertscore_drop_ci": [-0.0093, 0.0176]}],
    "target_bertscore_drop": 0.02,
}  # fmt: skip
TOKENS = {
    "points.0.systems[direct].figures.bertscore.f1": "0.365 [0.355, 0.376]",  # a statistic: its interval
    "points.0.systems[name=direct].figures.bertscore.f1.value .3f": "0.365",  # a number by its spec
    "points.0.paired[traces/direct,metric=relevance]": "-0.028 [-0.044, -0.013]",  # a pair, and a field
    "points.0.paired[pair=traces/direct,metric=bertscore_f1].diff +.3f": "-0.027",
    "stages[compare].seconds ,.0f": "1,415",
    "target[traces].bertscore_drop_ci": "[-0.009, 0.018]",  # a [low, high] pair as an interval's ends
    "target_bertscore_drop g": "0.02",
}


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    records, bench = tmp_path / "records", tmp_path / "benchmarks"
    records.mkdir(), bench.mkdir()
    (records / "demo.json").write_text(json.dumps(RECORD))
    (bench / "calib.json").write_text(
        json.dumps({"own_minus_shuffled": {"diff": 0.1933, "ci_low": 0.1832, "ci_high": 0.204}, "share": 0.1034})
    )
    return records, bench


def _doc(tokens: dict[str, str], text: str = "?") -> str:
    return "# A page\n\n" + "\n".join(f"It reads <!-- fig: demo {path} -->{text}<!-- /fig --> here." for path in tokens)


def test_each_token_is_rendered_from_its_field_and_then_checks_clean(folders):
    records, bench = folders
    rendered = render_inline(_doc(TOKENS), records, "doc.md", bench)
    for path, figure in TOKENS.items():
        assert f"<!-- fig: demo {path} -->{figure}<!-- /fig --> here." in rendered
    assert stale_figures(rendered, records, "doc.md", bench) == []
    # a benchmark's JSON by `bench:`, a spec of percent; a marker may break over lines where it has spaces
    text = "a <!-- fig: bench:calib own_minus_shuffled -->x<!-- /fig --> and <!-- fig:\nbench:calib share .0f% -->"
    text = text.replace(".0f%", ".0%") + "x<!-- /fig -->, `<!-- fig: quoted in code` is not a token"
    assert render_inline(text, records, "doc.md", bench) == text.replace(">x<", ">0.193 [0.183, 0.204]<", 1).replace(
        ">x<", ">10%<"
    )


def test_a_stale_figure_is_one_line_naming_its_file_line_and_token(folders, tmp_path):
    records, bench = folders
    text = render_inline(_doc(TOKENS), records, "doc.md", bench).replace(">0.365<", ">0.366<")
    assert stale_figures(text, records, "doc.md", bench) == [
        "doc.md:4: `<!-- fig: demo points.0.systems[name=direct].figures.bertscore.f1.value .3f -->` reads '0.366', "
        "its source gives '0.365' (`python -m eval records render` rewrites it)"
    ]
    doc = tmp_path / "doc.md"  # `records render --check` names it; `records render` writes it right
    doc.write_text(text)
    assert [line.split(": `")[0] for line in stale_blocks([doc], records)] == [f"{doc}:4"]
    assert rendered_docs([doc], records)[doc][1] == text.replace(">0.366<", ">0.365<")


@pytest.mark.parametrize(
    "path, said",
    [
        ("points.0.systems[oracle].figures", "`systems[oracle]` matches 0 of its 2 items, not one"),
        ("points.0.paired[traces/direct].diff", "`paired[traces/direct]` matches 2 of its 2 items, not one"),
        ("points.0.systemz", "no `systemz` (there: point, systems, paired)"),
        ("points.0.systems", "not a figure: list"),
        ("points.3.point", "index 3 of a list of 1"),
        ("points.0.systems[traces].figures.relevance", "not a figure: a statistic without its value or interval"),
        ("stages[compare].seconds d", "`d` is no format spec for 1414.76 (e.g. `.3f`, `,.0f`, `.1%`)"),
        (
            "points.0.systems[direct",
            "`points.0.systems[direct` is not a path (keys, indexes and `[selectors]` joined by dots)",
        ),
    ],
)
def test_a_token_that_cannot_be_rendered_is_one_line_naming_file_line_and_token(folders, path, said):
    records, bench = folders
    with pytest.raises(FigureError) as err:
        render_inline(f"# A page\n\nSee <!-- fig: demo {path} -->1<!-- /fig -->.", records, "doc.md", bench)
    assert str(err.value) == f"doc.md:3: `<!-- fig: demo {path} -->`: {said}"


def test_an_unknown_source_or_a_marker_that_opens_no_token_is_one_line(folders):
    records, bench = folders
    with pytest.raises(FigureError, match=r"^doc.md:1: `<!-- fig: gone x -->`: no such record .*gone.json$"):
        render_inline("<!-- fig: gone x -->1<!-- /fig -->", records, "doc.md", bench)
    with pytest.raises(FigureError, match=r"^doc.md:2: .*no such benchmark output .*nope.json$"):
        render_inline("\n<!-- fig: bench:nope x -->1<!-- /fig -->", records, "doc.md", bench)
    with pytest.raises(FigureError, match=r"^doc.md:3: an inline figure marker that opens no token"):
        render_inline("a\n\n<!-- fig: demo target_bertscore_drop -->0.02 (no closing marker)", records, "doc.md", bench)
