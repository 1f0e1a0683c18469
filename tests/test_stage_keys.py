"""Keys by content (`distill.pipeline.stage_key`): a path enters a key where it is, inside the run relative to it,
never as it was spelled; a trace run a pipeline reads enters as its content."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_a_path_is_keyed_where_it_is_not_as_spelled(tmp_path, monkeypatch):
    from distill.pipeline.stage_key import located

    run = tmp_path / "run"
    (run / "adapters" / "sr").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert located("run/adapters/sr", run) == located(str(run / "adapters" / "sr"), run) == "<run>/adapters/sr"
    assert located("./run/../run/adapters", "run") == "<run>/adapters"
    assert located(str(tmp_path), run) == tmp_path.resolve().as_posix()  # outside the run: absolute
    monkeypatch.chdir(REPO)
    assert located("configs/pipelines/escot.yaml") == located(str(REPO / "configs/pipelines/escot.yaml"))
    assert located("configs/pipelines/escot.yaml") == "configs/pipelines/escot.yaml"  # a checkout's own file
    assert located("smollm2-135m") == "smollm2-135m"  # names nothing on disk: an alias, kept


def test_a_config_placed_in_its_run_hashes_alike_wherever_the_run_lies(tmp_path, monkeypatch):
    from distill.pipeline.stage_key import digest, placed

    def config(run: Path, spelled: Path) -> dict:
        return {
            "dialogues": str(spelled / "imports" / "test"),
            "systems": [
                {"name": "a", "traces": str(spelled / "imports" / "test"), "about": "run/imports"},
                {"name": "b", "backend": {"adapters": {"sr": str(spelled / "adapters" / "sr")}, "model": "tiny"}},
                {"name": "c", "pipeline": {"oracle_traces": str(spelled / "imports" / "test"), "prompt_style": "x"}},
            ],
        }

    run, moved = tmp_path / "run", tmp_path / "elsewhere" / "run"
    for folder in ("imports/test", "adapters/sr"):
        (run / folder).mkdir(parents=True)
    shutil.copytree(run, moved)
    monkeypatch.chdir(tmp_path / "elsewhere")
    made = digest(placed(config(run, run), run))
    assert digest(placed(config(run, Path(os.path.relpath(run))), run)) == made
    assert digest(placed(config(moved, moved), moved)) == made
    assert placed(config(run, run), run)["systems"][2]["pipeline"]["prompt_style"] == "x"  # not a path field
    (moved / "adapters" / "ia").mkdir()
    other = config(moved, moved)
    other["systems"][1]["backend"]["adapters"]["sr"] = str(moved / "adapters" / "ia")  # another folder: another key
    assert digest(placed(other, moved)) != made


def test_a_trace_run_an_oracle_reads_enters_its_trace_key_as_its_content(tmp_path):
    from distill.pipeline.config import PipelineConfig

    teacher, moved = tmp_path / "teacher", tmp_path / "moved" / "teacher"
    teacher.mkdir()
    (teacher / "traces.jsonl").write_text('{"the": "teacher"}\n')
    shutil.copytree(teacher, moved)

    def key(run: Path) -> dict:
        return PipelineConfig(oracle={"asi": "teacher"}, oracle_traces=str(run)).key_dict()

    assert key(teacher) == key(moved) == key(Path(os.path.relpath(teacher)))
    (moved / "traces.jsonl").write_text('{"another": "teacher"}\n')
    assert key(moved) != key(teacher)
    assert "oracle_traces" not in PipelineConfig().key_dict()  # unset: runs made before it keep their keys


def _generate(model: str, dtype: str, dialogues: Path, out: Path, tmp_path: Path) -> int:
    import yaml

    from distill.__main__ import main as distill

    config = tmp_path / f"local-{dtype}.yaml"
    backend = {"type": "local", "model": model, "dtype": dtype, "batch_size": 2}
    pipeline = {"rag": False, "use_cae": False, "use_srp": False, "max_attempts": 1}
    config.write_text(yaml.safe_dump({"backend": backend, "pipeline": pipeline}))
    argv = ["generate", "--config", str(config), "--dialogues", str(dialogues), "--out", str(out), "--limit", "2"]
    return distill(argv)


@pytest.mark.slow
def test_generate_is_keyed_on_the_weights_and_dtype_it_runs(tmp_path, tiny_model_dir, tiny_dialogues, capsys):
    """`distill generate`: an identical rerun resumes, making nothing; the same model name over other weights, or
    the same weights in another dtype, makes the run again, saying which input changed."""
    from safetensors.torch import load_file, save_file

    from data_prep.loaders import save_dialogues

    dialogues, out, model = tmp_path / "ed", tmp_path / "run", tmp_path / "model"
    save_dialogues({"train": tiny_dialogues[:2], "validation": [], "test": []}, dialogues)
    shutil.copytree(tiny_model_dir, model)
    traces = out / "traces.jsonl"

    # the random model's answers may all fail (exit 1, "every trace failed"): each is a stored trace all the same
    assert _generate(str(model), "float32", dialogues, out, tmp_path) in (0, 1)
    made = traces.stat().st_mtime_ns
    assert (out / "stage-key.json").is_file() and len(traces.read_text().splitlines()) == 2
    capsys.readouterr()
    assert _generate(str(model), "float32", dialogues, out, tmp_path) == 0
    log = capsys.readouterr().out
    assert "wrote 0 traces" in log and "regenerating" not in log and traces.stat().st_mtime_ns == made, log

    assert _generate(str(model), "bfloat16", dialogues, out, tmp_path) in (0, 1)
    log = capsys.readouterr().out
    assert f"regenerating {out}: its base model changed" in log and "wrote 2 traces" in log, log
    assert json.loads((out / "run.json").read_text())["backend"]["dtype"] == "bfloat16"

    weights = load_file(str(model / "model.safetensors"))
    name = next(iter(weights))
    weights[name] = weights[name] + 1.0  # the same path and name, other weights
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    assert _generate(str(model), "bfloat16", dialogues, out, tmp_path) in (0, 1)
    log = capsys.readouterr().out
    assert f"regenerating {out}: its base model changed" in log and "wrote 2 traces" in log, log


def test_an_api_run_made_from_other_inputs_is_refused_untouched(tmp_path):
    """Its traces cost money: a changed input is one line naming it, and the run stays as it was."""
    from distill.pipeline.cli_generate import claim_run
    from distill.pipeline.store import RunInfo, StoreError, TraceStore

    store = TraceStore(tmp_path / "run")
    info = RunInfo(pipeline={}, backend_name="openai", model="gpt-4o", prompt_version="v1")
    claim_run(store, info, {"prompts": "a"}, free=False)
    store.path.write_text('{"a": "paid trace"}\n')
    claim_run(store, info, {"prompts": "a"}, free=False)  # the same key: resumed
    with pytest.raises(StoreError, match=r"run: made from other inputs \(its prompts changed\); its traces cost"):
        claim_run(store, info, {"prompts": "b"}, free=False)
    assert store.path.read_text() == '{"a": "paid trace"}\n'


def test_a_run_generated_before_keys_resumes_while_its_run_json_names_the_same_run(tmp_path, capsys):
    from distill.pipeline.cli_generate import claim_run
    from distill.pipeline.stage_key import KEY_FILE
    from distill.pipeline.store import RunInfo, TraceStore

    store = TraceStore(tmp_path / "run")
    info = RunInfo(pipeline={"rag": False}, backend_name="local", model="tiny", prompt_version="v1")
    store.claim(info)  # what an earlier version left: run.json and traces, no key
    store.path.write_text('{"old": "trace"}\n')
    claim_run(store, info, {"prompts": "a"}, free=True)
    assert (store.run_dir / KEY_FILE).is_file() and store.path.read_text() == '{"old": "trace"}\n'
    (store.run_dir / KEY_FILE).unlink()
    other = RunInfo(pipeline={"rag": True}, backend_name="local", model="tiny", prompt_version="v1")
    claim_run(store, other, {"prompts": "a"}, free=True)
    assert "its run.json differs (pipeline.rag: stored False, now True)" in capsys.readouterr().out
    assert not store.path.exists() and store.run_info() == other


def test_the_metrics_code_version_is_its_source_wherever_and_however_checked_out(tmp_path):
    from eval.metrics.registry import code_version, source_version

    copy = tmp_path / "metrics"
    shutil.copytree(REPO / "eval" / "metrics", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_version(copy) == code_version()
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "stats.cpython-311.pyc").write_bytes(b"compiled")
    stats = copy / "stats.py"
    stats.write_bytes(stats.read_bytes().replace(b"\n", b"\r\n"))  # a Windows checkout
    assert source_version(copy) == code_version()
    stats.write_text(stats.read_text() + "\n# a metric fixed\n")
    assert source_version(copy) != code_version()


def test_a_report_scored_by_other_metrics_code_is_stale(tmp_path, monkeypatch):
    """A report.json keeps its key, the metrics' code version in it: one scored before a metric was fixed is made
    again, saying so; one scored before the version was recorded is too."""
    from test_curve import _point_config, _report_of, _why

    import eval.metrics.registry as registry

    config = _point_config(tmp_path)
    stored = _report_of(config, "c.yaml")
    assert _why(stored, config, "c.yaml") is None
    monkeypatch.setattr(registry, "code_version", lambda: "a metric fixed")
    assert _why(stored, config, "c.yaml") == "its metrics code changed"
    monkeypatch.undo()
    del stored["stage_key"]["metrics code"]
    assert _why(stored, config, "c.yaml") == "its metrics code is new (not in the stored key)"
