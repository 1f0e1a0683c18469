"""The docs' inline figures: a figure in a paragraph, rendered from one field of a record, like the record blocks.

    consensus falls <!-- fig: ed-1010-guards target[student-t1-mbr8].bertscore_drop .3f -->0.004<!-- /fig -->

`<!-- fig: SOURCE PATH [SPEC] -->`: SOURCE is a record (`docs/records/NAME.json`) or `bench:NAME`
(`benchmarks/NAME.json`); PATH walks it by key (`figures.bertscore.f1`: a key may hold dots), list index (`points.0`)
or selector (`systems[direct]`: the one item whose name, system, point or stage is `direct`, or pair is;
`paired[pair=traces/direct,metric=relevance]`: the one item with each field so, a list joined by `/`). A
statistic (value or diff, with ci_low and ci_high) renders as its interval, a `[low, high]` pair as one, a number as
the tables print it or by SPEC (Python's format spec: `.3f`, `+.3f`, `,.0f`, `.1%`). `python -m eval records
render` rewrites the text between the markers and `--check` names each token whose text differs; the marker may
break over lines where it has spaces.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from eval.compare.markdown import fmt, interval
from eval.records.compare import RecordFileError, read_json_object
from eval.records.curve import RECORDS, ROOT, RecordError

BENCHMARKS = ROOT / "benchmarks"
TOKEN = re.compile(
    r"(?<!`)(?P<open><!-- fig:\s+(?P<source>(?:bench:)?[a-z0-9_.-]+)\s+(?P<path>\S+?)"
    r"(?:\s+(?P<spec>[+,.\d%fdg]+))?\s*-->)(?P<text>[^<\n]*)(?P<close><!-- /fig -->)"
)
OPENER = re.compile(r"(?<!`)<!-- fig:")  # every opener must start a token: a mistyped one would go unchecked
PART = re.compile(r"(?P<key>[^.\[\]]*)(?P<select>\[[^\]]+\])?(?:\.|$)")
ID_KEYS = ("name", "system", "point", "stage", "pair")  # what `[x]` matches (a pair as `a/b`)


class FigureError(RecordError):
    """A token that cannot be rendered; the message names the token."""


def render_inline(text: str, folder: Path = RECORDS, where: str = "text", benchmarks: Path = BENCHMARKS) -> str:
    """`text` with every inline token's figure rendered from its source; a token that cannot be is an error naming
    `where`, the line and the token."""
    return _each(text, folder, where, benchmarks, lambda match, figure: figure)


def stale_figures(text: str, folder: Path = RECORDS, where: str = "text", benchmarks: Path = BENCHMARKS) -> list[str]:
    """One line per token whose text is not its source's figure, naming the file, line and token."""
    stale: list[str] = []

    def note(match: re.Match, figure: str) -> str:
        if match["text"] != figure:
            stale.append(f"{where}:{_line(text, match.start())}: `{_said(match)}` reads {match['text']!r}, its source "
                         f"gives {figure!r} (`python -m eval records render` rewrites it)")  # fmt: skip
        return figure

    _each(text, folder, where, benchmarks, note)
    return stale


def _each(text: str, folder: Path, where: str, benchmarks: Path, keep: Any) -> str:
    starts = {m.start("open") for m in TOKEN.finditer(text)}
    for opener in OPENER.finditer(text):
        if opener.start() not in starts:
            raise FigureError(f"{where}:{_line(text, opener.start())}: an inline figure marker that opens no token "
                              "(expected `<!-- fig: SOURCE PATH [SPEC] -->FIGURE<!-- /fig -->`)")  # fmt: skip
    sources: dict[str, dict[str, Any]] = {}

    def render(match: re.Match) -> str:
        try:
            figure = _figure(_source(match["source"], folder, benchmarks, sources), match["path"], match["spec"])
        except (RecordError, RecordFileError) as err:
            raise FigureError(f"{where}:{_line(text, match.start())}: `{_said(match)}`: {err}") from None
        return match["open"] + keep(match, figure) + match["close"]

    return TOKEN.sub(render, text)


