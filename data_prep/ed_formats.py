"""Row-level parsing of the two EmpatheticDialogues layouts into `Dialogue` records.

- ``ed``: the original release (``conv_id, utterance_idx, context, prompt, speaker_idx, utterance,
  selfeval, tags``), one row per utterance, commas written ``_comma_``. One conversation yields one
  example per listener (even ``utterance_idx``) turn.
- ``trace``: the TRACE-prepared CSV (``utterances, prompt, emotion_id, gold_response``), one row per
  example, turns as ``seeker: ``/``responder: `` lines, ``emotion_id`` indexing ``taxonomy.EKMAN``.

Rows arrive as ``(row_number, dict)`` from any source (a CSV file, a ``datasets`` split), so the same
checks apply everywhere. Bad input raises one ``DataError`` line naming file, row and column; with
``skip_invalid`` the row (or conversation) is recorded in ``skipped`` instead. Nothing is dropped
silently.
"""

from __future__ import annotations

import csv
import hashlib
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from data_prep.dialogues import Dialogue, Turn
from data_prep.taxonomy import EKMAN, to_ekman

ED_COLUMNS = ("conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags")
# The columns we actually read; `speaker_idx`, `selfeval` and `tags` are carried by ED but unused,
# so a copy that dropped them (several hub mirrors do) still loads.
ED_REQUIRED = ("conv_id", "utterance_idx", "context", "prompt", "utterance")
TRACE_COLUMNS = ("utterances", "prompt", "emotion_id", "gold_response")
FORMATS = ("ed", "trace")
_TURN_PREFIX = re.compile(r"^(seeker|responder):\s?(.*)$")
# Lone surrogates are how `errors="surrogateescape"` carries undecodable bytes through to us.
_SURROGATE = re.compile("[\udc80-\udcff]")
# C0 control characters (NUL, ESC, ...) but tab and line breaks: no text holds them, a binary file does.
# C1 controls are left alone: mojibake such as '\x83' occurs in real ED text.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# In an id every control character, tab, line breaks and C1 included: an id is one printable token that file
# names, log lines and reports show as it is (a line break in one forges a line; an escape code recolours it).
_ID_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

Row = tuple[int, dict]


class DataError(ValueError):
    """Bad input; the message is one line: '<file> row <n>, column '<col>': <reason>'."""

    def __init__(self, file: str, row: Optional[int], column: Optional[str], reason: str):
        self.file, self.row, self.column, self.reason = file, row, column, reason
        where = file + (f" row {row}" if row is not None else "") + (f", column '{column}'" if column else "")
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class SizeLimits:
    """The largest dialogue accepted. A longer one is later cut to the model's context, and one
    300,000-character dialogue took minutes to run; `data_prep dialogues --max-chars/--max-turns` change them."""

    max_chars: int = 8000
    max_turns: int = 64

    def check(self, turns: Sequence[Turn], file: str, row: int, column: str) -> None:
        chars = sum(len(t.text) for t in turns)
        if len(turns) > self.max_turns:
            raise DataError(file, row, column, f"{len(turns)} turns, over the limit of {self.max_turns} (--max-turns)")
        if chars > self.max_chars:
            reason = f"{chars:,} characters of dialogue, over the limit of {self.max_chars:,} (--max-chars)"
            raise DataError(file, row, column, reason)


def control_character(text: str, pattern: re.Pattern = _CONTROL) -> Optional[str]:
    """The first C0 control character of `text` (not tab or a line break) as 'U+0000', or None."""
    found = pattern.search(text)
    return f"U+{ord(found.group()):04X}" if found else None


def id_problem(ident: str) -> Optional[str]:
    """Why `ident` cannot be an id (a control character, tab and line breaks included), or None."""
    if code := control_character(ident, _ID_CONTROL):
        return f"control character {code} in the id (an id is printable: no tab, line break or escape)"
    return None


def visible(text: str) -> bool:
    """False for text that prints nothing: whitespace and zero-width or other format characters (Cf)."""
    return any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in text)


