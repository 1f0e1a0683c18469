"""`distill import` and declared pipelines: external chains read into a trace run that the toolkit uses as its own.

A tiny fixture, written here in both of ESD-CoT's formats (its own invented text, never ESD's), is imported with the
shipped mappings and the shipped escot declaration; the run is then read as any: the quality checks, `distill
datasets` (one dataset per declared role), one training step per role through train's CLI, and the students run by
the same `Pipeline` with their adapters. Every bad input is refused in one line, or counted where it is one example's.
The real-data test imports ../shared/data/esd-cot and checks its counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import require_shared_data

from distill.__main__ import main as distill
from distill.pipeline.store import TraceStore

REPO = Path(__file__).resolve().parents[1]
INSTRUCTION = REPO / "configs" / "import" / "esdcot-instruction.yaml"
FULL_CHAIN = REPO / "configs" / "import" / "esdcot-full-chain.yaml"
ESCOT = REPO / "configs" / "pipelines" / "escot.yaml"
ESD_COT = REPO.parent / "shared" / "data" / "esd-cot"
ESCOT_LABELS = yaml.safe_load(ESCOT.read_text())["labels"]["strategy"]

# (seeker turns, emotion, stimulus, appraisal, strategy, reply): short enough for the compact test pipeline below
CHAINS = [
    (["My dog died last week.", "The house is so quiet now."], "The seeker feels grief.", "Losing the dog.",
     "They blame themselves.", "Reflection of Feelings", "You miss him in every room."),
    (["I failed my driving test again.", "Third time this year."], "The seeker feels ashamed.", "Failing a test.",
     "They think they are slow.", "Affirmation and Reassurance", "Three tries shows grit."),
    (["My sister stopped calling me.", "I don't know what I did."], "The seeker feels hurt.", "A silent sister.",
     "They fear it is their fault.", "Question", "When did you last talk?"),
    (["Work keeps piling up.", "I sleep four hours a night."], "The seeker feels drained.", "Too much work.",
     "They see no way out.", "Providing Suggestions", "Could you hand one task off?"),
]  # fmt: skip


def _turns(seeker: list[str]) -> list[tuple[str, str]]:
    turns = [("supporter", "Hi, how are you today?")]
    for i, text in enumerate(seeker):
        turns += [("seeker", text)] + ([("supporter", "That sounds hard.")] if i < len(seeker) - 1 else [])
    return turns


def write_instruction(path: Path, chains=CHAINS, reason=None) -> Path:
    """ESD-CoT's instruction format: `input` lines, `output` sections; the strategy quoted in the reason."""
    rows = []
    for n, (seeker, em, _es, _ia, strategy, reply) in enumerate(chains):
        said = reason(n, strategy) if reason else f'Use "{strategy}" now.'
        rows.append({
            "instruction": "Write the supporter's reply through its chain.",
            "input": "\n".join(f"{who}: {text}" for who, text in _turns(seeker)),
            "output": f"Emotion:\n{em}\nStrategy Reason:\n{said}\nResponse:\n{reply}",
            "dialog_id": 100 + n,
        })  # fmt: skip
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def write_full_chain(path: Path, chains=CHAINS, drop=None) -> Path:
    """ESD-CoT's full-chain format; `drop` (row, cot field) removes one link of one row."""
    rows = []
    for n, (seeker, em, es, ia, strategy, reply) in enumerate(chains):
        cot = {"emotion": em, "emotion_stimuli": es, "individual_appraisal": ia, "recognized_strategy": strategy,
               "strategy_reason": f'Use "{strategy}" now.'}  # fmt: skip
        if drop and drop[0] == n:
            cot.pop(drop[1])
        dialog = [{"speaker": who, "content": text} for who, text in _turns(seeker)]
        rows.append(
            {"id": n, "original_data": {"dialog": dialog, "strategy": strategy, "response": reply}, "cot_data": cot}
        )
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def run_import(data: Path, mapping: Path, out: Path, *extra: str) -> int:
    return distill(["import", "--data", str(data), "--mapping", str(mapping), "--out", str(out), *extra])


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the shipped mappings name the pipeline as configs/pipelines/escot.yaml


