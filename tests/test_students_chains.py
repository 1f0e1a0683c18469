"""The literature's chain students of `eval students` on the tiny ESD-CoT-format fixture (test_students'):
`multitask` (distilling step-by-step: direct's reply rows plus the chain's links as auxiliary tasks of the same
dialogues, their share a setting) and `two-stage` (alpha-UMi: per-role adapters started from multitask's), and the
train option they need: a LoRA initialised from another adapter, that adapter part of the new one's key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from test_students import adapter_times, students, tiny_config

STUDENTS = ["direct", "multitask", "two-stage"]


def _share(share):
    return lambda data: next(s for s in data["students"] if s["name"] == "multitask")["auxiliary"].update(share=share)


def datasets_of(tmp_path: Path, share: float) -> Path:
    """The imports and datasets stages of direct and multitask (no training), as `run_students` runs them."""
    from eval.runner import Runner
    from eval.students.config import load_students_config
    from eval.students.recipe import build_datasets, import_run, train_subset

    tmp_path.mkdir(exist_ok=True)
    path = tiny_config(tmp_path, "smollm2-135m", student=["direct", "multitask"])
    data = yaml.safe_load(path.read_text())
    _share(share)(data)
    path.write_text(yaml.safe_dump(data))
    config, out = load_students_config(str(path)), tmp_path / "out"
    train_file, _ = train_subset(config, out)
    runner = Runner(out)
    for student in config.chosen():
        runs = out / "imports" / student.name
        train = import_run(runner, "train", train_file, student.mapping, runs / "train", "train", student.pipeline)
        val = import_run(runner, "val", config.data.validation, student.validation_mapping, runs / "validation",
                         "validation", student.pipeline)  # fmt: skip
        aux = student.auxiliary and import_run(
            runner, "aux", train_file, student.auxiliary.mapping, runs / "aux", "train"
        )
        build_datasets(runner, student, train, val, out / "datasets" / student.name, config, out, aux or None)
    return out / "datasets"


def _rows(split) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for row in split.to_list())


def test_multitask_rows_are_directs_reply_rows_plus_each_link_for_its_share_of_the_dialogues(tmp_path, capsys):
    from datasets import load_from_disk

    folder = datasets_of(tmp_path, 0.5)
    direct, multitask = (load_from_disk(str(folder / name / "reply")) for name in ("direct", "multitask"))
    train = multitask["train"].to_list()
    replies = [r for r in train if r["task"] == "label"]
    assert _rows(direct["train"]) == sorted(json.dumps(r, sort_keys=True) for r in replies)  # direct's, unchanged
    assert _rows(direct["validation"]) == _rows(multitask["validation"])  # the reply task alone is validated
    auxiliary = [r for r in train if r["task"] != "label"]
    assert sorted({r["task"] for r in auxiliary}) == ["link em", "link sr"]
    chosen = {r["dialogue_id"] for r in auxiliary}
    assert len(chosen) == round(0.5 * len(replies)) == 2  # the share: half of the 4 train dialogues, each link once
    assert len(auxiliary) == 2 * len(chosen)
    by_dialogue = {r["dialogue_id"]: r for r in replies}
    for row in auxiliary:  # the dialogue alone (the reply row's own input) under the link's tag, its answer as target
        link = row["task"].removeprefix("link ")
        assert row["prompt"] == [
            {"role": "system", "content": f"[{link}]"},
            *by_dialogue[row["dialogue_id"]]["prompt"][1:],
        ]
        answer = json.loads(row["completion"][0]["content"])
        assert set(answer) == ({"emotion"} if link == "em" else {"reason", "strategy"}), answer
    card = (folder / "multitask" / "reply" / "README.md").read_text()
    assert "## Auxiliary rows (distilling step-by-step)" in card and "for 2 of its 4 train dialogues (share 0.5" in card
    assert "| `[em]` | 2 | 0 |" in card and "| `[sr]` | 2 | 0 |" in card
    assert "Auxiliary rows" not in (folder / "direct" / "reply" / "README.md").read_text()

    every = datasets_of(tmp_path / "all", 1.0)  # share 1: every dialogue, each link
    train = load_from_disk(str(every / "multitask" / "reply"))["train"]
    assert sorted(train["task"]).count("link em") == 4 and sorted(train["task"]).count("link sr") == 4


SHARES = {"zero": (0, "0 is not a share"), "above-one": (1.5, "1.5 is not a share"),
          "bool": (True, "True is not a share"), "text": ("half", "'half' is not a share")}  # fmt: skip


@pytest.mark.parametrize("share, words", SHARES.values(), ids=SHARES)
def test_a_bad_auxiliary_share_is_one_line_naming_the_field(tmp_path, capsys, share, words):
    config = tiny_config(tmp_path, "smollm2-135m")
    data = yaml.safe_load(config.read_text())
    _share(share)(data)
    config.write_text(yaml.safe_dump(data))
    assert students(config, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "auxiliary.share" in err and words in err, err
    assert "at most 1" in err and not (tmp_path / "out").exists()


def test_two_stage_without_its_init_student_is_one_line(tmp_path, capsys):
    config = tiny_config(tmp_path, "smollm2-135m", student=["direct", "two-stage"])
    assert students(config, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "two-stage starts from multitask's adapter" in err, err


def test_a_lora_initialised_from_another_adapter_holds_its_weights_at_step_0(tmp_path, tiny_model_dir):
    """The init adapter's LoRA B is random (a fresh LoRA's is zero): a fresh LoRA would not match it."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from train.config import ConfigError
    from train.config_load import config_from_dict
    from train.sft import load_base, with_new_lora

    torch.manual_seed(7)
    donor = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(donor, lora).save_pretrained(tmp_path / "init")
    from peft import load_peft_weights

    saved = load_peft_weights(str(tmp_path / "init"))
    values = {"model_name_or_path": tiny_model_dir, "output_dir": str(tmp_path / "a"), "roles": "asi",
              "use_cpu": True, "lora_r": 8, "lora_alpha": 16, "num_threads": 1}  # fmt: skip
    cfg = config_from_dict({**values, "init_adapter": str(tmp_path / "init")}, source="test")
    base, _, _ = load_base(cfg)
    model = with_new_lora(base, cfg)
    start = get_peft_model_state_dict(model)
    assert start.keys() == saved.keys() and all(torch.equal(start[k], saved[k]) for k in saved)
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_B" in n)  # trainable, not frozen
    fresh = get_peft_model_state_dict(with_new_lora(model.unload(), config_from_dict(values, source="test")))
    assert not all(torch.equal(fresh[k], saved[k]) for k in saved)

    with pytest.raises(ConfigError, match="field 'init_adapter': .* has LoRA r 8 \\(this run: 4\\)"):
        config_from_dict({**values, "lora_r": 4, "init_adapter": str(tmp_path / "init")}, source="test")
    with pytest.raises(ConfigError, match="field 'init_adapter': .* is not a trained adapter"):
        config_from_dict({**values, "init_adapter": str(tmp_path)}, source="test")