def text_problem(text: str) -> Optional[str]:
    """Why non-empty `text` is not usable dialogue text (a control character, nothing visible), or None."""
    if code := control_character(text):
        return f"control character {code} in the text (is this a text file?)"
    if text and not visible(text):
        return "no visible text (only whitespace or zero-width characters)"
    return None


@dataclass
class SkippedRecord:
    """One row or conversation left out under --skip-invalid, and why."""

    file: str
    row: Optional[int]
    column: Optional[str]
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def detect_format(columns: Iterable[str], file: str) -> str:
    """'ed' or 'trace' from a header; DataError naming the missing columns when neither fits."""
    cols = {c.strip() for c in columns}
    if set(TRACE_COLUMNS) <= cols:
        return "trace"
    if set(ED_REQUIRED) <= cols:
        return "ed"
    missing_ed = [c for c in ED_REQUIRED if c not in cols]
    raise DataError(
        file,
        1,
        missing_ed[0],
        f"missing column '{missing_ed[0]}': the header matches neither the ED "
        f"release ({', '.join(ED_COLUMNS)}) nor the TRACE CSV ({', '.join(TRACE_COLUMNS)})",
    )


def check_columns(columns: Iterable[str], fmt: str, file: str) -> None:
    cols = {c.strip() for c in columns}
    for col in ED_REQUIRED if fmt == "ed" else TRACE_COLUMNS:
        if col not in cols:
            raise DataError(file, 1, col, f"missing column '{col}' (needed by the {fmt} format)")


def raise_csv_field_limit() -> None:
    """Let one CSV field be as long as a Python string can be: the csv module's default of 131,072
    characters ends the read of a file with one long field in a `_csv.Error` traceback."""
    csv.field_size_limit(2**31 - 1)


def read_csv_rows(path: Path) -> tuple[list[str], Iterator[Row]]:
    """Header and (row_number, dict) rows of a CSV; row 1 is the header, as in a spreadsheet.

    Rows with more fields than the header (the ED release has some) keep the header's columns and
    drop the overflow; undecodable bytes are reported by `clean_field` with their row and column.
    """
    raise_csv_field_limit()
    # utf-8-sig: a BOM is dropped before the csv module sees the header, so a quoted first name still parses
    handle = open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")
    reader = csv.reader(handle)
    try:
        header = [h.strip().lstrip("\ufeff") for h in next(reader)]
    except StopIteration:
        handle.close()
        raise DataError(str(path), None, None, "the file is empty (no header row)") from None
    for column in header:
        if _SURROGATE.search(column) or _CONTROL.search(column):
            handle.close()
            # the header is not echoed: from a binary file it is raw bytes, escape codes included
            raise DataError(str(path), 1, None, "non-UTF-8 bytes or control characters in the header (is it a CSV?)")

    def rows() -> Iterator[Row]:
        with handle:
            for number, fields in enumerate(reader, start=2):
                if not any(f.strip() for f in fields):
                    continue  # blank line, e.g. a trailing newline
                yield number, dict(zip(header, fields + [None] * (len(header) - len(fields))))

    return header, rows()


def undecodable(text: str) -> bool:
    """True when `text` holds bytes that were not UTF-8 (kept as surrogates by `read_csv_rows`)."""
    return bool(_SURROGATE.search(text))


def clean_field(value, file: str, row: int, column: str, *, required: bool = True) -> str:
    """A field as clean text: ED escapes undone, surrounding space stripped, bad bytes rejected."""
    if value is None:
        raise DataError(file, row, column, "the row ends before this column")
    text = str(value)
    if _SURROGATE.search(text):
        raise DataError(file, row, column, "non-UTF-8 bytes (save the file as UTF-8)")
    text = text.replace("_comma_", ",").replace("_pipe_", "|").strip()
    problem = text_problem(text)
    if problem:
        raise DataError(file, row, column, problem)
    if required and not text:
        raise DataError(
            file,
            row,
            column,
            "empty utterance" if column in ("utterance", "utterances", "gold_response") else f"empty {column}",
        )
    return text


