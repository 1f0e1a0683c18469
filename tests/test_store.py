"""The trace store: durable appends, a tolerant reader, and run dirs that refuse a foreign config."""

from __future__ import annotations

import json

import pytest

from data_prep.dialogues import Dialogue, Turn
from distill.backends import make_backend
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.pipeline.store import RunInfo, StoreError, TraceStore
from distill.pipeline.trace import Step, Trace, trace_key


def _trace(dialogue, key: str) -> Trace:
    step = Step(
        role="asi",
        messages=[{"role": "user", "content": "x"}],
        raw='{"emotion": "fear"}',
        parsed={"reasoning": "r", "emotion": "fear"},
    )
    return Trace(
        key=key,
        dialogue=dialogue,
        backend="local",
        model="m",
        prompt_version="v1",
        prompt_style="teacher",
        config={},
        steps=[step],
        outputs={"asi": step.parsed},
    )


def _info(**changes):
    info = {"pipeline": {"reflection": False}, "backend_name": "local", "model": "m", "prompt_version": "v1"}
    info.update(changes)
    return RunInfo(**info)


def test_append_read_roundtrip_and_duplicate_keys(tmp_path, tiny_dialogues):
    store = TraceStore(tmp_path)
    assert store.append(_trace(tiny_dialogues[0], "k0"))
    assert store.append(_trace(tiny_dialogues[1], "k1"))
    assert not store.append(_trace(tiny_dialogues[2], "k0"))  # same key: nothing written
    traces, problems = TraceStore(tmp_path).read()
    assert [t.key for t in traces] == ["k0", "k1"] and problems == []
    assert traces[0].dialogue == tiny_dialogues[0]
    # A duplicate that reached the file anyway (two writers) resolves to the first record.
    with open(store.path, "a", encoding="utf-8") as fh:
        fh.write(_trace(tiny_dialogues[3], "k1").model_dump_json() + "\n")
    traces, problems = TraceStore(tmp_path).read()
    assert [t.dialogue.id for t in traces] == [tiny_dialogues[0].id, tiny_dialogues[1].id]
    assert problems == [f"{store.path} line 3: duplicate key k1 (kept line 2)"]


