"""External reasoning chains -> a trace run: one `Trace` per example, each link a role's stored answer.

`import_chains` reads the rows through `datasets` (any file or saved dataset it loads), checks the mapping
against the declared pipeline and the data, and turns each row into the trace the pipeline would have written:
the same `Trace` and `Step` records with the answers validated against the roles' schemas, stored by the same
`TraceStore`. An imported step records no prompt (`messages` is empty: the external teacher's prompt is not
ours to know) and spends no generation (`attempts` 0, event `imported`).

Two kinds of bad input, two outcomes:
- the mapping does not fit the pipeline, or names a field or section that no row has, or two rows give one id
  (`one_per_id`), or an id holds a control character (`check_ids`): the import is refused (`MappingError`) before
  anything is written;
- one example is not a dialogue the pipeline can answer (an id that is not a string or an integer, no seeker
  turn): it is counted and not stored;
- one example lacks a link the pipeline declares (a missing field or section, a label outside its set, a text
  over its length) or its reference reply already sits in its dialogue (`leaked_reference`): that example's trace
  is stored as failed, naming the role and why, and counted.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from data_prep.dialogues import Dialogue
from data_prep.ed_formats import id_problem
from distill.imports.mapping import ImportMapping, Source, is_missing, lookup
from distill.pipeline.config import PipelineConfig
from distill.pipeline.stage_key import file_sha256
from distill.pipeline.store import RunInfo
from distill.pipeline.trace import Step, Trace, trace_key
from distill.quality.checks import leaked_reference
from distill.roles.declared import label_set
from distill.roles.roles import RoleSpec
from distill.version import __version__

BACKEND = "import"  # the traces' backend: stored answers, not generated ones
PROMPT_VERSION = "import"  # no prompt of ours was shown to the teacher that wrote them
IMPORTED_EVENT = "imported"
LEAKED = "dialogue: reference reply leaked into the dialogue"  # a failed trace's reason, as the report counts it
_EXTENSIONS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


class MappingError(ValueError):
    """The mapping does not fit the pipeline or the data: the whole import is refused."""


@dataclass
class ImportReport:
    rows: int = 0
    ok: int = 0
    failures: Counter = field(default_factory=Counter)  # "role: why" -> examples
    examples: dict[str, list[str]] = field(default_factory=dict)  # "role: why" -> the first example ids

    def note(self, reason: str, example: str) -> None:
        self.failures[reason] += 1
        self.examples.setdefault(reason, [])
        if len(self.examples[reason]) < 3:
            self.examples[reason].append(example)

    def lines(self) -> list[str]:
        return [
            f"failed {n}: {reason} (e.g. {', '.join(self.examples[reason])})"
            for reason, n in self.failures.most_common()
        ]


def load_rows(path: str | Path, fmt: Optional[str] = None, split: Optional[str] = None) -> list[dict[str, Any]]:
    """Every row of a file `datasets` loads (json/jsonl/csv/parquet/...) or of a saved dataset folder."""
    import datasets

    p = Path(path)
    if not p.exists():
        raise MappingError(f"{path}: no such file or folder")
    try:
        if p.is_dir():
            data = datasets.load_from_disk(str(p))
            if isinstance(data, datasets.DatasetDict):
                if split not in data:
                    raise MappingError(f"{path}: a saved DatasetDict; --split names one of {', '.join(data)}")
                data = data[split]
        else:
            builder = fmt or _EXTENSIONS.get(p.suffix.lower())
            if builder is None:
                raise MappingError(f"{path}: cannot tell its format from '{p.suffix}'; set `format:` in the mapping")
            data = datasets.load_dataset(builder, data_files=str(p), split="train")
    except MappingError:
        raise
    except Exception as exc:  # datasets raises many types for an unreadable file; all end the same way
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise MappingError(f"{path}: cannot load it with datasets ({type(exc).__name__}: {first_line})") from None
    return data.to_list()


def pipeline_config(mapping: ImportMapping, where: str) -> PipelineConfig:
    try:
        return PipelineConfig(pipeline=mapping.pipeline, skip=mapping.skip)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise MappingError(f"{where}: pipeline: {err['msg'].removeprefix('Value error, ')}") from None


def as_variant(mapping: ImportMapping, pipeline: str, where: str) -> ImportMapping:
    """The mapping with `pipeline` in place of its own, which must be it or a variant of it (`extends` it)."""
    from distill.roles.declared import base_of

    if Path(mapping.pipeline).resolve() not in (Path(pipeline).resolve(), base_of(pipeline)):
        raise MappingError(f"--pipeline {pipeline}: not {where}'s pipeline {mapping.pipeline} or a variant of it "
                           "(a variant says `extends:` it)")  # fmt: skip
    return mapping.model_copy(update={"pipeline": pipeline})


def check_mapping(mapping: ImportMapping, config: PipelineConfig, where: str) -> None:
    """Each running role gets every answer field from the mapping, and the mapping names nothing else."""
    stages, roles = config.stages(), config.roles
    for role in mapping.answers:
        if role not in stages:
            raise MappingError(f"{where}: answers.{role}: not a role this pipeline runs ({', '.join(stages)})")
    for role in stages:
        fields = set(roles[role].schema.model_fields)
        given = set(mapping.answers.get(role, {}))
        if missing := sorted(fields - given):
            raise MappingError(f"{where}: answers.{role}: no source for answer field(s) {', '.join(missing)}")
        if extra := sorted(given - fields):
            raise MappingError(f"{where}: answers.{role}: {', '.join(extra)} not an answer field of {role}")
        for name, source in mapping.answers[role].items():
            if source.quoted_label and label_set(roles[role], name) is None:
                raise MappingError(f"{where}: answers.{role}.{name}: quoted_label needs a label field")


def check_data(mapping: ImportMapping, rows: list[dict[str, Any]], where: str, data: str) -> None:
    """Every field and section the mapping names is in at least one row: a name no row has is a mapping error."""
    if not rows:
        raise MappingError(f"{data}: no rows")
    for key, name in mapping.fields():
        if all(lookup(row, name) is None for row in rows):
            raise MappingError(f"{where}: {key} names field '{name}', which no row of {data} has")
    headers = set().union(*(mapping.sections_of(row) for row in rows))
    for key, source in mapping.sources():
        if source.section is not None and source.section not in headers:
            raise MappingError(f"{where}: {key} names section '{source.section}', which no row of {data} has")


def check_ids(mapping: ImportMapping, rows: list[dict[str, Any]], data: str) -> None:
    """Every id is printable: a control character (a line break, an escape code) in one is refused, naming the row
    and the field, since the id is shown as it is in file names, log lines and reports."""
    for number, row in enumerate(rows, start=1):
        ident = lookup(row, mapping.id)
        if isinstance(ident, str) and (problem := id_problem(ident)):
            raise MappingError(f"{data} row {number}, field '{mapping.id}': {problem}; nothing written")


def to_trace(
    mapping: ImportMapping, config: PipelineConfig, row: dict[str, Any], number: int, report: ImportReport
) -> Optional[Trace]:
    """One row's trace (failed when a link is missing); None, counted, when the row has no readable dialogue."""
    sections = mapping.sections_of(row)
    try:
        dialogue = _dialogue(mapping, row, sections)
    except ValueError as exc:
        report.note(f"dialogue: {exc}", f"row {number}")
        return None
    key_config = config.key_dict()
    trace = Trace(
        key=trace_key(dialogue, key_config, BACKEND, mapping.teacher, PROMPT_VERSION),
        dialogue=dialogue,
        backend=BACKEND,
        model=mapping.teacher,
        prompt_version=PROMPT_VERSION,
        prompt_style="teacher",
        config=key_config,
    )
    if leak := leaked_reference(dialogue.gold_response, [turn.text for turn in dialogue.turns]):
        trace.failure = f"{LEAKED} ({leak})"  # its answers are still stored: `distill inspect` shows the leak too
        report.note(LEAKED, f"id {dialogue.id}")
    roles = config.roles
    for role in config.stages():
        answer, why = _answer(mapping, roles[role], row, sections)
        step = Step(role=role, messages=[], attempts=0, events=[IMPORTED_EVENT])
        if why is None:
            step.parsed, step.raw = answer, json.dumps(answer, ensure_ascii=False)
            trace.outputs[role] = answer
        else:
            step.error = f"missing link: {why}"
            if trace.failure is None:
                trace.failure = f"{role}: {step.error}"
                report.note(f"{role}: {why.split(' (got ')[0]}", f"id {dialogue.id}")
        trace.steps.append(step)
    report.ok += trace.failure is None
    return trace