def _fine_and_ekman(label: str, file: str, row: int, column: str) -> tuple[Optional[str], str]:
    try:
        ekman = to_ekman(label)
    except ValueError:
        raise DataError(file, row, column, f"unknown emotion label '{label}'") from None
    fine = label.strip().lower()
    return (None if fine in EKMAN else fine), ekman


@dataclass
class _EDUtterance:
    row: int
    index: int
    text: str


def _ed_conversations(rows: Iterable[Row], file: str, skipped: Optional[list]) -> Iterator[tuple[str, list, dict]]:
    """Group ED rows by conv_id (in file order), validating each row; yields (conv_id, utterances, meta)."""
    convs: dict[str, tuple[list[_EDUtterance], dict]] = {}
    bad_convs: set[str] = set()
    for number, raw in rows:
        conv_id = str(raw.get("conv_id") or "").strip()
        try:
            conv_id = clean_field(raw.get("conv_id"), file, number, "conv_id")
            if problem := id_problem(conv_id):
                raise DataError(file, number, "conv_id", problem)
            index_text = clean_field(raw.get("utterance_idx"), file, number, "utterance_idx")
            if not index_text.lstrip("-").isdigit():
                raise DataError(file, number, "utterance_idx", f"not an integer: '{index_text}'")
            label = clean_field(raw.get("context"), file, number, "context")
            fine, ekman = _fine_and_ekman(label, file, number, "context")
            situation = clean_field(raw.get("prompt"), file, number, "prompt")
            text = clean_field(raw.get("utterance"), file, number, "utterance")
        except DataError as err:
            if skipped is None:
                raise
            skipped.append(SkippedRecord(err.file, err.row, err.column, err.reason))
            bad_convs.add(conv_id)  # a conversation with a hole in it would give a wrong context
            continue
        utterances, meta = convs.setdefault(
            conv_id, ([], {"fine": fine, "ekman": ekman, "situation": situation, "row": number, "seen": {}})
        )
        first = meta["seen"].setdefault(int(index_text), number)
        if first != number:  # a repeated row would add its turn to the context a second time
            _skip_duplicate(skipped, file, number, f"utterance_idx {index_text} of '{conv_id}'", first)
            continue
        utterances.append(_EDUtterance(number, int(index_text), text))
    for conv_id, (utterances, meta) in convs.items():
        if conv_id in bad_convs:
            skipped.append(
                SkippedRecord(
                    file, meta["row"], "conv_id", f"conversation '{conv_id}' skipped: one of its rows is invalid"
                )
            )
            continue
        yield conv_id, sorted(utterances, key=lambda u: u.index), meta


def _skip_duplicate(skipped: Optional[list], file: str, row: int, what: str, first_row: int) -> None:
    """Duplicates are dropped whether or not invalid rows are skipped, and always reported: in the skip
    report under --skip-invalid, else as a warning line."""
    record = SkippedRecord(file, row, None, f"duplicate of row {first_row} ({what}): dropped")
    if skipped is not None:
        skipped.append(record)
    else:
        print(f"warning: {record.file} row {row}: {record.reason}", file=sys.stderr)


def ed_dialogues(
    rows: Iterable[Row], file: str, skipped: Optional[list] = None, limits: SizeLimits = SizeLimits()
) -> list[Dialogue]:
    """Dialogues from original-ED rows: one per listener turn, context ending on the seeker turn before it."""
    out: list[Dialogue] = []
    for conv_id, utterances, meta in _ed_conversations(rows, file, skipped):
        turns = [Turn(speaker="seeker" if u.index % 2 else "responder", text=u.text) for u in utterances]
        examples = [
            i for i, u in enumerate(utterances) if u.index % 2 == 0 and i > 0 and turns[i - 1].speaker == "seeker"
        ]
        if not examples:
            reason = f"conversation '{conv_id}' has no listener turn (even utterance_idx) after a seeker turn"
            _skip_or_raise(DataError(file, meta["row"], "utterance_idx", reason), skipped)
            continue
        for i in examples:
            try:
                limits.check(turns[:i], file, utterances[i - 1].row, "utterance")
            except DataError as err:
                _skip_or_raise(err, skipped)
                continue
            out.append(
                Dialogue(
                    id=f"{conv_id}#{utterances[i].index}",
                    conv_id=conv_id,
                    turns=turns[:i],
                    situation=meta["situation"],
                    emotion=meta["ekman"],
                    emotion_fine=meta["fine"],
                    gold_response=utterances[i].text,
                )
            )
    return out