def _source(source: str, folder: Path, benchmarks: Path, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if source not in cache:
        bench = source.startswith("bench:")
        path = benchmarks / f"{source[6:]}.json" if bench else folder / f"{source}.json"
        if not path.is_file():
            raise RecordFileError(f"no such {'benchmark output' if bench else 'record'} {path}")
        cache[source] = read_json_object(path, "a benchmark's JSON" if bench else "a record")
    return cache[source]


def _figure(data: Any, path: str, spec: Optional[str]) -> str:
    matches = [m for m in PART.finditer(path) if m.group(0)]
    if "".join(m.group(0) for m in matches) != path:
        raise RecordError(f"`{path}` is not a path (keys, indexes and `[selectors]` joined by dots)")
    node, parts = data, [(m["key"], m["select"]) for m in matches]
    while parts:
        node, parts = _step(node, parts)
    return _shown(node, spec)


def _step(node: Any, parts: list[tuple[str, Optional[str]]]) -> tuple[Any, list]:
    """One key (the longest run of parts that is a key: a figure's key holds dots), index or selector further."""
    key, select = parts[0]
    if isinstance(node, list) and key.isdigit() and not select:
        if int(key) >= len(node):
            raise RecordError(f"index {key} of a list of {len(node)}")
        return node[int(key)], parts[1:]
    if not isinstance(node, dict):
        raise RecordError(f"`{key}` asked of {type(node).__name__}, not an object")
    for end in range(len(parts), 0, -1):
        name = ".".join(k for k, _ in parts[:end])
        if name in node and all(s is None for _, s in parts[: end - 1]):
            value = node[name]
            chosen = _select(value, parts[end - 1][1], name) if parts[end - 1][1] else value
            return chosen, parts[end:]
    raise RecordError(f"no `{key}` (there: {', '.join(map(str, node)) or 'nothing'})")


def _select(items: Any, select: str, name: str) -> Any:
    """The one item of `items` that `[x]` or `[k=v,k2=v2]` picks."""
    if not isinstance(items, list):
        raise RecordError(f"`{name}{select}`: `{name}` is not a list")
    wanted = [cond.split("=", 1) if "=" in cond else (None, cond) for cond in select[1:-1].split(",")]
    found = [item for item in items if isinstance(item, dict) and all(_holds(item, k, v) for k, v in wanted)]
    if len(found) != 1:
        raise RecordError(f"`{name}{select}` matches {len(found)} of its {len(items)} items, not one")
    return found[0]


def _holds(item: dict[str, Any], key: Optional[str], value: str) -> bool:
    def text(v: Any) -> str:
        return "/".join(map(str, v)) if isinstance(v, list) else str(v)

    keys = ID_KEYS if key is None else (key,)
    return any(k in item and text(item[k]) == value for k in keys)


def _shown(node: Any, spec: Optional[str]) -> str:
    """A statistic as its interval, a [low, high] pair as one, a number as the tables print it or by `spec`."""

    def number(v: Any) -> str:
        try:
            return format(v, spec) if spec else fmt(v)
        except ValueError:
            raise RecordError(f"`{spec}` is no format spec for {v!r} (e.g. `.3f`, `,.0f`, `.1%`)") from None

    if isinstance(node, dict) and {"ci_low", "ci_high"} <= node.keys() and ("value" in node or "diff" in node):
        value, low, high = node.get("value", node.get("diff")), node["ci_low"], node["ci_high"]
        if not all(map(_is_number, (value, low, high))):
            raise RecordError("not a figure: a statistic without its value or interval")
        return f"{number(value)} [{number(low)}, {number(high)}]" if spec else interval(value, low, high)
    if isinstance(node, list) and len(node) == 2 and all(_is_number(v) for v in node):
        return f"[{number(node[0])}, {number(node[1])}]" if spec else interval(node[0], *node).split(" ", 1)[1]
    if _is_number(node):
        return number(node)
    if isinstance(node, str):
        return node
    raise RecordError(f"not a figure: {'null' if node is None else type(node).__name__}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _said(match: re.Match) -> str:
    return " ".join(match["open"].split())


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1
