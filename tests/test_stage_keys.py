"""Keys by content (`distill.pipeline.stage_key`): a path enters a key where it is, inside the run relative to it,
never as it was spelled; a trace run a pipeline reads enters as its content."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from distill.pipeline.stage_key import digest, located, placed

REPO = Path(__file__).resolve().parents[1]


def test_a_path_is_keyed_where_it_is_not_as_spelled(tmp_path, monkeypatch):
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