@pytest.mark.slow
def test_two_stage_starts_from_multitasks_adapter_trained_once_and_retrains_when_it_changes(
    tmp_path, tiny_model_dir, capsys
):
    from distill.adapters.adapters import read_metadata
    from train.config import init_fingerprint

    config = tiny_config(tmp_path, tiny_model_dir, student=STUDENTS, n=3, num_train_epochs=1, oracle=False,
                         prompted=False)  # fmt: skip
    out = tmp_path / "out"
    assert students(config, out) == 0
    log = capsys.readouterr().out
    assert log.count("--output_dir " + str(out / "adapters" / "multitask")) == 1  # multitask trained once
    init = out / "adapters" / "multitask" / "seed-42" / "reply"
    for role in ("em", "sr", "re"):
        meta = read_metadata(out / "adapters" / "two-stage" / "seed-42" / role)
        # the key holds what the init adapter held (its weights), the metadata where it lay too
        assert meta["init_adapter"] == str(init) and meta["train_config"]["init_adapter"] == init_fingerprint(init)
    report = json.loads((out / "eval" / "report.json").read_text())
    assert [s["name"] for s in report["systems"]] == ["chatgpt", *STUDENTS]
    trained = adapter_times(out)
    assert len(trained) == 5  # direct's reply, multitask's reply, two-stage's em, sr, re

    moved = tmp_path / "elsewhere" / "run"  # the key holds what the init adapter holds, not where it lies
    shutil.copytree(out, moved)
    for run in (out, moved):  # a rerun, and the run copied elsewhere: nothing trained again
        assert students(config, run) == 0
        assert adapter_times(run) == trained
        stages = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[stage] ")]
        assert stages and all(": reused: key unchanged (" in line for line in stages), stages

    before = init_fingerprint(init)
    data = yaml.safe_load(config.read_text())
    _share(0.5)(data)  # multitask's rows change: it retrains, and so does every adapter that starts from it
    config.write_text(yaml.safe_dump(data))
    assert students(config, out) == 0
    log = capsys.readouterr().out
    assert init_fingerprint(init) != before and "retraining em: its init_adapter changed" in log, log
    now = adapter_times(out)
    assert {k for k in now if now[k] != trained[k]} == {
        f"adapters/{name}/seed-42/{role}/adapter_model.safetensors"
        for name, role in [("multitask", "reply"), ("two-stage", "em"), ("two-stage", "sr"), ("two-stage", "re")]
    }
