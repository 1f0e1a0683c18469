"""The trace store: one run directory, append-only, content-addressed by trace key.

Layout of a run directory:

    run.json       what produced the traces (`RunInfo`: pipeline config, backend, prompt version, split,
                   source), written once; a later run with a different config is refused
    traces.jsonl   one `Trace` per line, appended, flushed and fsynced one at a time
    quality.json   what `distill inspect` found (written and read by distill.quality.report, not by the store)

A crash (even `kill -9`) can at worst leave a partial last line: the reader skips and reports it,
and the next writer cuts it off before appending, so no record is ever corrupt and at most the
work in flight is lost. Duplicate keys resolve to the first record.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass

from distill.pipeline.trace import Trace

TRACES_FILE = "traces.jsonl"
RUN_FILE = "run.json"
# The parts of run.json that decide what a trace contains; a mismatch means the run dir is another run.
_IDENTITY_FIELDS = ("pipeline", "backend_name", "model", "prompt_version")


class StoreError(ValueError):
    """A run directory that cannot take these traces; the message names the file and the field."""


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class RunInfo:
    """What run.json records. `TraceStore.claim` is its one writer and `TraceStore.run_info` its one reader;
    `Pipeline.run_info` makes it for `distill generate`, `distill batch` and `eval compare` alike."""

    pipeline: dict[str, Any]  # PipelineConfig.key_dict(): with the next three, the run's identity
    backend_name: str
    model: str
    prompt_version: str
    backend: dict[str, Any] = Field(default_factory=dict)  # the backend's describe(), which holds no secret
    trace_distill_version: str = "0+unknown"
    split: Optional[str] = None  # the dialogue split the run was made on (`distill datasets --split`)
    source: dict[str, Any] = Field(default_factory=dict)  # where the dialogues came from: path, index, via
    system: Optional[dict[str, Any]] = None  # the `eval compare` system spec that made the run

    def identity(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _IDENTITY_FIELDS}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: Path) -> RunInfo:
        """A RunInfo from run.json's object; a run.json written before RunInfo kept its split in `source`."""
        if not isinstance(data, dict):
            raise StoreError(f"{where}: not a run record (a JSON object is expected)")
        if "split" not in data and isinstance(data.get("source"), dict):
            data = {**data, "split": data["source"].get("split")}
        try:
            return cls(**data)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err.get("loc", ())) or "record"
            raise StoreError(f"{where}: not a run record (field '{field}': {err.get('msg', 'invalid')})") from None


class TraceStore:
    def __init__(self, run_dir: Union[str, Path]):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / TRACES_FILE
        self.run_path = self.run_dir / RUN_FILE
        self._keys: Optional[set[str]] = None
        self._repaired = False

    # --- reading ---------------------------------------------------------------------------------

    def read(self) -> tuple[list[Trace], list[str]]:
        """Every readable trace (first record per key) and one line per problem found, with line numbers."""
        traces, problems, first_line = [], [], {}
        if not self.path.exists():
            return traces, problems
        with open(self.path, "rb") as fh:
            data = fh.read()
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            last = number == len(lines)  # no newline after it: the writer died mid-line
            trace, problem = _parse_line(raw, number, last, str(self.path))
            if problem:
                problems.append(problem)
                continue
            if trace.key in first_line:
                problems.append(
                    f"{self.path} line {number}: duplicate key {trace.key} (kept line {first_line[trace.key]})"
                )
                continue
            first_line[trace.key] = number
            traces.append(trace)
        return traces, problems

    def keys(self) -> set[str]:
        if self._keys is None:
            self._keys = {t.key for t in self.read()[0]}
        return set(self._keys)

    def __len__(self) -> int:
        return len(self.keys())

    # --- writing ---------------------------------------------------------------------------------

    def append(self, trace: Trace) -> bool:
        """Write one trace durably; False (and nothing written) when its key is already stored."""
        if trace.key in self.keys():
            return False
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self._repaired:
            self._cut_partial_tail()
        line = trace.model_dump_json() + "\n"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self._keys.add(trace.key)
        return True

    def _cut_partial_tail(self) -> None:
        """Drop a last line without its newline (a writer killed mid-append) so new records start clean."""
        self._repaired = True
        if not self.path.exists():
            return
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if not data or data.endswith(b"\n"):
                return
            keep = data.rfind(b"\n") + 1
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())

    # --- run.json ----------------------------------------------------------------------------------

    def run_info(self) -> Optional[RunInfo]:
        """The run's record, None when run.json is absent; StoreError (one line) when it is not one."""
        if not self.run_path.exists():
            return None
        try:
            data = json.loads(self.run_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.run_path}: not valid JSON ({exc})") from None
        return RunInfo.from_json(data, self.run_path)

    def claim(self, info: RunInfo) -> None:
        """Write run.json for a new run dir, or check that an existing one describes the same run."""
        existing = self.run_info()
        if existing is None:
            if self.path.exists() and self.path.stat().st_size:
                raise StoreError(f"{self.path}: traces without a {RUN_FILE}; refusing to mix runs (use a new --out)")
            self.run_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.run_path.with_suffix(".json.tmp")
            tmp.write_text(
                json.dumps(info.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            os.replace(tmp, self.run_path)  # atomic: run.json is either absent or whole
            return
        old, new = existing.identity(), info.identity()
        for name in _IDENTITY_FIELDS:
            if old[name] != new[name]:
                detail = first_difference(old[name], new[name])
                raise StoreError(
                    f"{self.run_path}: field '{name}' differs from this run ({detail}): it was made by another "
                    f"config or an earlier version and cannot resume; delete {self.run_dir} to make it again, "
                    "or pass another --out"
                )


def _parse_line(raw: bytes, number: int, last: bool, file: str) -> tuple[Optional[Trace], Optional[str]]:
    where = f"{file} line {number}"
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        reason = "truncated last line (a writer was interrupted)" if last else "not JSON"
        return None, f"{where}: {reason}"
    try:
        return Trace.model_validate(obj), None
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or "record"
        return None, f"{where}: not a trace (field '{field}': {err.get('msg', 'invalid')})"


def remove_files(folder: Path, names: list[str]) -> None:
    """Delete these files of a run folder, each with its `.tmp`, in the order named (a run's key first: a removal
    cut short then leaves no key, so the next run makes the run again); nothing else in the folder."""
    for name in names:
        for path in (folder / name, folder / f"{name}.tmp"):
            if path.is_file():
                path.unlink()


def first_difference(old: Any, new: Any, path: str = "") -> str:
    """The first place two records differ, in one line: `path: stored <old>, now <new>` (each cut to 80 chars)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                return first_difference(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return first_difference(a, b, f"{path}.{i}" if path else str(i))
    return f"{path or 'value'}: stored {_cut(repr(old))}, now {_cut(repr(new))}"


def _cut(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