def test_instruction_format_imports_as_a_run_the_datasets_read(tmp_path, capsys):
    data = write_instruction(tmp_path / "train.json", reason=lambda n, s: "No name here." if n == 3 else f'Try "{s}."')
    out = tmp_path / "run"
    assert run_import(data, INSTRUCTION, out, "--split", "train", "--max-failed-share", "0.5") == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["rows"], summary["ok"], summary["failed"], summary["roles"]) == (4, 3, 1, ["em", "sr", "re"])

    traces, problems = TraceStore(out).read()
    assert not problems and len(traces) == 4
    first = traces[0]
    assert first.outputs["sr"]["strategy"] == "Reflection of Feelings"  # the name quoted in the reason, "." aside
    assert first.outputs["em"] == {"emotion": "The seeker feels grief."}
    assert first.response == "You miss him in every room." == first.dialogue.gold_response
    assert first.dialogue.turns[-1].speaker == "seeker" and first.dialogue.emotion == ""
    failed = traces[3]
    assert failed.status == "failed" and failed.failure.startswith("sr: missing link: strategy")
    info = TraceStore(out).run_info()
    assert info.backend_name == "import" and info.model == "chatgpt-esdcot" and info.split == "train"
    assert info.source["mapping_sha256"] and info.source["data_sha256"] and info.pipeline["pipeline"]["name"] == "escot"
    assert info.pipeline["skip"] == ["es", "ia"]

    assert run_import(data, INSTRUCTION, out, "--max-failed-share", "0.5", "--split", "train") == 0  # a rerun adds none
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["written"] == 0

    datasets = tmp_path / "datasets"
    assert distill(["datasets", "--traces", str(out), "--out", str(datasets), "--eval-fraction", "0"]) == 0
    err = capsys.readouterr().err
    assert "sr: read 4, dropped [trace failed 1], kept 3" in err
    from datasets import load_from_disk

    for role in ("em", "sr", "re"):
        rows = load_from_disk(str(datasets / role))["train"]
        assert rows.num_rows == 3 and rows[0]["prompt"][0]["content"] == f"[{role}]"
    sr = load_from_disk(str(datasets / "sr"))["train"][0]
    assert "emotion: The seeker feels grief." in sr["prompt"][1]["content"]  # em's answer, upstream
    target = {"reason": 'Try "Reflection of Feelings."', "strategy": "Reflection of Feelings"}
    assert json.loads(sr["completion"][0]["content"]) == target


