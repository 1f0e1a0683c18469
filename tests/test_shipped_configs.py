"""Every YAML under configs/ parses with the loader that reads it, so a shipped config can never be the
first thing a user sees fail (torchtune's test that loads every shipped config, in spirit)."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _shipped(kind: str) -> list[Path]:
    found = sorted((CONFIGS / kind).glob("*.yaml"))
    assert found, f"no shipped {kind} configs"
    return found


def _no_flags() -> argparse.Namespace:
    from distill.pipeline.cli_generate import _SWITCHES

    return argparse.Namespace(**dict.fromkeys((*_SWITCHES, "prompt_style", "adapters", "max_cost")))


@pytest.mark.parametrize("path", _shipped("teacher"), ids=lambda p: p.name)
def test_teacher_configs_parse(path):
    from distill.pipeline.cli_generate import load_config, pipeline_config

    data = load_config(str(path))
    config = pipeline_config(str(path), data.get("pipeline"), _no_flags())
    assert config.stages()[-1] == "ers"
    _check_backend(data["backend"])


def _check_backend(backend: dict) -> None:
    from distill.backends.local import LocalBackend
    from distill.backends.openai_backend import OpenAIBackendConfig

    options = {k: v for k, v in backend.items() if k != "type"}
    if backend["type"] == "openai":
        OpenAIBackendConfig(**options)
    else:  # building a LocalBackend loads its model: check the option names against its signature
        assert backend["type"] == "local"
        inspect.signature(LocalBackend.__init__).bind(None, **options)


@pytest.mark.parametrize("path", _shipped("eval"), ids=lambda p: p.name)
def test_eval_configs_parse(path):
    from distill.pipeline.config import PipelineConfig
    from eval.compare.compare import load_config
    from eval.curve.config import load_curve_config

    if "points" in yaml.safe_load(path.read_text(encoding="utf-8")):  # a learning curve, `eval curve`
        config = load_curve_config(str(path))
        assert config.points and config.ordered_students()
        return
    if "students" in yaml.safe_load(path.read_text(encoding="utf-8")):  # `eval students`
        from eval.students.config import load_students_config

        assert load_students_config(str(path)).chosen()
        return
    config = load_config(str(path))
    assert config.systems and config.reference_system() in {s.name for s in config.systems}
    for system in config.systems:  # a generated system's blocks are checked as the pipeline will read them
        if system.backend is not None:
            _check_backend(system.backend)
            PipelineConfig(**system.pipeline)
    if config.judge is not None:
        _check_backend(config.judge.backend)


def test_external_adapters_config_documents_every_key():
    """Its header is the reference for an eval YAML: every key of the schema, and every key it sets."""
    from eval.compare.systems import CompareConfig, SystemSpec

    text = (CONFIGS / "eval" / "external-adapters.yaml").read_text(encoding="utf-8")
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text)
    keys = set(CompareConfig.model_fields) | set(SystemSpec.model_fields)
    for system in data["systems"]:
        keys |= set(system.get("backend") or {}) | set(system.get("pipeline") or {})
    missing = sorted(k for k in keys if not re.search(rf"(?<![\w-]){k}(?![\w-])", header))
    assert not missing, f"external-adapters.yaml's header does not explain: {missing}"


# configs/train/*.yaml: tests/test_train_configs.py parses each one through `trace-distill train`'s parser.


@pytest.mark.parametrize("path", _shipped("accelerate"), ids=lambda p: p.name)
def test_accelerate_configs_parse(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data["compute_environment"] == "LOCAL_MACHINE"
    assert data["distributed_type"] in {"NO", "MULTI_GPU", "MULTI_CPU", "FSDP", "DEEPSPEED"}
    assert int(data.get("num_processes", 2)) >= 1  # multi-gpu-ddp.yaml names none: the launch's --num_processes


@pytest.mark.parametrize("path", _shipped("pipelines"), ids=lambda p: p.name)
def test_declared_pipelines_parse(path):
    from distill.roles.declared import load_pipeline

    assert load_pipeline(path).stage_order()


@pytest.mark.parametrize("path", _shipped("import"), ids=lambda p: p.name)
def test_import_mappings_fit_their_pipeline(path, monkeypatch):
    from distill.imports import chains
    from distill.imports.mapping import load_mapping

    monkeypatch.chdir(CONFIGS.parent)  # a mapping names its pipeline from the repository root
    mapping = load_mapping(path)
    chains.check_mapping(mapping, chains.pipeline_config(mapping, str(path)), str(path))
