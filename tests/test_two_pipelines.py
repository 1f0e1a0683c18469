"""A pipeline is a value: two declared pipelines validated and run in one process, each with its own roles.

escot.yaml and its variant escot-strategy-first.yaml declare the same role names; the variant's sr student writes
the strategy first. Validating one must not change the other: each config's stages, and each `Pipeline`'s sr
prompt, answer schema and parse, are its own whichever was loaded first. Nothing here restores shared state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from distill.backends.base import GenerationResult
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.pipeline.reflection import parse_output
from distill.roles.roles import ROLES

PIPELINES = Path(__file__).resolve().parents[1] / "configs" / "pipelines"
ESCOT, FIRST = PIPELINES / "escot.yaml", PIPELINES / "escot-strategy-first.yaml"
STAGES = ["em", "es", "ia", "sr", "re"]
SR_ORDER = {"escot": ["reason", "strategy"], "escot_strategy_first": ["strategy", "reason"]}


class AnsweringBackend:
    """Answers every request with a valid JSON object of the schema it asks for, fields in the schema's order."""

    name = model = "answering"

    def __init__(self):
        self.requests = []

    def generate(self, requests, progress=None):
        self.requests += requests
        return [GenerationResult(text=json.dumps(_answer(r.schema))) for r in requests]

    def describe(self):
        return {"backend": self.name}


def _answer(schema) -> dict:
    def value(name, annotation):
        return get_args(annotation)[0] if get_origin(annotation) is Literal else f"the {name}"

    return {name: value(name, info.annotation) for name, info in schema.model_fields.items()}


def _config(path: Path, style: str) -> PipelineConfig:
    return PipelineConfig(pipeline=str(path), prompt_style=style, rag=False)


def _sr_request(config: PipelineConfig, dialogue):
    backend = AnsweringBackend()
    [trace] = Pipeline(config, backend).run([dialogue], progress=False)
    assert trace.status == "ok", trace.failure
    assert len(backend.requests) == len(STAGES)  # one dialogue: one request per stage, in stage order
    return backend.requests[STAGES.index("sr")], trace


@pytest.mark.parametrize("order", [(ESCOT, FIRST), (FIRST, ESCOT)], ids=["escot-first", "variant-first"])
def test_two_pipelines_side_by_side(order, tiny_dialogues):
    builtin = dict(ROLES)
    configs = {}
    for path in order:
        config = _config(path, "student")
        configs[config.pipeline.name] = config
    for name, config in configs.items():
        assert config.stages() == STAGES, name  # the first config's stages were empty once the second was read
        request, trace = _sr_request(config, tiny_dialogues[0])
        assert list(request.schema.model_fields) == SR_ORDER[name]
        assert list(json.loads(next(s.raw for s in trace.steps if s.role == "sr"))) == SR_ORDER[name]
        assert list(trace.outputs["sr"]) == ["reason", "strategy"]  # the full schema: the teacher's order
        sr = config.roles["sr"]
        assert sr.pipeline == name and set(config.roles) == set(ROLES) | set(STAGES)
        parsed = parse_output(sr, json.dumps({"strategy": "Question", "reason": "r"}), STAGES, "student")
        assert type(parsed) is sr.schema and parsed.strategy == "Question"
    assert dict(ROLES) == builtin, "validating a declared pipeline changed the built-in roles"


def test_each_pipeline_renders_its_own_roles(tmp_path, tiny_dialogues):
    """Two pipelines whose sr differs in what the teacher reads: its title, the briefing on an upstream role and the
    answer it is asked for each come from the pipeline the prompt is rendered for, whatever was rendered between."""
    variant = tmp_path / "renamed.yaml"
    variant.write_text(
        f"extends: {ESCOT}\nname: renamed\nroles:\n"
        "  - name: ia\n    title: Appraisal Reader\n    brief: read the appraisal\n"
        "  - name: sr\n    title: Tactic Picker\n    answer:\n      tactic: {label: strategy}\n",
        encoding="utf-8",
    )
    renamed, escot = _config(variant, "teacher"), _config(ESCOT, "teacher")  # both read before either runs
    seen = []
    for config in (renamed, escot, renamed):
        request, _ = _sr_request(config, tiny_dialogues[1])
        seen.append((list(request.schema.model_fields), request.messages[0]["content"], request.messages[1]["content"]))
    (renamed_fields, renamed_system, renamed_user), (escot_fields, escot_system, escot_user) = seen[:2]
    assert renamed_fields == ["tactic"] and escot_fields == ["reason", "strategy"]
    assert "Tactic Picker" in renamed_system and "Strategy Reasoner" in escot_system
    assert "the Appraisal Reader read the appraisal" in renamed_user and "Appraisal Reader" not in escot_user
    assert '"tactic"' in renamed_user and '"tactic"' not in escot_user
    assert seen[2] == seen[0], "rendering escot in between changed the variant's prompt"


# --- what a run leaves knows its pipeline: no process state says which one --------------------------------------


def test_datasets_and_adapter_cards_read_each_runs_own_pipeline(tmp_path, monkeypatch):
    """escot's and its variant's runs imported in one process: each run's sr rows and its adapter's card follow the
    declaration its traces carry (the card reads it from the dataset's build record), whichever was read last."""
    from datasets import load_from_disk
    from test_import import FULL_CHAIN, REPO, run_import, write_full_chain

    from distill.__main__ import main as distill
    from distill.adapters.adapters import write_metadata
    from train.adapter_card import write_adapter_card

    monkeypatch.chdir(REPO)  # the shipped mapping names its pipeline relative to the repository
    data = write_full_chain(tmp_path / "full.json")
    for name, extra in (("escot", ()), ("escot_strategy_first", ("--pipeline", str(FIRST)))):
        assert run_import(data, FULL_CHAIN, tmp_path / name, *extra) == 0
    for name in SR_ORDER:
        argv = ["datasets", "--traces", str(tmp_path / name), "--out", str(tmp_path / f"ds-{name}")]
        assert distill([*argv, "--roles", "sr", "--eval-fraction", "0"]) == 0
    for name, order in SR_ORDER.items():
        rows = json.loads((tmp_path / f"ds-{name}" / "sr" / "trace_distill_dataset.json").read_text())["rows"]
        completion = load_from_disk(str(tmp_path / f"ds-{name}" / "sr"))["train"][0]["completion"][0]["content"]
        assert rows["train"] == 4 and list(json.loads(completion)) == order
        adapter = tmp_path / f"adapter-{name}"
        adapter.mkdir()
        dataset = str(tmp_path / f"ds-{name}" / "sr")
        write_metadata(adapter, {"role": "sr", "dataset_dir": dataset, "tokens_seen": 1, "lora": {"r": 8}})
        card = write_adapter_card(adapter).read_text()
        assert f"with fields {', '.join(f'`{f}`' for f in order)}" in card, card


def test_swapped_adapters_of_declared_roles_are_refused(tmp_path):
    """A folder named after a role whose metadata gives another is refused for a declared role as for a built-in one:
    the adapters themselves say which names are roles, not the pipelines this process happens to have read."""
    from distill.adapters.adapters import PEFT_CONFIG_FILE, AdapterError, find_adapters, write_metadata

    for folder, role in (("em", "sr"), ("sr", "em")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / PEFT_CONFIG_FILE).write_text("{}", encoding="utf-8")
        write_metadata(tmp_path / folder, {"role": role})
    with pytest.raises(AdapterError, match="em: holds the adapter for role 'sr'"):
        find_adapters(tmp_path)
