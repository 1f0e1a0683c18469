"""The docs' record blocks: every `<!-- record: NAME -->` block of README.md and docs/*.md, rendered from its record.

    <!-- record: ed-400-levers -->
    (the rendered table)
    <!-- /record -->

`python -m eval records render` rewrites each block's body from `docs/records/NAME.json` (`eval.records` renders a
curve run's record, `eval.records_compare` a record of compare reports), and `--check` fails on a block that
differs, so no figure is typed by hand where a record exists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eval.records import RECORDS, ROOT, RecordError, render_record
from eval.records_compare import render_compare_summary

# `<!-- record: NAME -->`, or `<!-- record: NAME systems=a,b -->` for those systems alone (and the paper's rows), or
# `<!-- record: NAME summary -->` for a compare record's differences in one paragraph
# (a marker line may end in spaces or CRLF; any other `<!-- record:` line is an error, never skipped unchecked)
BLOCK = re.compile(
    r"(<!-- record: (?P<name>[a-z0-9_.-]+)(?: systems=(?P<systems>[a-z0-9_.,-]+))?(?P<summary> summary)? -->[ \t]*"
    r"(?P<eol>\r?\n))"
    r"(?P<body>.*?)(?P<end><!-- /record -->)",
    re.S,
)
MARKER = re.compile(r"^[ \t]*<!-- record:", re.M)  # a marker line; the docs' prose quotes one inside a line


def load_record(name: str, folder: Path = RECORDS) -> dict[str, Any]:
    path = folder / f"{name}.json"
    if not path.is_file():
        raise RecordError(f"{path}: no such record (the docs name it in a `<!-- record: {name} -->` block)")
    return json.loads(path.read_text(encoding="utf-8"))


def render_blocks(text: str, folder: Path = RECORDS, where: str = "text") -> str:
    """`text` with every record block's body rendered from its record, in the marker line's line ending; a
    `<!-- record:` line that opens no block (`where` names the file) is an error."""
    blocks = list(BLOCK.finditer(text))
    starts = {m.start() for m in blocks}
    for at in (m.end() - len("<!-- record:") for m in MARKER.finditer(text)):
        if at not in starts:
            line = text.count("\n", 0, at) + 1
            raise RecordError(
                f"{where}:{line}: a record marker that opens no block (expected `<!-- record: NAME -->` on its own "
                "line, then `<!-- /record -->`)"
            )

    def body(match: re.Match) -> str:
        only = match["systems"].split(",") if match["systems"] else None
        record = load_record(match["name"], folder)
        if match["summary"]:  # a compare record's paired differences in one paragraph (the README's line)
            rendered = render_compare_summary(record)
        else:
            rendered = render_record(record, only)
        return match.group(1) + match["eol"].join(rendered) + match["eol"] + match["end"]

    return BLOCK.sub(body, text)


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def stale_blocks(files: Iterable[Path], folder: Path = RECORDS) -> list[str]:
    """Each file whose record blocks differ from their records' rendering, with the first differing line."""
    stale = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        rendered = render_blocks(text, folder, str(path))
        if rendered != text:
            old, new = text.splitlines(), rendered.splitlines()
            line = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            stale.append(f"{path}:{line + 1}: differs from its record (`python -m eval records render` rewrites it)")
    return stale
