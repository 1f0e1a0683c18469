"""run.json has one owner: `RunInfo` in the trace store. What `distill generate` and `eval compare` write
validates against it (the Batch API's run.json: tests/test_batch_api.py), and a record with a field it
does not know is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from distill.pipeline.store import RunInfo, StoreError, TraceStore


def _validated(run_dir: Path) -> RunInfo:
    path = run_dir / "run.json"
    return RunInfo.from_json(json.loads(path.read_text(encoding="utf-8")), path)


def test_run_info_round_trips_and_refuses_what_it_does_not_know(tmp_path):
    info = RunInfo(pipeline={"rag": False}, backend_name="local", model="m", prompt_version="v2", split="train")
    store = TraceStore(tmp_path / "run")
    store.claim(info)
    assert store.run_info() == info == _validated(tmp_path / "run")
    store.run_path.write_text(json.dumps({**info.to_json(), "splitt": "test"}))
    with pytest.raises(StoreError, match="run.json: not a run record \\(field 'splitt'"):
        store.run_info()
    # a run.json written before RunInfo kept the split inside `source`: read in this one place
    older = {k: v for k, v in info.to_json().items() if k != "split"} | {"source": {"split": "validation"}}
    store.run_path.write_text(json.dumps(older))
    assert store.run_info().split == "validation"


@pytest.mark.slow
def test_generate_and_compare_write_a_valid_run_info(tmp_path, smollm_path, tiny_dialogues):
    from fault_proxy import make_tiny_model

    from data_prep.loaders import save_dialogues
    from distill.__main__ import main as distill_main
    from eval.__main__ import main as eval_main

    model = make_tiny_model(smollm_path, tmp_path / "tiny")
    data = tmp_path / "ed"
    save_dialogues({"train": tiny_dialogues[:2], "validation": [], "test": tiny_dialogues[2:4]}, data)
    system = {"backend": {"type": "local", "model": str(model), "batch_size": 4}}
    system["pipeline"] = {"rag": False, "max_attempts": 1, "use_cae": False, "use_srp": False}
    (tmp_path / "gen.yaml").write_text(yaml.safe_dump(system))
    argv = ["generate", "--config", str(tmp_path / "gen.yaml"), "--dialogues", str(data), "--split", "train"]
    assert distill_main([*argv, "--out", str(tmp_path / "gen")]) == 0
    generated = _validated(tmp_path / "gen")
    assert generated.split == "train" and generated.source["dialogues"] == str(data.resolve())

    compare = {"dialogues": str(data), "ppl": None, "bertscore": None, "systems": [{"name": "student", **system}]}
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump(compare))
    assert eval_main(["compare", "--config", str(tmp_path / "cmp.yaml"), "--out", str(tmp_path / "cmp")]) == 0
    compared = _validated(tmp_path / "cmp" / "systems" / "student")
    assert compared.split == "test" and compared.system["name"] == "student"
