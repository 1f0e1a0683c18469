"""The import mapping: which field or text section of an external chain dataset feeds which role's answer.

A mapping file (YAML; configs/import/ ships ESD-CoT's two formats) names the declared pipeline the chains
belong to, who wrote them, where each example's id, dialogue and reference reply are, and, per role of the
pipeline, where each answer field comes from:

- `field: a.b.c`: a (dotted) field of the row;
- `section: Name`: the text under the line `Name:` of the row's sectioned text (`sections:`), up to the
  next declared header, as in ESCoT's instruction format (`Emotion:\\n...\\nStrategy Reason:\\n...`);
- `quoted_label: true`: the one label of the answer field's label set that the text quotes ("..."),
  as ESD-CoT names its strategy inside the strategy reason.

`labels:` names the dialogue's gold labels beyond the emotion (`Dialogue.labels`: ESD's gold strategy), which a
comparison scores a declared label answer against (`eval.compare.answers.gold_label`).

This module owns that format and how one row is read through it (`ImportMapping.read_row`); turning rows
into traces is distill.imports.chains'.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from data_prep.config_file import load_config
from data_prep.dialogues import Speaker, Turn

_MISSING = object()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_Strict):
    """Where one value comes from: a field of the row, or a section of its sectioned text."""

    field: Optional[str] = None
    section: Optional[str] = None
    quoted_label: bool = Field(False, description="the one label of the answer's label set the text quotes")

    @model_validator(mode="after")
    def _one_place(self) -> Source:
        if (self.field is None) == (self.section is None):
            raise ValueError("a source is either `field: <name>` or `section: <header>`")
        return self

    def where(self) -> str:
        return f"field '{self.field}'" if self.field is not None else f"section '{self.section}'"


class DialogueSource(_Strict):
    """The dialogue: a field of `speaker: text` lines, or a field holding a list of turn records."""

    lines: Optional[str] = None
    turns: Optional[str] = None
    speaker_key: str = "speaker"
    text_key: str = "content"
    speakers: dict[str, Speaker] = Field(min_length=1, description="the data's speaker names -> seeker/responder")

    @model_validator(mode="after")
    def _one_form(self) -> DialogueSource:
        if (self.lines is None) == (self.turns is None):
            raise ValueError("a dialogue is either `lines: <field>` or `turns: <field>`")
        return self


class Sections(_Strict):
    field: str
    headers: list[str] = Field(min_length=1, description="the `Header:` lines that open each section")


# A name the traces carry or a field the rows are read by: whitespace alone would name nothing (or everyone).
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ImportMapping(_Strict):
    pipeline: Name = Field(description="the declared pipeline's YAML (configs/pipelines/...)")
    skip: list[str] = Field(default_factory=list, description="the pipeline's roles this data has no link for")
    teacher: Name = Field(description="who wrote the chains: the traces' model")
    format: Optional[str] = Field(None, description="a `datasets` loader (json, csv, parquet); null: by extension")
    id: Name
    dialogue: DialogueSource
    reference: Optional[Source] = Field(None, description="the reference reply (the dialogue's gold response)")
    labels: dict[str, Source] = Field(
        default_factory=dict, description="the dialogue's gold labels by name (`Dialogue.labels`), where the data has"
    )
    sections: Optional[Sections] = None
    answers: dict[str, dict[str, Source]] = Field(min_length=1, description="role -> answer field -> source")

    @model_validator(mode="after")
    def _sections_declared(self) -> ImportMapping:
        for where, source in self.sources():
            if source.section is not None and (self.sections is None or source.section not in self.sections.headers):
                raise ValueError(f"{where}: section '{source.section}' is not among `sections.headers`")
        if quoted := [name for name, source in self.labels.items() if source.quoted_label]:
            raise ValueError(f"labels.{quoted[0]}: quoted_label reads a role's label set; a gold label has none")
        return self

    def sources(self) -> list[tuple[str, Source]]:
        """Every value source, with the mapping key it sits under."""
        found = [("reference", self.reference)] if self.reference else []
        found += [(f"labels.{name}", s) for name, s in self.labels.items()]
        found += [(f"answers.{role}.{name}", s) for role, fields in self.answers.items() for name, s in fields.items()]
        return found

    def fields(self) -> list[tuple[str, str]]:
        """Every row field the mapping reads, with the mapping key that names it."""
        named = [("id", self.id), ("dialogue", self.dialogue.lines or self.dialogue.turns)]
        named += [("sections.field", self.sections.field)] if self.sections else []
        return named + [(where, s.field) for where, s in self.sources() if s.field is not None]

    # --- one row ------------------------------------------------------------------------------------

    def sections_of(self, row: dict[str, Any]) -> dict[str, str]:
        """The row's sections, header -> text (first occurrence, stripped); an empty section is absent."""
        if self.sections is None:
            return {}
        text = lookup(row, self.sections.field)
        if not isinstance(text, str):
            return {}
        alternatives = "|".join(re.escape(h) for h in self.sections.headers)
        parts = re.split(rf"^({alternatives}):[ \t]*", text, flags=re.M)
        found: dict[str, str] = {}
        for header, body in zip(parts[1::2], parts[2::2]):
            if body.strip():
                found.setdefault(header, body.strip())
        return found

    def value(self, row: dict[str, Any], sections: dict[str, str], source: Source) -> Any:
        """The source's value in this row, `_MISSING` when the row lacks it."""
        value = lookup(row, source.field) if source.field is not None else sections.get(source.section, _MISSING)
        return _MISSING if value is None or (isinstance(value, str) and not value.strip()) else value

    def turns(self, row: dict[str, Any]) -> list[Turn]:
        """The row's dialogue; ValueError naming the first turn the mapping cannot read."""
        spec = self.dialogue
        if spec.lines is not None:
            text = lookup(row, spec.lines)
            if not isinstance(text, str):
                raise ValueError(f"field '{spec.lines}' holds no text")
            records = []
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    speaker, sep, said = line.partition(": ")
                    if not sep or speaker.strip() not in spec.speakers:
                        raise ValueError(
                            f"dialogue line {number} does not open with a speaker of {sorted(spec.speakers)}"
                        )
                    records.append((speaker.strip(), said))
        else:
            raw = lookup(row, spec.turns)
            if not isinstance(raw, list):
                raise ValueError(f"field '{spec.turns}' holds no list of turns")
            records = [
                (r.get(spec.speaker_key), r.get(spec.text_key)) if isinstance(r, dict) else (None, None) for r in raw
            ]
        turns = []
        for number, (speaker, said) in enumerate(records, start=1):
            if speaker not in spec.speakers or not isinstance(said, str):
                raise ValueError(
                    f"dialogue turn {number}: speaker {speaker!r} or its text is not one the mapping reads"
                )
            turns.append(Turn(speaker=spec.speakers[speaker], text=said.strip()))
        if not turns:
            raise ValueError("the dialogue has no turns")
        return turns


def lookup(row: Any, path: str) -> Any:
    """A dotted path into nested records; None where any step is absent."""
    for part in path.split("."):
        if not isinstance(row, dict) or part not in row:
            return None
        row = row[part]
    return row


def is_missing(value: Any) -> bool:
    return value is _MISSING


def load_mapping(path: str | Path) -> ImportMapping:
    """The mapping from its YAML file (the one config reader's); ValueError in one line naming the file and field."""
    return load_config(path, ImportMapping, error=ValueError)
