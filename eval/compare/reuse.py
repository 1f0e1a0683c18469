"""The keys of what `eval compare` stores: a generated system's traces (`systems/<name>`) and a report (`report.json`),
so of the quickstart's eval stage and `eval curve`'s points. The rule itself is `distill.pipeline.stage_key`'s.

A generated system's key holds its config (backend and pipeline, each path where it is: inside the run, the folder
holding the compare's `--out`, relative to it, `run_root`), the pipeline settings and prompt version its traces are
keyed on, the rendered prompts, the base model's weights and resolved dtype, the exemplar index, and what its
adapters hold (`adapter_fingerprint`: the sha256 of the weights and the fingerprint of the dataset they learnt: a
path says where an adapter is, not what it is). A report's key holds its config, the test dialogues it scored (ids
and content), the dialogues folder (the probe learns from its train split), the index, each generated system's key,
the content of each `traces:` run it read and the metrics' code (a hash of its source). Anything changed, the stored
work is computed again and the log says why, in one line (`regenerating <what>: <why>`). A run stored before keys
were recorded is migrated while the check it was made under (`system_changed`) still passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from data_prep.dialogues import Dialogue
from distill.adapters.adapters import adapter_fingerprint
from distill.backends.adapter_switch import adapter_dirs
from distill.pipeline.stage_key import (
    changed_input,
    content_fingerprint,
    digest,
    generation_inputs,
    index_fingerprint,
    placed,
    regenerating,
    stage_key,
    stale,
)
from distill.pipeline.store import RunInfo, TraceStore, first_difference

Fingerprints = dict[str, dict[str, Optional[str]]]  # role -> adapter_fingerprint


def adapter_fingerprints(backend: Optional[dict[str, Any]]) -> Fingerprints:
    """The fingerprint of each adapter a system's backend config names (`adapters:`), {} when it names none."""
    return {role: adapter_fingerprint(path) for role, path in adapter_dirs((backend or {}).get("adapters")).items()}


