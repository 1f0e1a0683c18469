"""Traces → per-role SFT datasets: prompts, targets, filters, the conversation split, cards, the CLI.

Filter and split cases use hand-built `Trace`s so the expected counts are exact; the end-to-end test
builds its trace run with the real pipeline and local backend on the embedded model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.dialogues import Dialogue, Turn
from distill import __version__
from distill.__main__ import main as distill_main
from distill.datasets.dataset_card import BUILD_FILE
from distill.datasets.sft_data import BuildReport, DatasetOptions, build_role_datasets, validation_conv_ids
from distill.pipeline.config import PipelineConfig
from distill.pipeline.trace import Trace, trace_key
from distill.roles.roles import CORE_ROLES, PROMPT_VERSION, ROLES, RoleInput


def teacher_outputs(d: Dialogue, emotion: str | None = None) -> dict[str, dict]:
    seeker = d.turns[-1].text
    return {
        "asi": {"reasoning": f"The seeker says: {seeker[:40]}", "emotion": emotion or d.emotion},
        "cae": {
            "triggers": [seeker[:30]],
            "cause": f"Because of {d.situation[:40]}",
            "category": "Unexpectedness & Novelty",
        },
        "srp": {"reasoning": "They need warmth first.", "strategy": "ER"},
        "ers": {"response": f"Oh no, {seeker[:20].lower()} sounds hard."},
    }


def make_trace(
    d: Dialogue, outputs: dict | None = None, status: str = "ok", config: PipelineConfig | None = None, tag: str = ""
) -> Trace:
    cfg = (config or PipelineConfig()).model_dump()
    return Trace(
        key=trace_key(d, cfg, "local", "tiny", PROMPT_VERSION) + tag,
        dialogue=d,
        backend="local",
        model="tiny",
        prompt_version=PROMPT_VERSION,
        prompt_style="teacher",
        config=cfg,
        outputs=teacher_outputs(d) if outputs is None else outputs,
        failure="asi: invalid output" if status == "failed" else None,
    )


def student_prompt(role: str, d: Dialogue, outputs: dict[str, dict]) -> list[dict]:
    """What the student sees at inference, straight from the registry renderer."""
    spec = ROLES[role]
    upstream = {r: ROLES[r].schema(**outputs[r]) for r in spec.inputs if r in outputs}
    return spec.render(RoleInput(dialogue=d, upstream=upstream), "student")


def test_rows_are_student_prompts_with_schema_json_completions(tiny_dialogues):
    traces = [make_trace(d) for d in tiny_dialogues[:4]]
    built = build_role_datasets(traces, options=DatasetOptions(eval_fraction=0.0))
    assert sorted(built) == sorted(CORE_ROLES)
    for role in CORE_ROLES:
        rows = list(built[role]["train"])
        assert len(rows) == 4
        for row, trace in zip(rows, traces):
            assert row["prompt"] == student_prompt(role, trace.dialogue, trace.outputs)
            content = row["completion"][0]["content"]
            assert row["completion"][0]["role"] == "assistant"
            # the student learns the teacher's answer, for classification roles the decision alone
            target = {
                k: v for k, v in trace.outputs[role].items() if k in ROLES[role].schema_for("student").model_fields
            }
            assert ROLES[role].schema_for("student").model_validate_json(content).model_dump() == target
            assert content == json.dumps(target, separators=(",", ":"), ensure_ascii=False)
            assert row["messages"] == row["prompt"] + row["completion"]
            assert (row["dialogue_id"], row["conv_id"], row["key"]) == (
                trace.dialogue.id,
                trace.dialogue.conv_id,
                trace.key,
            )
    assert json.loads(built["asi"]["train"][0]["completion"][0]["content"]) == {
        "emotion": traces[0].outputs["asi"]["emotion"]
    }
    assert json.loads(built["srp"]["train"][0]["completion"][0]["content"]) == {
        "strategy": traces[0].outputs["srp"]["strategy"]
    }
    # teacher forcing: cae reads the teacher's own asi answer
    assert f"emotion: {traces[0].outputs['asi']['emotion']}" in built["cae"]["train"][0]["prompt"][1]["content"]


def filter_case(tiny_dialogues) -> list[Trace]:
    good = [make_trace(d) for d in tiny_dialogues[:4]]
    wrong = tiny_dialogues[4]  # surprise, answered as fear
    bad_asi = tiny_dialogues[5]
    return good + [
        make_trace(tiny_dialogues[0], tag="-again"),  # same prompt and completion as good[0]
        make_trace(tiny_dialogues[6], status="failed"),
        make_trace(wrong, outputs=teacher_outputs(wrong, emotion="fear")),
        make_trace(bad_asi, outputs={**teacher_outputs(bad_asi), "asi": {"reasoning": "x", "emotion": "joy"}}),
    ]


def test_each_filter_changes_counts_exactly(tiny_dialogues):
    traces = filter_case(tiny_dialogues)
    report = BuildReport()
    build_role_datasets(traces, options=DatasetOptions(eval_fraction=0.0), report=report)
    assert report.counts["asi"].as_dict()["dropped"] == {"duplicate": 1, "invalid output": 1, "trace failed": 1}
    assert report.counts["asi"].kept == 5 and report.counts["asi"].read == 8
    assert report.counts["cae"].dropped == {"duplicate": 1, "invalid upstream output": 1, "trace failed": 1}
    assert report.counts["srp"].kept == 5

    report = BuildReport()
    build_role_datasets(traces, options=DatasetOptions(eval_fraction=0.0, require_gold_emotion=True), report=report)
    # 'fear' for a surprise dialogue, and the invalid 'joy', both differ from gold
    assert report.counts["asi"].dropped == {"duplicate": 1, "emotion differs from gold": 2, "trace failed": 1}
    assert report.counts["asi"].kept == 4

    report = BuildReport()
    build_role_datasets(traces, options=DatasetOptions(eval_fraction=0.0, dedup=False), report=report)
    assert report.counts["asi"].kept == 6 and "duplicate" not in report.counts["asi"].dropped


def test_gold_ers_target_replaces_teacher_reply(tiny_dialogues):
    no_gold = tiny_dialogues[1].model_copy(update={"gold_response": None})
    traces = [make_trace(d) for d in tiny_dialogues[:1]] + [make_trace(no_gold)]
    report = BuildReport()
    built = build_role_datasets(traces, ["ers"], DatasetOptions(eval_fraction=0.0, ers_target="gold"), report)
    assert report.counts["ers"].dropped == {"no gold response": 1}
    row = built["ers"]["train"][0]
    assert json.loads(row["completion"][0]["content"]) == {"response": tiny_dialogues[0].gold_response}
    assert row["prompt"] == student_prompt("ers", tiny_dialogues[0], traces[0].outputs)  # still teacher upstream


def test_balance_emotions_evens_asi_train_rows_only(tiny_dialogues):
    """asi train rows are repeated up to the commonest emotion's count; other roles and validation are untouched."""
    from collections import Counter

    skewed = [
        d.model_copy(update={"id": f"{d.id}-{i}", "conv_id": f"{d.conv_id}-{i}"})
        for i in range(3)
        for d in tiny_dialogues[:1]
    ]
    traces = [make_trace(d) for d in skewed + tiny_dialogues[1:3]]
    emotions = Counter(t.outputs["asi"]["emotion"] for t in traces)
    assert max(emotions.values()) == 3 and min(emotions.values()) == 1  # the case is skewed 3:1

    def asi_emotions(options):
        built = build_role_datasets(traces, ["asi", "srp"], options)
        rows = built["asi"]["train"]
        return Counter(json.loads(r["completion"][0]["content"])["emotion"] for r in rows), built

    plain, _ = asi_emotions(DatasetOptions(eval_fraction=0.0, dedup=False))  # the copies share a prompt
    balanced, built = asi_emotions(DatasetOptions(eval_fraction=0.0, dedup=False, balance_emotions=True))
    assert plain == emotions
    assert set(balanced) == set(emotions) and set(balanced.values()) == {3}
    assert len(built["srp"]["train"]) == len(traces)  # only asi is balanced
    again, _ = asi_emotions(DatasetOptions(eval_fraction=0.0, dedup=False, balance_emotions=True))
    assert again == balanced


