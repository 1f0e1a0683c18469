"""One reuse rule for what `eval compare` stores, and so for the quickstart's eval stage and `eval curve`'s points.

A generated system's traces (`systems/<name>`) and a report (`report.json`) are reused only while everything
they were computed from is unchanged: the system's config as written (backend and pipeline), the pipeline
settings and prompt version its traces are keyed on, and what its adapters hold (`adapter_fingerprint`: the
sha256 of the weights and the fingerprint of the dataset they learnt). A path says where an adapter is, not
what it is: an adapter retrained under the same path must not lend its old replies to the new one. Anything
changed, the stored work is computed again and the log says why, in one line (`regenerating <what>: <why>`).
"""

from __future__ import annotations

from typing import Any, Optional

from distill.adapters.adapters import adapter_fingerprint
from distill.backends.adapter_switch import adapter_dirs
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


def drop_stale_run(
    store: TraceStore, name: str, system: dict[str, Any], pipeline_config, adapters: Fingerprints
) -> None:
    """Delete the stored run of generated system `name` when an earlier compare made it from other inputs
    (`system_changed`), saying why: its traces would otherwise be reused, or resumed, as this system's."""
    import shutil

    from distill.roles.roles import prompt_version

    info = store.run_info()
    if info is None or info.system is None:  # nothing stored, or a run this compare did not write: claim decides
        return
    style = pipeline_config.prompt_style
    why = system_changed(info, system, pipeline_config.key_dict(), prompt_version(style), adapters)
    if why:
        regenerating(f"system '{name}'", why)
        shutil.rmtree(store.run_dir)


def report_changed(report: dict[str, Any], config: dict[str, Any], adapters: dict[str, Fingerprints]) -> Optional[str]:
    """Why a stored report is not the report of `config` (a compare config as JSON) over adapters that hold
    `adapters` (system -> fingerprints, systems with adapters only); None when it is."""
    if report.get("config") != config:
        return f"its config changed ({first_difference(report.get('config'), config)})"
    stored = report.get("adapter_fingerprints") or {}
    for name, now in adapters.items():
        if why := adapters_changed(stored.get(name), now, "the report"):
            return f"system '{name}': {why}"
    return None


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


def regenerating(what: str, why: str) -> None:
    print(f"regenerating {what}: {why}", flush=True)


def _short(fingerprint: dict[str, Optional[str]]) -> str:
    return (fingerprint.get("weights_sha256") or "none")[:12]