def test_reader_reports_truncated_and_foreign_lines_and_writer_repairs(tmp_path, tiny_dialogues):
    store = TraceStore(tmp_path)
    store.append(_trace(tiny_dialogues[0], "k0"))
    full = _trace(tiny_dialogues[1], "k1").model_dump_json()
    with open(store.path, "a", encoding="utf-8") as fh:
        fh.write("this is not json\n")
        fh.write(json.dumps({"hello": "world"}) + "\n")
        fh.write(full[: len(full) // 2])  # a writer killed mid-line
    traces, problems = TraceStore(tmp_path).read()
    assert [t.key for t in traces] == ["k0"]
    assert len(problems) == 3
    assert "line 2: not JSON" in problems[0]
    assert "line 3: not a trace (field 'key'" in problems[1]
    assert "line 4: truncated last line" in problems[2]
    # The next append cuts the partial line off, so the new record is whole and readable.
    fresh = TraceStore(tmp_path)
    assert fresh.append(_trace(tiny_dialogues[1], "k1"))
    traces, problems = TraceStore(tmp_path).read()
    assert [t.key for t in traces] == ["k0", "k1"]
    assert len(problems) == 2 and not any("truncated last line" in p for p in problems)
    assert store.path.read_bytes().endswith(b"\n")


def test_run_json_written_once_and_foreign_config_refused(tmp_path):
    store = TraceStore(tmp_path / "run")
    store.claim(_info(source={"split": "train"}))
    first = store.run_path.read_text()
    TraceStore(tmp_path / "run").claim(_info(source={"split": "validation"}))  # same config: fine
    assert store.run_path.read_text() == first
    with pytest.raises(StoreError, match=r"run\.json: field 'pipeline' differs .*reflection: stored False, now True"):
        TraceStore(tmp_path / "run").claim(_info(pipeline={"reflection": True}))
    with pytest.raises(StoreError, match="field 'model' differs"):
        TraceStore(tmp_path / "run").claim(_info(model="other"))


def test_traces_without_run_json_are_not_adopted(tmp_path, tiny_dialogues):
    TraceStore(tmp_path).append(_trace(tiny_dialogues[0], "k0"))
    with pytest.raises(StoreError, match="traces without a run.json"):
        TraceStore(tmp_path).claim(_info())


def test_empty_or_missing_store_reads_empty(tmp_path):
    assert TraceStore(tmp_path / "nothing").read() == ([], [])
    assert len(TraceStore(tmp_path / "nothing")) == 0


# The pipeline section of a run.json written before reflection's final pick changed (a real
# gold-guided trace run of the embedded teacher, configs/teacher/local.yaml).
_OLDER_RUN_PIPELINE = {
    "caef": False, "gold_emotion": True, "gold_response": False, "later_iteration_penalty": 0.5,
    "max_attempts": 2, "max_refinements": 2, "perspective": False, "phase": False, "plan": False,
    "prompt_style": "teacher", "rag": True, "rag_k": 2, "rag_tau": None, "reflection": False, "seed": 0,
    "temperatures": {}, "use_adapters": False, "use_asi": True, "use_cae": True, "use_srp": True,
}  # fmt: skip


def test_trace_runs_made_before_new_pipeline_fields_keep_their_key():
    same = PipelineConfig(gold_emotion=True, max_attempts=2)
    assert same.key_dict() == _OLDER_RUN_PIPELINE  # so its run.json matches and its trace keys resume
    assert PipelineConfig(gold_emotion=True, max_attempts=2, retry_temperature=None).key_dict() != _OLDER_RUN_PIPELINE
    reflecting = PipelineConfig(gold_emotion=True, max_attempts=2, reflection=True).key_dict()
    assert "later_iteration_penalty" not in reflecting  # MERG's final pick changed: no resuming those


# Written here, not taken from a fixture, so that only a change to `Dialogue` or to the key recipe moves the
# pins below. The non-ASCII 'café' pins how the key's JSON is encoded too.
_PINNED_DIALOGUE = Dialogue(
    id="pinned:0#1",
    conv_id="pinned:0",
    turns=[
        Turn(speaker="seeker", text="I ran my first marathon today, in the rain!"),
        Turn(speaker="responder", text="Wow, how did it feel?"),
        Turn(speaker="seeker", text="Like flying. My friends at the café cheered at the finish."),
    ],
    situation="I ran my first marathon.",
    emotion="happiness",
    emotion_fine="proud",
    gold_response="That is huge, congratulations on finishing!",
)


def test_trace_keys_are_pinned_across_versions():
    """A stored run's traces are found again by key, so a key that moves (a field added to `Dialogue`, the
    recipe changed) makes every existing run regenerate every dialogue, and an API teacher be paid again.
    These values are what trace-distill 0.1.0 computes; change them only on purpose (a new prompt version
    does move the second), and say in the CHANGELOG that older runs will not resume."""
    assert trace_key(_PINNED_DIALOGUE, _OLDER_RUN_PIPELINE, "local", "smollm2-135m", "v2") == (
        "ac203dcfa50a78bd868779c154fb81e7"
    )
    # the pipeline's own key: the config's key_dict, the backend's name and model, the teacher prompt version
    backend = make_backend({"type": "openai", "model": "gpt-4o", "base_url": "http://127.0.0.1:9/v1"})
    pipeline = Pipeline(PipelineConfig(gold_emotion=True, max_attempts=2), backend)
    assert pipeline.key(_PINNED_DIALOGUE) == "bf541c39e71b67c6094bc6f74efbed6e"


def test_top_p_and_min_p_enter_the_trace_key_only_when_set():
    """Runs made before top_p and min_p existed, and runs that leave them unset, keep their keys and resume."""
    assert PipelineConfig(gold_emotion=True, max_attempts=2, top_p={}, min_p={}).key_dict() == _OLDER_RUN_PIPELINE
    nucleus = PipelineConfig(gold_emotion=True, max_attempts=2, top_p={"ers": 0.9}).key_dict()
    assert nucleus == {**_OLDER_RUN_PIPELINE, "top_p": {"ers": 0.9}}
    floor = PipelineConfig(gold_emotion=True, max_attempts=2, min_p={"ers": 0.05}).key_dict()
    assert floor == {**_OLDER_RUN_PIPELINE, "min_p": {"ers": 0.05}}
    keys = {
        trace_key(_PINNED_DIALOGUE, c, "local", "smollm2-135m", "v2") for c in (_OLDER_RUN_PIPELINE, nucleus, floor)
    }
    assert len(keys) == 3


def test_a_run_from_before_a_new_setting_is_refused_naming_what_to_delete(tmp_path):
    """A teacher run made before `stop_loops` (its run.json has no such field) cannot resume under today's teacher
    config, which turns it on: the refusal says what to delete, and the quickstart never says "rerun to resume"."""
    from distill.pipeline.config import PipelineConfig
    from eval.quickstart import _check

    before = PipelineConfig(prompt_style="teacher").key_dict()
    assert "stop_loops" not in before  # a field at its default is not in the key: old runs keep theirs
    store = TraceStore(tmp_path / "teacher-train")
    store.claim(_info(pipeline=before))
    store.claim(_info(pipeline=PipelineConfig(prompt_style="teacher", stop_loops=False).key_dict()))  # the same run
    now = PipelineConfig(prompt_style="teacher", stop_loops=True).key_dict()
    with pytest.raises(StoreError, match=rf"stop_loops: stored None, now True.*delete {tmp_path / 'teacher-train'} "):
        store.claim(_info(pipeline=now))
    with pytest.raises(SystemExit) as refused:
        _check(2, "generate train")  # the exit code of a refused input (data_prep.commands.user_error)
    assert "rerun to resume" not in str(refused.value) and "the line above says why" in str(refused.value)