def test_split_is_by_conversation_and_seeded(tiny_dialogues):
    # a second example of each conversation (a later listener turn) must land beside the first
    more = [Turn(speaker="responder", text="How did that feel?"), Turn(speaker="seeker", text="Still sinking in.")]
    later = [d.model_copy(update={"id": d.id.replace("#1", "#3"), "turns": d.turns + more}) for d in tiny_dialogues]
    traces = [make_trace(d) for d in tiny_dialogues + later]
    built = build_role_datasets(traces, ["asi"], DatasetOptions(eval_fraction=0.25, seed=3))
    train_ids, val_ids = set(built["asi"]["train"]["conv_id"]), set(built["asi"]["validation"]["conv_id"])
    assert not train_ids & val_ids and len(val_ids) == 2 and len(train_ids) == 6
    assert built["asi"]["validation"].num_rows == 4
    assert val_ids == validation_conv_ids([d.conv_id for d in reversed(tiny_dialogues)], 0.25, 3)  # order-free
    seeds = {frozenset(validation_conv_ids([d.conv_id for d in tiny_dialogues], 0.25, s)) for s in range(6)}
    assert len(seeds) > 1


def test_ablated_role_gets_no_dataset(tiny_dialogues):
    config = PipelineConfig(use_cae=False)
    traces = [
        make_trace(d, outputs={k: v for k, v in teacher_outputs(d).items() if k != "cae"}, config=config)
        for d in tiny_dialogues[:3]
    ]
    report = BuildReport()
    built = build_role_datasets(traces, list(CORE_ROLES), DatasetOptions(eval_fraction=0.0), report)
    assert sorted(built) == ["asi", "ers", "srp"]
    assert "cae" in report.skipped_roles
    srp_prompt = built["srp"]["train"][0]["prompt"][1]["content"]
    assert "category:" not in srp_prompt and "emotion:" in srp_prompt