def _dialogue(mapping: ImportMapping, row: dict[str, Any], sections: dict[str, str]) -> Dialogue:
    ident = _id(mapping, row)
    turns = mapping.turns(row)
    if not any(turn.speaker == "seeker" for turn in turns):
        raise ValueError("no seeker turn (nothing for the reply to answer)")
    reference = mapping.value(row, sections, mapping.reference) if mapping.reference else None
    labels = {name: mapping.value(row, sections, source) for name, source in mapping.labels.items()}
    return Dialogue(
        id=str(ident),
        conv_id=str(ident),
        turns=turns,
        situation="",  # no situation prompt: ED's, which TRACE's retrieval reads, has no counterpart here
        emotion="",  # no gold Ekman label (see docs/architecture.md, "Imported chains")
        gold_response=None if reference is None or is_missing(reference) else str(reference).strip(),
        labels={name: str(value).strip() for name, value in labels.items() if not is_missing(value)},
    )


def _id(mapping: ImportMapping, row: dict[str, Any]) -> str:
    """The row's id as text; ValueError unless it is a non-empty string or an integer (a record or a list would be
    stored as its Python repr, and a bool or a float is no one's id)."""
    ident = lookup(row, mapping.id)
    if ident is None:
        raise ValueError(f"no id in field '{mapping.id}'")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        raise ValueError(f"id field '{mapping.id}' holds a {type(ident).__name__}, not a string or an integer")
    if not str(ident).strip():
        raise ValueError(f"id field '{mapping.id}' is empty")
    return str(ident).strip()


