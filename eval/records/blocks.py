"""The docs' record blocks: every `<!-- record: NAME -->` block of README.md and docs/*.md, rendered from its record.

    <!-- record: ed-400-levers -->
    (the rendered table)
    <!-- /record -->

`python -m eval records render` rewrites each block's body from `docs/records/NAME.json` (`eval.records.curve` renders a
curve run's record, `eval.records.compare` a record of compare reports, `eval.records.students` an `eval students`
run's, `eval.records.labels` one of `benchmarks/label_decoding.py` runs), and `--check` fails on a block that
differs, so no figure is typed by hand where a record exists. A figure in a paragraph is an inline token of
`eval.records.inline`, rendered and checked with the blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eval.records.compare import (
    COMPARE_RECORD_FIELDS,
    CompareRecordError,
    RecordFileError,
    read_json_object,
    read_utf8,
    render_compare_summary,
    require_fields,
)
from eval.records.curve import RECORD_FILE_FIELDS, RECORDS, ROOT, RecordError, render_record
from eval.records.inline import render_inline, stale_figures
from eval.records.labels import LABELS_RECORD_FIELDS, render_labels_record, render_labels_summary
from eval.records.students import STUDENTS_RECORD_FIELDS, render_students_record, render_students_summary

RECORD_NAME = re.compile(r"[a-z0-9_.-]+")  # a record's name, as a block's marker can name it
# `<!-- record: NAME -->`, or `<!-- record: NAME systems=a,b -->` for those systems alone (a curve record's: and the
# paper's rows; a students record's: and the paired rows between them), or
# `<!-- record: NAME summary -->` for a compare, students or labels record in one paragraph
# (a marker line may end in spaces or CRLF; any other `<!-- record:` line is an error, never skipped unchecked)
BLOCK = re.compile(
    rf"(<!-- record: (?P<name>{RECORD_NAME.pattern})(?: systems=(?P<systems>[a-z0-9_.,-]+))?(?P<summary> summary)?"
    r" -->[ \t]*(?P<eol>\r?\n))"
    r"(?P<body>.*?)(?P<end><!-- /record -->)",
    re.S,
)
# the kinds with a summary
SUMMARIES = {"compare": render_compare_summary, "students": render_students_summary, "labels": render_labels_summary}
KIND_FIELDS = {"compare": COMPARE_RECORD_FIELDS, "students": STUDENTS_RECORD_FIELDS, "labels": LABELS_RECORD_FIELDS}
RENDERERS = {"labels": render_labels_record}  # a kind's own full block (a students record's: below, with `systems=`)
MARKER = re.compile(r"^[ \t]*<!-- record:", re.M)  # a marker line; the docs' prose quotes one inside a line
CLOSER = re.compile(r"^[ \t]*<!-- /record -->", re.M)  # a closing line, which must end a block


def load_record(name: str, folder: Path = RECORDS) -> dict[str, Any]:
    """The record `folder/NAME.json`, checked for what its rendering reads (a curve run's, `kind: compare`,
    `kind: students` or `kind: labels`)."""
    path = folder / f"{name}.json"
    if not path.is_file():
        raise RecordError(f"{path}: no such record (the docs name it in a `<!-- record: {name} -->` block)")
    record = read_json_object(path, "a record")
    fields = KIND_FIELDS.get(record.get("kind"))
    require_fields(record, path, "a record", fields or RECORD_FILE_FIELDS)
    return record


def render_blocks(text: str, folder: Path = RECORDS, where: str = "text") -> str:
    """`text` with every record block's body rendered from its record, in the marker line's line ending; a
    `<!-- record:` line that opens no block, a `<!-- /record -->` line that closes none, and a block its record
    cannot render are errors naming `where` (the file) and the line."""
    _check_markers(text, list(BLOCK.finditer(text)), where)

    def body(match: re.Match) -> str:
        try:
            rendered = _render_block(match, folder)
        except (RecordError, RecordFileError, CompareRecordError) as err:
            raise RecordError(f"{where}:{_line(text, match.start())}: {err}") from None
        return match.group(1) + match["eol"].join(rendered) + match["eol"] + match["end"]

    return BLOCK.sub(body, text)


def _render_block(match: re.Match, folder: Path) -> list[str]:
    record = load_record(match["name"], folder)
    summary = SUMMARIES.get(record.get("kind"))
    if match["summary"] and (match["systems"] or not summary):
        raise RecordError(
            f"record '{match['name']}': `summary` renders a compare, students or labels record's paragraph alone"
        )
    if match["summary"]:  # its figures in one paragraph (the README's line)
        return summary(record)
    only = match["systems"].split(",") if match["systems"] else None
    if only and summary and record["kind"] != "students":
        raise RecordError(
            f"record '{match['name']}' is a {record['kind']} record: it renders every system, not `systems=`"
        )
    if record.get("kind") == "students":  # `systems=`: those systems and their paired rows
        return render_students_record(record, only)
    if record.get("kind") in RENDERERS:
        return RENDERERS[record["kind"]](record)
    return render_record(record, only)


def _check_markers(text: str, blocks: list[re.Match], where: str) -> None:
    """Every marker line opens a block and every closing line ends one: a block whose marker was deleted would
    otherwise keep its old text unchecked."""
    starts, ends = {m.start() for m in blocks}, {m.start("end") for m in blocks}
    for at in (m.end() - len("<!-- record:") for m in MARKER.finditer(text)):
        if at not in starts:
            raise RecordError(
                f"{where}:{_line(text, at)}: a record marker that opens no block (expected `<!-- record: NAME -->` on "
                "its own line, then `<!-- /record -->`)"
            )
    for at in (m.end() - len("<!-- /record -->") for m in CLOSER.finditer(text)):
        if at not in ends:
            raise RecordError(
                f"{where}:{_line(text, at)}: a `<!-- /record -->` that closes no block (its `<!-- record: NAME -->` "
                "line is missing)"
            )


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def rendered_docs(files: Iterable[Path], folder: Path = RECORDS) -> dict[Path, tuple[str, str]]:
    """Each file's text and its text with every block and inline figure rendered: all of them, before anything is
    written."""
    texts = {path: read_utf8(path, "a UTF-8 doc") for path in files}
    return {path: (text, render_inline(render_blocks(text, folder, str(path)), folder, str(path)))
            for path, text in texts.items()}  # fmt: skip


def stale_blocks(files: Iterable[Path], folder: Path = RECORDS) -> list[str]:
    """Each file whose record blocks differ from their records' rendering, with the first differing line, and each
    inline figure that differs from its source."""
    stale = []
    for path, (text, rendered) in rendered_docs(files, folder).items():
        if rendered == text:
            continue
        stale += stale_figures(text, folder, str(path))
        blocks = render_blocks(text, folder, str(path))
        if blocks != text:
            old, new = text.splitlines(), blocks.splitlines()
            line = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            stale.append(f"{path}:{line + 1}: differs from its record (`python -m eval records render` rewrites it)")
    return stale