# --- the CLI on a trace run directory ------------------------------------------------------------

SECRET = "sk-test-never-in-a-card"


def write_run(run_dir: Path, traces: list[Trace], split: str = "train") -> None:
    from distill.pipeline.store import RunInfo, TraceStore

    store = TraceStore(run_dir)
    store.claim(
        RunInfo(
            pipeline=traces[0].config,
            backend_name=traces[0].backend,
            model=traces[0].model,
            prompt_version=traces[0].prompt_version,
            split=split,
            backend={"name": traces[0].backend, "model": traces[0].model, "api_key": SECRET, "base_url": SECRET},
        )
    )
    for t in traces:
        store.append(t)


def test_cli_writes_loadable_datasets_with_cards(tiny_dialogues, tmp_path, capsys):
    from datasets import load_from_disk

    write_run(tmp_path / "run", filter_case(tiny_dialogues))
    rc = distill_main(
        [
            "datasets",
            "--traces",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "sft"),
            "--roles",
            "asi,cae",
            "--eval-fraction",
            "0.25",
            "--require-gold-emotion",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "asi: read 8, dropped [duplicate 1, emotion differs from gold 2, trace failed 1], kept 4" in err
    assert sorted(p.name for p in (tmp_path / "sft").iterdir()) == ["asi", "cae"]
    dd = load_from_disk(str(tmp_path / "sft" / "asi"))
    assert sorted(dd) == ["train", "validation"] and dd["train"].num_rows + dd["validation"].num_rows == 4
    assert not set(dd["train"]["conv_id"]) & set(dd["validation"]["conv_id"])
    assert ROLES["asi"].schema_for("student").model_validate_json(dd["train"][0]["completion"][0]["content"])
    card = (tmp_path / "sft" / "asi" / "README.md").read_text()
    assert SECRET not in card
    for expected in (
        '"backend_name": "local"',
        '"model": "tiny"',
        f"teacher prompt version(s): {PROMPT_VERSION}",
        '"require_gold_emotion": true',
        "| emotion differs from gold | 2 |",
        "| trace failed | 1 |",
        f"| train | {dd['train'].num_rows} | `{dd['train']._fingerprint}` |",
        f"| validation | {dd['validation'].num_rows} | `{dd['validation']._fingerprint}` |",
        "gold guidance shown to the teacher: emotion no, response no",
        '"use_cae": true',
        "- `emotion`: anger, fear, disgust, happiness, sadness, surprise",
    ):
        assert expected in card, expected
    record = json.loads((tmp_path / "sft" / "asi" / BUILD_FILE).read_text())
    assert record["trace_distill_version"] == __version__
    cae_card = (tmp_path / "sft" / "cae" / "README.md").read_text()  # TRACE's six antecedent-event categories
    assert "- `category`: Social Connection & Affection, Conflict & Injustice, Loss & Failure, " in cae_card
    assert "Achievement & Success, Threat & Potential Danger, Unexpectedness & Novelty" in cae_card


def test_cli_reports_a_damaged_run_and_still_builds(tiny_dialogues, tmp_path, capsys):
    run_dir = tmp_path / "run"
    write_run(run_dir, [make_trace(d) for d in tiny_dialogues[:3]])
    with open(run_dir / "traces.jsonl", "a", encoding="utf-8") as fh:
        fh.write("this is not json\n")
        fh.write(json.dumps({"hello": "world"}) + "\n")
        fh.write(make_trace(tiny_dialogues[3]).model_dump_json()[:120])  # a writer killed mid-line
    (run_dir / "notes.txt").write_text("scratch notes\n")
    rc = distill_main(["datasets", "--traces", str(run_dir), "--out", str(tmp_path / "sft"), "--roles", "asi"])
    err = capsys.readouterr().err
    assert rc == 0
    assert f"{run_dir / 'traces.jsonl'} line 4: not JSON" in err
    assert f"{run_dir / 'traces.jsonl'} line 5: not a trace" in err
    assert f"{run_dir / 'traces.jsonl'} line 6: truncated last line" in err
    assert f"{run_dir / 'notes.txt'}: not part of a trace run; ignored" in err
    assert "asi: read 3, dropped [none], kept 3" in err
    assert (tmp_path / "sft" / "asi" / "dataset_dict.json").is_file()


def test_cli_bad_inputs_are_one_clear_line(tiny_dialogues, tmp_path, capsys):
    missing = tmp_path / "nope"
    assert distill_main(["datasets", "--traces", str(missing), "--out", str(tmp_path / "o")]) == 2
    want = f"python -m distill datasets: error: trace run directory {missing} does not exist"
    assert capsys.readouterr().err.strip() == want

    write_run(tmp_path / "run", [make_trace(d) for d in tiny_dialogues[:2]], split="train")
    assert (
        distill_main(
            ["datasets", "--traces", str(tmp_path / "run"), "--out", str(tmp_path / "o"), "--roles", "asi,xyz"]
        )
        == 2
    )
    assert "unknown role 'xyz'" in capsys.readouterr().err
    rc = distill_main(["datasets", "--traces", str(tmp_path / "run"), "--out", str(tmp_path / "o"), "--split", "test"])
    err = capsys.readouterr().err
    assert rc == 2 and "--split test: no trace of this run is from that split (its traces are from: train)" in err
    assert not (tmp_path / "o").exists()  # nothing written for a split the run does not have


def test_push_to_hub_failure_is_one_error_line(tiny_dialogues, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_run(tmp_path / "run", [make_trace(d) for d in tiny_dialogues[:2]])
    rc = distill_main(
        [
            "datasets",
            "--traces",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "sft"),
            "--roles",
            "asi",
            "--push-to-hub",
            "someone/tiny-sft",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert rc == 1 and len(errors) == 1
    assert errors[0].startswith(f"error: push of {tmp_path / 'sft' / 'hub'} to someone/tiny-sft failed: ")
    assert (tmp_path / "sft" / "hub" / "README.md").is_file()  # the staged payload is kept


class HubRecorder:
    """Stands in for `huggingface_hub.HfApi`: records the repo and the files one upload would send."""

    calls: list = []

    def create_repo(self, repo_id, repo_type=None, private=False, exist_ok=False):
        self.calls.append(("create_repo", repo_id, repo_type, private))

    def upload_folder(self, folder_path, repo_id, repo_type=None, commit_message=None):
        files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
        self.calls.append(("upload_folder", repo_id, repo_type, files))


def test_push_to_hub_sends_one_dataset_with_a_config_per_role(tiny_dialogues, tmp_path, monkeypatch):
    """The payload is one dataset repo; loaded back with load_dataset(<payload>, <role>) it is each role's data."""
    import huggingface_hub
    import yaml
    from datasets import load_dataset, load_from_disk

    HubRecorder.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", HubRecorder)
    write_run(tmp_path / "run", [make_trace(d) for d in tiny_dialogues], split="train")
    out = tmp_path / "sft"
    args = ["datasets", "--traces", str(tmp_path / "run"), "--out", str(out), "--roles", "asi,cae"]
    assert distill_main([*args, "--push-to-hub", "me/td-sft", "--eval-fraction", "0.3"]) == 0
    assert HubRecorder.calls[0] == ("create_repo", "me/td-sft", "dataset", False)
    kind, repo, repo_type, files = HubRecorder.calls[1]
    assert (kind, repo, repo_type) == ("upload_folder", "me/td-sft", "dataset")
    assert files == [
        "README.md",
        "asi/train-00000-of-00001.parquet",
        "asi/validation-00000-of-00001.parquet",
        "cae/train-00000-of-00001.parquet",
        "cae/validation-00000-of-00001.parquet",
    ]
    card = (out / "hub" / "README.md").read_text()
    header = yaml.safe_load(card.split("---")[1])
    assert header["license"] == "cc-by-nc-4.0" and header["language"] == ["en"]
    assert [c["config_name"] for c in header["configs"]] == ["asi", "cae"]
    assert (
        "EmpatheticDialogues" in card
        and "gold guidance shown to the teacher: emotion no" in card
        and SECRET not in card
    )
    for role in ("asi", "cae"):
        record = json.loads((out / role / "trace_distill_dataset.json").read_text())
        assert f"traces read {record['counts']['read']}, kept {record['counts']['kept']}" in card
        staged, saved = load_dataset(str(out / "hub"), role), load_from_disk(str(out / role))
        assert staged["train"]["completion"] == saved["train"]["completion"]
        assert staged["validation"]["dialogue_id"] == saved["validation"]["dialogue_id"]


@pytest.mark.slow
def test_end_to_end_on_a_run_from_the_local_backend(tiny_dialogues, smollm_path, tmp_path, capsys):
    """The real pipeline on the embedded model writes the run; every row must match its trace exactly."""
    from datasets import load_from_disk

    from distill.backends.local import LocalBackend
    from distill.pipeline.pipeline import Pipeline
    from distill.pipeline.store import RunInfo, TraceStore

    backend = LocalBackend("smollm2-135m", batch_size=8)
    config = PipelineConfig(rag=False, max_attempts=1)  # CPU time: a failed trace is a case we handle anyway
    store = TraceStore(tmp_path / "run")
    store.claim(
        RunInfo(
            pipeline=config.key_dict(),
            backend_name=backend.name,
            model=backend.model,
            prompt_version=PROMPT_VERSION,
            backend=backend.describe(),
            split="train",
        )
    )
    dialogues = tiny_dialogues[:4]
    Pipeline(config, backend).run_into(store, dialogues)
    traces = {t.key: t for t in store.read()[0]}
    assert len(traces) == 4

    rc = distill_main(
        [
            "datasets",
            "--traces",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "sft"),
            "--eval-fraction",
            "0.25",
            "--split",
            "train",
            # every kept row is compared with its trace below; on 4 dialogues the 135M teacher's outputs could
            # all fail a quality check (tests/test_quality_gates.py tests the filter), so rows are kept and counted
            "--quality",
            "report",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    ok = [t for t in traces.values() if t.status == "ok"]
    assert ok, "the embedded model produced no complete trace"
    for role in CORE_ROLES:
        dd = load_from_disk(str(tmp_path / "sft" / role))
        rows = list(dd["train"]) + list(dd["validation"])
        assert f"{role}: read 4," in err
        assert len(rows) == len({(json.dumps(r["prompt"]), json.dumps(r["completion"])) for r in rows})
        assert not set(dd["train"]["conv_id"]) & set(dd["validation"]["conv_id"])
        for row in rows:
            trace = traces[row["key"]]
            assert trace.status == "ok"
            assert row["prompt"] == student_prompt(role, trace.dialogue, trace.outputs)
            answer = ROLES[role].schema_for("student").model_validate_json(row["completion"][0]["content"])
            assert ROLES[role].student_target(ROLES[role].schema.model_validate(trace.outputs[role])) == answer
        assert len(rows) == len(ok)  # every complete trace gives one row per role; its dialogue makes it unique
        card = (tmp_path / "sft" / role / "README.md").read_text()
        assert '"model": "smollm2-135m"' in card and backend.model_path in card


def test_caef_role_runs_when_switched_on_and_gets_its_own_dataset(tiny_dialogues):
    """MERG's emotion forecast: one registry entry; plan/ers read it; it is distilled like any role."""
    config = PipelineConfig(caef=True)
    assert config.stages() == ["asi", "cae", "caef", "srp", "ers"] and not PipelineConfig().runs("caef")
    forecast = {"reasoning": "Sympathy fits a loss.", "forecast": "sadness", "consistent": True}
    traces = [make_trace(d, {**teacher_outputs(d), "caef": forecast}, config=config) for d in tiny_dialogues[:4]]
    built = build_role_datasets(traces, [*CORE_ROLES, "caef"], options=DatasetOptions(eval_fraction=0.0))
    assert sorted(built) == sorted([*CORE_ROLES, "caef"])
    # `--roles all` means the core roles, as in train: a caef dataset is built when it is asked for by name
    assert sorted(build_role_datasets(traces, options=DatasetOptions(eval_fraction=0.0))) == sorted(CORE_ROLES)
    row = built["caef"]["train"][0]
    assert json.loads(row["completion"][0]["content"]) == forecast
    ers_prompt = built["ers"]["train"][0]["prompt"][1]["content"]
    assert "forecast: sadness" in ers_prompt and "consistent: True" in ers_prompt
    teacher = ROLES["ers"].render(
        RoleInput(dialogue=tiny_dialogues[0], upstream={"caef": ROLES["caef"].schema(**forecast)}), "teacher"
    )
    assert "From the Consistency-Aware Emotion Forecaster:\n- forecast: sadness" in teacher[1]["content"]
    audit = ROLES["gra"].schema_for("teacher", config.stages()).model_json_schema()
    assert "caef" in json.dumps(audit["$defs"])


def test_a_declared_roles_card_lists_the_checks_its_rows_were_read_by():
    """A declared pipeline's reply role is read by the reply checks (`role_checks`): its card lists them, at 0
    where none fired, as a built-in role's card lists its own."""
    from distill.datasets.dataset_card import quality_section
    from distill.quality.checks import role_checks
    from distill.roles.declared import load_pipeline, pipeline_roles

    roles = pipeline_roles(load_pipeline(Path(__file__).resolve().parents[1] / "configs" / "pipelines" / "escot.yaml"))
    section = quality_section("re", {"mode": "filter", "failed": {"leaked_reference": 2}}, roles)
    assert role_checks("re", roles) and "| `leaked_reference` | 2 |" in section
    assert all(f"| `{name}` |" in section for name in role_checks("re", roles))
