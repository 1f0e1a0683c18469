"""Reading a trace run for the dataset builder, and the card and build record of each role dataset.

The card records where a role dataset came from (teacher backend and model, pipeline config, prompt
versions, gold guidance), how it was filtered (options and per-reason drop counts) and what was
written (rows per split, fingerprints). Only the backend's own `describe()` output is copied from
run.json, and it is scrubbed again here, so an API key can never reach a card.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from distill.pipeline.stage_key import KEY_FILE
from distill.pipeline.store import RunInfo, StoreError, TraceStore
from distill.pipeline.trace import Trace
from distill.quality.checks import role_checks
from distill.quality.report import QUALITY_FILE
from distill.quality.thresholds import QualityThresholds
from distill.roles.declared import stored_roles
from distill.roles.roles import ROLES, STUDENT_PROMPT_VERSION, RoleSpec
from distill.version import __version__

if TYPE_CHECKING:
    from datasets import DatasetDict

    from distill.datasets.options import DatasetOptions, RoleCounts

# The card's facts as data, for the adapter card and the hub dataset card to quote.
BUILD_FILE = "trace_distill_dataset.json"
_SECRET_KEY = re.compile(r"api[_-]?key|secret|passw|authorization|bearer|token$|credential", re.I)
_SECRET_VALUE = re.compile(r"^(sk-|hf_|Bearer\s)", re.I)


def read_run(run_dir: Path) -> tuple[list[Trace], Optional[RunInfo], list[str]]:
    """Traces, run record and human-readable problems of a trace run; raises ValueError if it is absent."""
    if not run_dir.is_dir():
        raise ValueError(f"trace run directory {run_dir} does not exist")
    problems: list[str] = []
    store = TraceStore(run_dir)  # the store owns the run folder's file names
    run = None
    try:
        run = store.run_info()
        if run is None:
            problems.append(f"{store.run_path}: missing; teacher details on the cards come from the traces")
    except StoreError as err:
        problems.append(f"{err}; teacher details come from the traces")
    if not store.path.is_file():
        raise ValueError(f"{run_dir}: no {store.path.name}; is this a trace run directory?")
    for entry in sorted(run_dir.iterdir()):
        if entry.name not in (store.run_path.name, store.path.name, QUALITY_FILE, KEY_FILE) and entry.name[0] != ".":
            problems.append(f"{entry}: not part of a trace run; ignored")
    traces, store_problems = store.read()
    problems += store_problems
    return traces, run, problems


def scrub(value: Any) -> Any:
    """A copy of `value` without secret-looking keys or values (defence in depth over describe())."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str) and _SECRET_VALUE.match(value):
        return "<redacted>"
    return value


def _teacher(traces: Sequence[Trace], run: Optional[RunInfo]) -> dict[str, Any]:
    if run is None:  # no run.json: what the traces themselves recorded
        backend = {"name": sorted({t.backend for t in traces}), "model": sorted({t.model for t in traces})}
        config = traces[0].config if traces else {}
    else:
        backend, config = {"backend_name": run.backend_name, "model": run.model, **run.backend}, run.pipeline
    return {
        "backend": scrub(backend),
        "config": scrub(config),
        "prompt_versions": sorted({t.prompt_version for t in traces}) or [run and run.prompt_version],
        "gold_emotion": any(t.gold_guidance.emotion for t in traces),
        "gold_response": any(t.gold_guidance.response for t in traces),
    }


def render_card(dd: DatasetDict, record: dict[str, Any]) -> str:
    """The role dataset's README.md, from its build record (`build_record`) and the saved splits."""
    role, options, counts = record["role"], record["options"], record["counts"]
    roles = stored_roles(record["teacher"]["config"])  # the declared pipeline the rows' traces ran, if any
    spec = roles[role]
    drops = "\n".join(f"| {why} | {n} |" for why, n in sorted(counts["dropped"].items())) or "| (none) | 0 |"
    splits = "\n".join(f"| {s} | {dd[s].num_rows} | `{dd[s]._fingerprint}` |" for s in dd)
    target = (
        "the human gold reply (hybrid target)"
        if role == "ers" and options["ers_target"] == "gold"
        else "the teacher's final answer"
    )
    return f"""---
tags: [trace-distill, sft, conversational, prompt-completion]
---
# trace-distill SFT dataset: `{role}` ({spec.title})

One row per dialogue in TRL's conversational prompt-completion form: `prompt` is the role's compact
student prompt (student renderer, prompt version `{STUDENT_PROMPT_VERSION}`), `completion` is {target} as
compact JSON of `{spec.schema_for("student").__name__}`. `messages` is prompt + completion for viewers; `dialogue_id`,
`conv_id` and `key` (the trace key) link rows back to the trace run. Load with
`datasets.load_from_disk("<this directory>")`.

## Labels

{label_section(spec.schema)}

## Teacher

{teacher_section(record)}

## Filters

```json
{json.dumps(options, indent=2)}
```

Traces read: {counts["read"]}; kept: {counts["kept"]}.

| dropped because | rows |
|---|---|
{drops}

## Quality checks

{quality_section(role, counts["quality"], roles)}
{auxiliary_section(counts.get("auxiliary"))}
## Splits (by conversation: no `conv_id` is in both)

| split | rows | fingerprint |
|---|---|---|
{splits}
"""


