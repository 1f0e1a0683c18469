"""A killed role resumed from its last checkpoint records what one uninterrupted run would: its tokens seen and
steps; and a recipe (`eval curve`, the quickstart) resumes it when the checkpoint fits today's dataset and options.

Each test trains a tiny random 2-layer model a few steps: a full run, the same run stopped after its first
checkpoint, and the resume.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_train import StopAt, build_role_datasets, tiny_config

from distill.adapters.adapters import read_metadata
from train.resume import CHECKPOINT_RECORD, tokens_at
from train.sft import train_roles


@pytest.fixture(scope="module")
def asi_dataset(tmp_path_factory, tiny_dialogues) -> Path:
    return build_role_datasets(tmp_path_factory.mktemp("datasets"), tiny_dialogues, roles=("asi",))


@pytest.mark.slow  # trains a tiny model three times
def test_resume_carries_tokens_seen_and_steps_forward(asi_dataset, tiny_model_dir, tmp_path):
    options = dict(model_name_or_path=tiny_model_dir, max_steps=6, save_steps=2, max_tokens_budget=0)
    (whole,) = train_roles(tiny_config(asi_dataset, tmp_path / "whole", **options))

    cfg = tiny_config(asi_dataset, tmp_path / "killed", **options)
    (killed,) = train_roles(cfg, callbacks=[StopAt(3)])  # stops at step 3: checkpoint-2 is the last one
    checkpoint = tmp_path / "killed" / "asi" / "checkpoints" / "checkpoint-2"
    assert 0 < tokens_at(checkpoint) < killed["tokens_seen"] < whole["tokens_seen"]
    # A checkpoint made before the records existed: its trainer state logged TRL's count at its step (logging_steps 1)
    recorded = tokens_at(checkpoint)
    (checkpoint / CHECKPOINT_RECORD).rename(tmp_path / "record.json")
    assert tokens_at(checkpoint) == recorded
    (tmp_path / "record.json").rename(checkpoint / CHECKPOINT_RECORD)

    cfg.distill.resume = True
    (resumed,) = train_roles(cfg)
    assert resumed["resumed_from"] == "checkpoint-2"
    assert (resumed["global_step"], resumed["tokens_seen"]) == (whole["global_step"], whole["tokens_seen"])


def _kill_after_first_checkpoint(adapter: Path) -> str:
    """Leave `adapter` as a run killed just after its first checkpoint: no adapter yet, no later checkpoint."""
    checkpoints = sorted((adapter / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    for path in [*checkpoints[1:], *(p for p in adapter.iterdir() if p.name != "checkpoints")]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return checkpoints[0].name


@pytest.mark.slow  # trains a tiny model twice through `python -m train`
def test_recipe_resumes_a_killed_adapter_whose_checkpoint_fits(
    asi_dataset, tiny_dialogues, tiny_model_dir, tmp_path, capsys
):
    from eval.curve.adapter_runs import resumable, train_stale

    config = tmp_path / "tiny.yaml"
    config.write_text(
        f"model_name_or_path: {tiny_model_dir}\nper_device_train_batch_size: 4\nlearning_rate: 0.005\n"
        "warmup_steps: 0.0\nlogging_steps: 1\nuse_cpu: true\nlora_r: 8\nlora_alpha: 16\nnum_threads: 1\n"
    )  # save_steps: trace-distill's default, a quarter of the steps
    adapters, budget = tmp_path / "adapters", {"asi": {"max_tokens_budget": 1500}}
    assert train_stale(asi_dataset, adapters, budget, config, card_example=False) == {"asi": "not trained yet"}
    whole = read_metadata(adapters / "asi")
    assert whole["global_step"] >= 4

    first = _kill_after_first_checkpoint(adapters / "asi")
    assert resumable(adapters / "asi", asi_dataset / "asi", {"max_tokens_budget": 1500}) == first
    # another budget, or a checkpoint of another dataset, is trained again from step 0
    assert resumable(adapters / "asi", asi_dataset / "asi", {"max_tokens_budget": 3000}) is None
    other = build_role_datasets(tmp_path / "other", tiny_dialogues, roles=("asi",), copies=1)
    assert resumable(adapters / "asi", other / "asi", {"max_tokens_budget": 1500}) is None
    capsys.readouterr()
    assert train_stale(asi_dataset, adapters, budget, config, card_example=False) == {"asi": "not trained yet"}
    assert f"resuming asi from {first}" in capsys.readouterr().out
    resumed = read_metadata(adapters / "asi")
    assert resumed["resumed_from"] == first
    assert (resumed["global_step"], resumed["tokens_seen"]) == (whole["global_step"], whole["tokens_seen"])