def _skip_or_raise(err: DataError, skipped: Optional[list]) -> None:
    """Under --skip-invalid (a `skipped` list) the error is recorded there; otherwise it is raised."""
    if skipped is None:
        raise err
    skipped.append(SkippedRecord(err.file, err.row, err.column, err.reason))


def _trace_turns(text: str, file: str, row: int) -> list[Turn]:
    turns: list[Turn] = []
    for line in text.splitlines():
        match = _TURN_PREFIX.match(line.strip())
        if match:
            turns.append(Turn(speaker=match.group(1), text=match.group(2).strip()))
        elif turns and line.strip():
            # A turn that wraps onto a line with no prefix still belongs to the turn above it.
            turns[-1] = Turn(speaker=turns[-1].speaker, text=f"{turns[-1].text} {line.strip()}")
        elif line.strip():
            raise DataError(file, row, "utterances", "the first line must start with 'seeker: ' or 'responder: '")
    for turn in turns:
        if not visible(turn.text):
            raise DataError(file, row, "utterances", f"empty utterance (a '{turn.speaker}:' line has no visible text)")
    if not turns or turns[-1].speaker != "seeker":
        raise DataError(file, row, "utterances", "the dialogue must end on a 'seeker: ' turn")
    return turns


def _trace_row(number: int, raw: dict, file: str) -> Dialogue:
    turns = _trace_turns(clean_field(raw.get("utterances"), file, number, "utterances"), file, number)
    situation = clean_field(raw.get("prompt"), file, number, "prompt")
    label = clean_field(raw.get("emotion_id"), file, number, "emotion_id")
    index = label[:-2] if label.endswith(".0") else label  # pandas writes integer columns with NaNs as floats
    fine = None
    if index.isdigit() and int(index) < len(EKMAN):
        emotion = EKMAN[int(index)]
    else:  # also accept an Ekman or ED name, which some re-exports write instead of the index
        fine, emotion = _fine_and_ekman(label, file, number, "emotion_id")
    gold = clean_field(raw.get("gold_response"), file, number, "gold_response")
    example_id = content_id(situation, turns)
    return Dialogue(
        id=example_id,
        conv_id=example_id,
        turns=turns,
        situation=situation,
        emotion=emotion,
        emotion_fine=fine,
        gold_response=gold,
    )


def content_id(situation: str, turns: Sequence[Turn], prefix: str = "trace") -> str:
    """A conversation id from its situation and utterances, so two files never give one id to different
    dialogues and the same dialogue gets the same id in every file (positional ids collided across
    files). The situation is part of it because short openings ("seeker: I'm so happy!") recur across
    conversations."""
    lines = [" ".join(situation.split())] + [f"{t.speaker}: {' '.join(t.text.split())}" for t in turns]
    return f"{prefix}-{hashlib.sha256(chr(10).join(lines).encode('utf-8')).hexdigest()[:16]}"


def trace_dialogues(
    rows: Iterable[Row], file: str, skipped: Optional[list] = None, limits: SizeLimits = SizeLimits()
) -> list[Dialogue]:
    """Dialogues from TRACE-prepared rows, one per row, ids from content (`content_id`).

    A row whose dialogue already appeared is dropped and reported, so no conversation can land in
    two splits.
    """
    out: list[Dialogue] = []
    first_row: dict[str, int] = {}
    for number, raw in rows:
        try:
            dialogue = _trace_row(number, raw, file)
            limits.check(dialogue.turns, file, number, "utterances")
        except DataError as err:
            _skip_or_raise(err, skipped)
            continue
        first = first_row.setdefault(dialogue.conv_id, number)
        if first != number:
            _skip_duplicate(skipped, file, number, "same situation and utterances", first)
            continue
        out.append(dialogue)
    return out