def test_full_chain_format_imports_all_five_links(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_import(write_full_chain(tmp_path / "test.json"), FULL_CHAIN, out, "--split", "test") == 0
    traces, _ = TraceStore(out).read()
    assert [s.role for s in traces[0].steps] == ["em", "es", "ia", "sr", "re"]
    assert all(t.status == "ok" for t in traces) and traces[2].outputs["ia"]["appraisal"] == CHAINS[2][3]
    assert all(s.attempts == 0 and s.events == ["imported"] and s.messages == [] for s in traces[0].steps)


def test_any_file_datasets_loads_goes_the_same_way(tmp_path, capsys):
    """The same rows as JSON lines and as a saved dataset folder import to the same traces."""
    from datasets import Dataset

    rows = json.loads(write_full_chain(tmp_path / "rows.json").read_text())
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    keys = []
    for source in ("rows.json", "rows.jsonl", "saved"):
        assert run_import(tmp_path / source, FULL_CHAIN, tmp_path / f"run-{source}") == 0
        keys.append(sorted(t.key for t in TraceStore(tmp_path / f"run-{source}").read()[0]))
    assert keys[0] == keys[1] == keys[2] and len(keys[0]) == 4


def test_declared_roles_render_with_their_truncation_and_trace_roles_stay():
    from data_prep.dialogues import Dialogue, Turn
    from distill.pipeline.config import PipelineConfig
    from distill.roles.roles import RoleInput

    config = PipelineConfig(pipeline=str(ESCOT), skip=["es"])
    assert config.stages() == ["em", "ia", "sr", "re"] and PipelineConfig().stages() == ["asi", "cae", "srp", "ers"]
    trace_config = PipelineConfig()  # TRACE's: a declared role never runs in it, nor TRACE's in escot
    assert not any(trace_config.runs(r) for r in ("em", "es", "ia", "sr", "re")) and not config.runs("asi")
    turns = [Turn(speaker="seeker" if i % 2 else "responder", text=f"turn {i}") for i in range(30)]
    dialogue = Dialogue(id="x", conv_id="x", turns=turns, situation="", emotion="")
    prompt = config.roles["em"].render(RoleInput(dialogue=dialogue), "student")[1]["content"]
    assert prompt.splitlines() == [f"{t.speaker}: {t.text}" for t in turns[-12:]]  # the declared last 12 turns
    schema = config.roles["sr"].schema.model_json_schema()
    assert len(schema["properties"]["strategy"]["enum"]) == 13 and schema["properties"]["reason"]["maxLength"] == 960


# --- bad input: one line, exit 2, nothing written -------------------------------------------------------------


def _refused(capsys, code: int, out: Path, *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) >= 1, err
    last = err.splitlines()[-1]
    assert all(w in last for w in words), last
    assert not out.exists(), "a refused import wrote something"


def _mapping(tmp_path: Path, base: Path, change) -> Path:
    data = yaml.safe_load(base.read_text())
    change(data)
    path = tmp_path / "mapping.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_mapping_naming_a_field_no_row_has_is_refused(tmp_path, capsys):
    mapping = _mapping(tmp_path, FULL_CHAIN, lambda m: m["answers"]["es"].update(stimulus={"field": "cot_data.cause"}))
    out = tmp_path / "run"
    _refused(
        capsys,
        run_import(write_full_chain(tmp_path / "d.json"), mapping, out),
        out,
        "answers.es.stimulus",
        "cot_data.cause",
    )


def test_a_mapping_naming_a_section_no_row_has_is_refused(tmp_path, capsys):
    def rename(m):
        m["sections"]["headers"] = ["Emotion", "Reasoning", "Response"]
        m["answers"]["sr"] = {
            "reason": {"section": "Reasoning"},
            "strategy": {"section": "Reasoning", "quoted_label": True},
        }

    out = tmp_path / "run"
    code = run_import(write_instruction(tmp_path / "d.json"), _mapping(tmp_path, INSTRUCTION, rename), out)
    _refused(capsys, code, out, "section 'Reasoning'", "no row")


def test_a_mapping_that_leaves_a_declared_field_without_a_source_is_refused(tmp_path, capsys):
    mapping = _mapping(tmp_path, FULL_CHAIN, lambda m: m["answers"].pop("ia"))
    out = tmp_path / "run"
    _refused(capsys, run_import(write_full_chain(tmp_path / "d.json"), mapping, out), out, "answers.ia", "appraisal")


def test_an_example_missing_a_link_is_counted_and_refused_past_the_share(tmp_path, capsys):
    data = write_full_chain(tmp_path / "d.json", drop=(1, "individual_appraisal"))
    out = tmp_path / "run"
    _refused(capsys, run_import(data, FULL_CHAIN, out), out, "1 of 4 examples lack a link", "ia: appraisal")
    assert run_import(data, FULL_CHAIN, out, "--max-failed-share", "0.25") == 0
    assert "failed 1: ia: appraisal: no field 'cot_data.individual_appraisal' (e.g. id 1)" in capsys.readouterr().err
    assert [t.status for t in TraceStore(out).read()[0]] == ["ok", "failed", "ok", "ok"]


def test_a_strategy_outside_the_label_set_fails_its_example(tmp_path, capsys):
    chains = [*CHAINS[:3], (*CHAINS[3][:4], "Cheering Up", CHAINS[3][5])]
    out = tmp_path / "run"
    _refused(capsys, run_import(write_full_chain(tmp_path / "d.json", chains), FULL_CHAIN, out), out, "sr: strategy")
    assert run_import(write_full_chain(tmp_path / "d.json", chains), FULL_CHAIN, out, "--max-failed-share", "1") == 0
    failed = [t for t in TraceStore(out).read()[0] if t.status == "failed"]
    assert len(failed) == 1 and "Cheering Up" in failed[0].failure


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda p: p["roles"][0].update(inputs=["re"]), ("inputs of role(s)", "make a cycle")),
        (lambda p: p["roles"][1].update(inputs=["mood"]), ("role 'es'", "unknown role(s) mood")),
        (lambda p: p["roles"][0].update(context_turns=0), ("context_turns 0 leaves the role no dialogue context",)),
        (lambda p: p["roles"][4]["answer"]["response"].update(label="tones"), ("answer field is either",)),
    ],
    ids=["cycle", "unknown-input", "no-context", "text-and-label"],
)
def test_a_bad_declaration_is_refused_in_one_line(tmp_path, capsys, change, words):
    pipeline = yaml.safe_load(ESCOT.read_text())
    change(pipeline)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline))
    mapping = _mapping(tmp_path, FULL_CHAIN, lambda m: m.update(pipeline=str(tmp_path / "p.yaml")))
    out = tmp_path / "run"
    _refused(
        capsys, run_import(write_full_chain(tmp_path / "d.json"), mapping, out), out, str(tmp_path / "p.yaml"), *words
    )


# --- train one step per role, run the students --------------------------------------------------------------