def teacher_section(record: dict[str, Any]) -> str:
    """Where the rows came from: the trace run, its backend, prompts, gold guidance and pipeline config."""
    teacher = record["teacher"]
    return f"""- trace run: `{record["trace_run"]}`
- backend: `{json.dumps(teacher["backend"], sort_keys=True)}`
- teacher prompt version(s): {", ".join(map(str, teacher["prompt_versions"]))}
- gold guidance shown to the teacher: emotion {"yes" if teacher["gold_emotion"] else "no"}, \
response {"yes" if teacher["gold_response"] else "no"}
- created: {datetime.now(timezone.utc).isoformat(timespec="seconds")}

Pipeline config:

```json
{json.dumps(teacher["config"], indent=2, sort_keys=True)}
```"""


def quality_section(role: str, quality: dict[str, Any], roles: Mapping[str, RoleSpec] = ROLES) -> str:
    """What the trace quality checks (distill.quality, docs/quality.md) found in this role's rows, per check
    (`roles`: its pipeline's)."""
    mode, failed = quality["mode"], quality["failed"]
    if mode == "off":
        return "Not run: `--quality off`, or the rows' targets are the data's answers, not the teacher's."
    done = "dropped" if mode == "filter" else "kept and counted"
    if quality.get("unfiltered"):
        every = ", ".join(f"`{c}`" for c in quality["unfiltered"])
        done += f" (except on {every}: filtering on it left no rows to train on)"
    if quality.get("kept_failing"):
        done = (
            "meant to be dropped, but filtering left no rows to train on, so all were kept "
            "(`--keep-unfiltered-when-empty`)"
        )
    rows = "\n".join(f"| `{name}` | {failed.get(name, 0)} |" for name in role_checks(role, roles))
    return f"""Mode `{mode}`: rows whose own `{role}` output failed a check were {done}. A row can fail more than \
one check.

| check | rows that failed it |
|---|---|
{rows}"""


def auxiliary_section(auxiliary: Optional[dict[str, Any]]) -> str:
    """How the auxiliary link rows of a multitask dataset were made (`sft_tasks.with_link_rows`); empty without."""
    if not auxiliary:
        return ""
    rows = "\n".join(
        f"| `[{link}]` | {n} | {auxiliary['without_answer'][link]} |" for link, n in auxiliary["rows"].items()
    )
    return f"""
## Auxiliary rows (distilling step-by-step)

Besides its reply rows (`task` label), the train split holds auxiliary rows (`task` `link <name>`): for \
{auxiliary["chosen"]} of its {auxiliary["dialogues"]} train dialogues (share {auxiliary["share"]:g}, seeded by \
{auxiliary["seed"]}), the reply row's own prompt (the dialogue alone) under the link's tag, and that link's answer \
in `{auxiliary["traces"]}` (the same dialogue's) as the target. The validation split holds reply rows alone: \
the student answers the reply task alone at test.

| link tag | rows | chosen dialogues without its answer |
|---|---|---|
{rows}
"""


def label_section(schema: type) -> str:
    """Each closed label set the role answers with (from data_prep.taxonomy, through the schema)."""
    props = schema.model_json_schema().get("properties", {})
    rows = [f"- `{name}`: {', '.join(map(str, p['enum']))}" for name, p in props.items() if "enum" in p]
    return "\n".join(rows) if rows else "This role answers in free text (no closed label set)."


def write_card(out_dir: Path, dd: DatasetDict, record: dict[str, Any]) -> Path:
    """README.md and the build record beside a saved role dataset."""
    path = out_dir / "README.md"
    path.write_text(render_card(dd, record), encoding="utf-8")
    (out_dir / BUILD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def build_record(
    role: str,
    dd: DatasetDict,
    traces: Sequence[Trace],
    run: Optional[RunInfo],
    options: DatasetOptions,
    counts: RoleCounts,
    run_dir: Path,
) -> dict[str, Any]:
    """What a role dataset was built from and how: teacher, gold guidance, filters and counts."""
    return {
        "role": role,
        "source": scrub(run.source) if run else None,
        "split": run.split if run else None,
        "teacher": _teacher(traces, run),
        "trace_run": str(run_dir),
        "options": asdict(options),
        "counts": counts.as_dict(),
        "quality_thresholds": QualityThresholds(**options.quality_thresholds).model_dump(),
        "rows": {split: dd[split].num_rows for split in dd},
        "trace_distill_version": __version__,
    }


def read_build_record(dataset_dir: str | Path) -> dict[str, Any] | None:
    """The record `write_card` left next to a role dataset; None for a dataset built elsewhere."""
    path = Path(dataset_dir) / BUILD_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