def comparable(system: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """A system spec as its traces depend on it: `about` is report.md's prose, not an input."""
    return None if system is None else {k: v for k, v in system.items() if k != "about"}


def system_changed(
    info: RunInfo, system: dict[str, Any], pipeline: dict[str, Any], prompt_version: str, adapters: Fingerprints
) -> Optional[str]:
    """Why the stored run `info` of a generated system is not this system's (`system`: its spec as JSON, `pipeline`:
    its `PipelineConfig.key_dict()`), in a few words; None when every input is the same."""
    if comparable(info.system) != comparable(system):
        return f"its config changed ({first_difference(comparable(info.system), comparable(system))})"
    if info.pipeline != pipeline:
        return f"its pipeline settings changed ({first_difference(info.pipeline, pipeline)})"
    if info.prompt_version != prompt_version:
        return f"the prompt version changed (stored {info.prompt_version}, now {prompt_version})"
    if adapters:
        return adapters_changed(info.backend.get("adapter_fingerprints"), adapters, "its run.json")
    return None


def run_root(out: Path | str) -> Path:
    """The run a compare writing to `out` belongs to (the folder holding `out`): the paths its keys hold inside it
    are relative to it, so the run can move (`distill.pipeline.stage_key.placed`)."""
    return Path(out).resolve().parent


def system_inputs(
    system: dict[str, Any], pipeline_config, adapters: Fingerprints, index, root: Optional[Path] = None
) -> dict[str, Any]:
    """Everything a generated system's traces are computed from (`system`: its spec as JSON; `root`: the run its
    paths are placed in)."""
    return {
        "config": placed(comparable(system), root),
        **generation_inputs(pipeline_config, system.get("backend") or {}, adapters, index),
    }


def drop_stale_run(
    store: TraceStore,
    name: str,
    system: dict[str, Any],
    pipeline_config,
    adapters: Fingerprints,
    index,
    root: Optional[Path] = None,
) -> dict[str, Any]:
    """Delete the stored run of generated system `name` when an earlier compare made it from other inputs, saying
    why: its traces would otherwise be reused, or resumed, as this system's. Returns the system's inputs, whose
    key `generate_system` records once it claims the run."""
    import shutil

    from distill.roles.roles import prompt_version

    inputs = system_inputs(system, pipeline_config, adapters, index, root)
    info = store.run_info()
    if info is None or info.system is None:  # nothing stored, or a run this compare did not write: claim decides
        return inputs
    style = pipeline_config.prompt_style

    def explain() -> Optional[str]:  # the run.json's own record says how it differs, where it can
        return system_changed(info, system, pipeline_config.key_dict(), prompt_version(style), adapters)

    details = dict.fromkeys(("config", "pipeline settings", "prompt version", "adapters"), explain)
    why = stale(store.run_dir, inputs, migrate=explain, details=details)
    if why:
        regenerating(f"system '{name}'", why)
        shutil.rmtree(store.run_dir)
    return inputs


def report_inputs(config, test: Sequence[Dialogue], index, root: Optional[Path] = None) -> dict[str, Any]:
    """Everything a compare's report is computed from (`config`: a validated `CompareConfig`; `test`: its test
    dialogues; `index`: its loaded exemplar index; `root`: the run its paths are placed in, `run_root`) and by
    which code: the metrics' (`eval.metrics.registry.code_version`), so a metric fixed makes the report stale."""
    from distill.pipeline.config import PipelineConfig
    from eval.metrics.registry import code_version

    inputs: dict[str, Any] = {
        "config": placed(json_config(config), root),
        "test dialogues": digest([d.model_dump() for d in test]),
        "dialogues": content_fingerprint(config.dialogues),
        "index": index_fingerprint(index),
    }
    for spec in config.systems:
        if spec.traces is not None:
            inputs[f"system '{spec.name}'"] = content_fingerprint(Path(spec.traces))
        elif spec.probe is None:
            adapters = adapter_fingerprints(spec.backend)
            system = spec.model_dump(mode="json")
            pipeline = PipelineConfig(**spec.pipeline)
            inputs[f"system '{spec.name}'"] = system_inputs(system, pipeline, adapters, index, root)
    inputs["metrics code"] = code_version()
    return inputs


def json_config(config) -> dict[str, Any]:
    """A compare config as report.json stores it."""
    import json

    return json.loads(json.dumps(config.model_dump()))


def report_changed(
    report: dict[str, Any], config, test: Sequence[Dialogue], index, root: Optional[Path] = None
) -> Optional[str]:
    """Why a stored report is not the report `config` (a validated `CompareConfig`) would give today, in the run
    `root`; None when it is. The report's own record of its config and adapters says how they differ, where it
    can."""
    wanted, stored = json_config(config), report.get("adapter_fingerprints") or {}

    def adapters_of(name: str):
        spec = next(s for s in config.systems if s.name == name)
        now = adapter_fingerprints(spec.backend) if spec.backend else {}
        why = adapters_changed(stored.get(name, None if now else {}), now, "the report")
        return lambda: f"system '{name}': {why}" if why else None

    details = {"config": lambda: f"its config changed ({first_difference(report.get('config'), wanted)})"}
    details |= {f"system '{s.name}'": adapters_of(s.name) for s in config.systems}
    return changed_input(report.get("stage_key"), stage_key(report_inputs(config, test, index, root)), details)


def adapters_changed(old: Optional[Fingerprints], new: Fingerprints, record: str) -> Optional[str]:
    """What differs between the adapter fingerprints a record holds (`old`) and today's, or None."""
    if old == new:
        return None
    if old is None:
        return f"{record} holds no adapter fingerprints (written before they were recorded)"
    for role in sorted(set(old) | set(new)):
        was, now = old.get(role), new.get(role)
        if was == now:
            continue
        if was is None or now is None:
            return f"adapter '{role}' was {'added' if was is None else 'removed'}"
        if was.get("dataset_fingerprint") != now.get("dataset_fingerprint"):
            return (
                f"adapter '{role}' was retrained on another dataset "
                f"(fingerprint {was.get('dataset_fingerprint')} → {now.get('dataset_fingerprint')})"
            )
        return f"adapter '{role}' holds other weights (sha256 {_short(was)} → {_short(now)})"
    return None


def _short(fingerprint: dict[str, Optional[str]]) -> str:
    return (fingerprint.get("weights_sha256") or "none")[:12]