def compact_pipeline(pipeline: Path, path: Path, max_new_tokens: int = 96) -> Path:
    """A shipped pipeline with answers capped at 40 characters, so a random 2-layer model's constrained JSON closes
    (or stops) in time."""
    data = yaml.safe_load(pipeline.read_text())
    for role in data["roles"]:
        role["max_new_tokens"] = max_new_tokens
        for answer in role["answer"].values():
            if "text" in answer:
                answer["text"] = 40
    path.write_text(yaml.safe_dump(data))
    return path


def one_step_argv(model: str, pipeline: Path, datasets: Path, adapters: Path) -> list[str]:
    """`train`'s flags for one step per role of a declared pipeline on the tiny model: a test's training."""
    return ["--model_name_or_path", model, "--pipeline", str(pipeline), "--dataset_name", str(datasets),
            "--output_dir", str(adapters), "--max_steps", "1", "--per_device_train_batch_size", "2",
            "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--card_example", "false",
            "--num_threads", "1"]  # fmt: skip


@pytest.mark.slow
def test_imported_chain_trains_a_student_per_role_that_the_pipeline_runs(tmp_path, tiny_model_dir, capsys):
    from distill.adapters.adapters import read_metadata
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline
    from train.__main__ import main as train

    pipeline = compact_pipeline(ESCOT, tmp_path / "escot-compact.yaml")
    mapping = _mapping(tmp_path, FULL_CHAIN, lambda m: m.update(pipeline=str(pipeline)))
    assert run_import(write_full_chain(tmp_path / "train.json"), mapping, tmp_path / "run", "--split", "train") == 0
    datasets, adapters = tmp_path / "datasets", tmp_path / "adapters"
    assert distill(["datasets", "--traces", str(tmp_path / "run"), "--out", str(datasets)]) == 0
    assert train(one_step_argv(tiny_model_dir, pipeline, datasets, adapters)) == 0
    roles = ["em", "es", "ia", "sr", "re"]
    assert all(read_metadata(adapters / r)["global_step"] == 1 for r in roles)

    config = PipelineConfig(pipeline=str(pipeline), prompt_style="student", use_adapters=True, max_attempts=1)
    backend = LocalBackend(tiny_model_dir, adapters=str(adapters), batch_size=4, dtype="float32")
    dialogues = [t.dialogue for t in TraceStore(tmp_path / "run").read()[0]]
    traces = Pipeline(config, backend).run(dialogues, progress=False)
    assert sorted(backend.adapter_names) == sorted(roles) and backend.switches >= len(roles)  # one adapter a stage
    for trace in traces:  # constrained JSON: every stage of every dialogue answers in its declared schema
        assert trace.status == "ok" and [s.role for s in trace.steps] == roles and trace.response
        assert trace.steps[0].messages[0]["content"] == "[em]" and trace.outputs["sr"]["strategy"] in ESCOT_LABELS
        assert f"strategy: {trace.outputs['sr']['strategy']}" in trace.steps[-1].messages[1]["content"]  # re reads sr


# --- the real files ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_esd_cot_imports_with_its_counts(tmp_path, capsys):
    expected = {"train_em_sr_re.json": 1195, "train_full_chain_200.json": 200, "val.json": 172, "test.json": 341}
    files = {name: require_shared_data(ESD_COT / name) for name in expected}
    for name, path in files.items():
        mapping = INSTRUCTION if name.startswith("train_em") else FULL_CHAIN
        assert run_import(path, mapping, tmp_path / name) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        traces, problems = TraceStore(tmp_path / name).read()
        assert summary["rows"] == len(traces) == expected[name] and not problems
        failed = [t for t in traces if t.status == "failed"]
        assert summary["failed"] == len(failed)
        if name.startswith("train_em"):
            assert summary["ok"] >= 1176 and all(f.failure.startswith("sr: missing link: strategy") for f in failed)
        else:
            assert not failed and all(len(t.outputs) == 5 for t in traces)


def test_a_declared_pipeline_leaves_the_built_in_prompt_keys_alone():
    """The prompts in a stage's key are those of the roles it renders: which declared pipelines a process has
    read (a compare with an escot system beside TRACE's) must not make TRACE's stored systems stale."""
    from distill.pipeline.stage_key import prompt_fingerprint
    from distill.roles.declared import load_pipeline

    before = {style: prompt_fingerprint(style) for style in ("teacher", "student")}
    escot = load_pipeline(ESCOT).specs()
    assert {style: prompt_fingerprint(style) for style in ("teacher", "student")} == before
    assert prompt_fingerprint("student", escot) != before["student"]