def one_per_id(numbered: list[tuple[int, dict[str, Any], Trace]], data: str) -> list[Trace]:
    """The traces of (row number, row, trace), refused (`MappingError` naming both rows) when two rows give one id:
    with different content, a trace is keyed by its dialogue and one row would silently stand for both; as an
    exact repeat, the file is likely two files joined (the mixed runs this command guards against)."""
    first: dict[str, tuple[int, dict[str, Any], Trace]] = {}
    for number, row, trace in numbered:
        ident = trace.dialogue.id
        if ident not in first:
            first[ident] = (number, row, trace)
            continue
        earlier, earlier_row, earlier_trace = first[ident]
        if row == earlier_row:
            what = "the same content (a repeated row)"
        else:
            what = "different dialogues" if trace.dialogue != earlier_trace.dialogue else "different chains"
        raise MappingError(
            f"{data}: rows {earlier} and {number} share the id {ident!r} with {what}; one id is one dialogue, "
            "nothing written"
        )
    return [trace for _, _, trace in numbered]


def _answer(
    mapping: ImportMapping, spec: RoleSpec, row: dict[str, Any], sections: dict[str, str]
) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """The role's answer from the row, validated against its schema, or (None, which link is missing and why)."""
    answer = {}
    for name, source in mapping.answers[spec.name].items():
        value = mapping.value(row, sections, source)
        if is_missing(value):
            return None, f"{name}: no {source.where()}"
        answer[name], why = _label(spec, name, value, source) if source.quoted_label else (value, None)
        if why:
            return None, f"{name}: {why}"
    try:
        return spec.schema.model_validate(answer).model_dump(), None
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        got = str(err.get("input"))[:60]
        return None, f"{name}: {err['msg'].lower()}" + (f" (got {got!r})" if err["type"] == "literal_error" else "")


def _label(spec, name: str, value: Any, source: Source) -> tuple[Optional[str], Optional[str]]:
    label, why = quoted_label(str(value), label_set(spec, name))
    return label, (None if label else f"its {source.where()} {why}")


def quoted_label(text: str, labels: tuple[str, ...]) -> tuple[Optional[str], str]:
    """The one label of `labels` that `text` quotes ("...", case and closing punctuation aside), else (None, why).

    ESD-CoT names its strategy this way inside the strategy reason; a variant spelling is no label."""
    canon = {label.lower(): label for label in labels}
    quoted = (q.strip().rstrip(".,;:!?").lower() for q in re.findall(r'"([^"\n]{1,80})"', text))
    named = {canon[q] for q in quoted if q in canon}
    if len(named) == 1:
        return named.pop(), ""
    if named:
        return None, f"quotes {len(named)} labels ({', '.join(sorted(named))})"
    return None, "quotes no label of its set"


def run_info(mapping: ImportMapping, config: PipelineConfig, mapping_path: Path, data: Path, split: Optional[str]):
    """run.json of an imported run: the pipeline, who wrote the chains, and the file and mapping they came from."""
    return RunInfo(
        pipeline=config.key_dict(),
        backend_name=BACKEND,
        model=mapping.teacher,
        prompt_version=PROMPT_VERSION,
        backend={"type": BACKEND},
        trace_distill_version=__version__,
        split=split,
        source={
            "data": str(data.resolve()),
            "data_sha256": _sha256(data),
            "mapping": str(mapping_path),
            "mapping_sha256": _sha256(mapping_path),
            "mapping_content": mapping.model_dump(exclude_defaults=True),
        },
    )


def _sha256(path: Path) -> str:
    """A file's sha256; a saved dataset folder's: that of its files' names and sha256s, in name order."""
    if not path.is_dir():
        return file_sha256(path)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return hashlib.sha256(
        json.dumps([[f.relative_to(path).as_posix(), file_sha256(f)] for f in files]).encode()
    ).hexdigest()
