"""Does distillation pay: direct rows, rationale-task twins, the oracle stage, the probe and the curve.

The teacher run these tests distil from is written by hand (`handmade_run`): a trace run is data, and
the curve's own parts (datasets, training, generation, compare) all run for real on the sample.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from data_prep.taxonomy import CAUSE_CATEGORIES, to_ekman
from distill.datasets.sft_data import DatasetOptions, build_role_datasets
from distill.datasets.sft_tasks import JOINT, rationale_tag
from distill.pipeline.config import PipelineConfig
from distill.pipeline.store import RunInfo, TraceStore
from distill.pipeline.trace import Step, Trace, trace_key
from distill.roles.roles import CORE_ROLES, ROLES
from eval.runner import Runner

TEACHER_REASONING = "The seeker's words carry the feeling."


def teacher_outputs(d) -> dict:
    return {
        "asi": {"emotion": to_ekman(d.emotion), "reasoning": TEACHER_REASONING},
        "cae": {"triggers": [d.turns[-1].text[:60]], "cause": "teacher cause summary", "category": CAUSE_CATEGORIES[0]},
        "srp": {"reasoning": "Plan: reflect the feeling.", "strategy": "ER"},
        "ers": {"response": f"teacher reply to {d.situation.lower()}"},  # one per dialogue: not a near_duplicate
    }


def handmade_trace(d) -> Trace:
    config = PipelineConfig().key_dict()
    outputs = teacher_outputs(d)
    steps = [Step(role=r, messages=[], raw=json.dumps(o), parsed=o) for r, o in outputs.items()]
    return Trace(
        key=trace_key(d, config, "handmade", "handmade", "v2"),
        dialogue=d,
        backend="handmade",
        model="handmade",
        prompt_version="v2",
        prompt_style="teacher",
        config=config,
        steps=steps,
        outputs=outputs,
    )


def handmade_run(dialogues, out) -> TraceStore:
    store = TraceStore(out)
    info = {
        "pipeline": PipelineConfig().key_dict(),
        "backend_name": "handmade",
        "model": "handmade",
        "prompt_version": "v2",
        "backend": {"type": "handmade"},
        "split": "train",
    }
    store.claim(RunInfo(**info))
    for d in dialogues:
        store.append(handmade_trace(d))
    return store


def _rows(dd, split="train"):
    return dd[split].to_list()


def test_direct_rows_hold_no_rationale_and_no_upstream_output(tiny_dialogues):
    traces = [handmade_trace(d) for d in tiny_dialogues]
    traces[0].failure = "cae: invalid output"  # the teacher's failure does not matter to a direct row
    built = build_role_datasets(traces, None, DatasetOptions(inputs="direct", eval_fraction=0))
    assert set(built) == {"asi", "ers"}
    asi, ers = _rows(built["asi"]), _rows(built["ers"])
    assert len(asi) == len(ers) == len(tiny_dialogues)
    for row, d in zip(asi, tiny_dialogues):
        assert json.loads(row["completion"][0]["content"]) == {"emotion": to_ekman(d.emotion)}
        assert row["prompt"] == [
            {"role": "system", "content": "[asi]"},
            {"role": "user", "content": d.render_context()},
        ]
    for row, d in zip(ers, tiny_dialogues):
        assert json.loads(row["completion"][0]["content"]) == {"response": d.gold_response}
        user = row["prompt"][1]["content"]
        assert user == d.render_context()  # no emotion, cause or strategy line
        assert TEACHER_REASONING not in json.dumps(row) and "teacher" not in json.dumps(row)
    with pytest.raises(ValueError, match="no gold answer"):
        build_role_datasets(traces, ["cae"], DatasetOptions(inputs="direct"))


@pytest.mark.parametrize("source", ["teacher", "situation"])
def test_rationale_twins_pair_each_label_row_and_keep_label_rows_unchanged(tiny_dialogues, source):
    traces = [handmade_trace(d) for d in tiny_dialogues]
    plain = build_role_datasets(traces, ["asi", "srp", "ers"], DatasetOptions(seed=3))
    twinned = build_role_datasets(traces, ["asi", "srp", "ers"], DatasetOptions(seed=3, rationale=source))
    assert _rows(twinned["ers"]) == _rows(plain["ers"])  # only asi and srp get a rationale task
    for role in ("asi", "srp"):
        rows = _rows(twinned[role])
        labels = [r for r in rows if r["task"] == "label"]
        twins = [r for r in rows if r["task"] == "rationale"]
        assert sorted(map(json.dumps, labels)) == sorted(map(json.dumps, _rows(plain[role])))
        assert len(twins) == len(labels)
        by_key = {r["key"]: r for r in labels}
        for twin in twins:  # the same trace's input under the rationale tag
            label = by_key[twin["key"]]
            assert twin["prompt"][0]["content"] == rationale_tag(role) and label["prompt"][0]["content"] == f"[{role}]"
            assert twin["prompt"][1:] == label["prompt"][1:]
            trace = next(t for t in traces if t.key == twin["key"])
            expected = trace.dialogue.situation if source == "situation" else trace.outputs[role]["reasoning"]
            assert twin["completion"][0]["content"] == expected
        for label in labels:  # the situation never reaches the label task's input
            situation = next(t for t in traces if t.key == label["key"]).dialogue.situation
            assert situation not in json.dumps(label["prompt"])
        assert all(t == "label" for t in twinned[role]["validation"]["task"])


def test_oracle_config_names_only_answers_that_exist():
    with pytest.raises(ValueError, match="no gold cae answer"):
        PipelineConfig(oracle={"cae": "gold"})
    with pytest.raises(ValueError, match="needs oracle_traces"):
        PipelineConfig(oracle={"cae": "teacher"})
    with pytest.raises(ValueError, match="not a pipeline stage"):
        PipelineConfig(oracle={"gra": "teacher"}, oracle_traces="x")
    assert PipelineConfig(oracle={"asi": "gold", "ers": "gold"}).oracle == {"asi": "gold", "ers": "gold"}


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"reuse": ["cae"]}, r"reuse: \['cae'\] must be the first stages in order"),
        ({"reuse": ["asi", "srp"]}, "must be the first stages in order"),  # cae runs between them
        ({"reuse": ["asi"], "oracle": {"asi": "gold"}}, r"reuse: \['asi'\] also has an oracle"),
        ({"reuse": ["asi"], "reuse_from": None}, "reuse: needs reuse_from"),
        ({"reuse": ["asi"], "reflection": True}, "runs without reflection"),
    ],
)
def test_reuse_config_copies_only_a_prefix_of_plain_stages_from_a_stored_run(fields, message):
    """A copied stage under a regenerated one, an oracle's, one without its stored run, or one that reflection
    would rerun would not be what this pipeline gives: each is refused when the config loads."""
    with pytest.raises(ValueError, match=message):
        PipelineConfig(**{"reuse_from": "runs/lender", **fields})
    assert PipelineConfig(reuse=["asi", "cae"], reuse_from="runs/lender").reuse == ["asi", "cae"]


def test_a_gold_reply_longer_than_a_generated_one_may_be_is_fed_as_it_is(tiny_dialogues):
    from distill.pipeline.oracle import Oracle

    long = "I hear you, and that sounds really hard. " * 10  # 410 characters, over ers's 320
    dialogue = tiny_dialogues[0].model_copy(update={"gold_response": long})
    answer, source = Oracle({"ers": "gold"}).answer("ers", dialogue)
    assert source == "oracle: gold reply" and answer.model_dump() == {"response": long}


@pytest.mark.slow
def test_oracle_stage_feeds_gold_and_teacher_answers_downstream(tiny_dialogues, tmp_path):
    from distill.backends.local import LocalBackend
    from distill.pipeline.pipeline import Pipeline

    dialogues = tiny_dialogues[:2]
    handmade_run(dialogues, tmp_path / "teacher")
    config = PipelineConfig(
        prompt_style="student",
        use_srp=False,
        max_attempts=2,
        oracle={"asi": "gold", "cae": "teacher"},
        oracle_traces=str(tmp_path / "teacher"),
    )
    traces = Pipeline(config, LocalBackend("smollm2-135m", batch_size=4)).run(dialogues, progress=False)
    for trace, d in zip(traces, dialogues):
        assert trace.status == "ok", trace.failure
        steps = {s.role: s for s in trace.steps}
        assert steps["asi"].attempts == 0 and steps["cae"].attempts == 0  # no generation spent on them
        assert steps["asi"].events == ["oracle: gold emotion"] and steps["cae"].events == ["oracle: teacher answer"]
        assert trace.outputs["asi"]["emotion"] == to_ekman(d.emotion)
        ers_prompt = steps["ers"].messages[1]["content"]
        assert f"emotion: {to_ekman(d.emotion)}" in ers_prompt and "cause: teacher cause summary" in ers_prompt
        assert steps["ers"].attempts >= 1 and trace.response


def test_direct_pipeline_shows_each_role_the_dialogue_alone(tiny_dialogues):
    from distill.pipeline.pipeline import Pipeline

    class Echo:  # answers every request with its schema's minimal valid JSON; records the prompts
        name, model = "echo", "echo"
        prompts: list = []

        def generate(self, requests, progress=None):
            from distill.backends.base import GenerationResult

            answers = {"asi": '{"emotion": "fear"}', "ers": '{"response": "I hear you."}'}
            self.prompts += [r.messages for r in requests]
            return [GenerationResult(text=answers[r.messages[0]["content"].strip("[]")]) for r in requests]

        def describe(self):
            return {"type": "echo"}

    backend = Echo()
    config = PipelineConfig(prompt_style="student", direct=True, use_cae=False, use_srp=False)
    trace = Pipeline(config, backend).run(tiny_dialogues[:1], progress=False)[0]
    assert trace.status == "ok" and trace.outputs["asi"]["emotion"] == "fear"
    ers = next(m for m in backend.prompts if m[0]["content"] == "[ers]")
    assert ers[1]["content"] == tiny_dialogues[0].render_context()  # not "emotion: fear"


def _sample_dialogues(tmp_path):
    from data_prep.__main__ import main as data_prep_main
    from data_prep.loaders import SAMPLE_PATH

    out = tmp_path / "dialogues"
    assert data_prep_main(["dialogues", "--source", str(SAMPLE_PATH), "--out", str(out)]) == 0
    return out


@pytest.mark.slow  # trains the probe over the embedder
def test_probe_trains_in_seconds_and_reports_emotion_alone(tmp_path):
    from eval.compare.cli_compare import run
    from eval.compare.report import render_markdown

    config = tmp_path / "probe.yaml"
    dialogues = _sample_dialogues(tmp_path)
    systems = "systems:\n  - name: probe\n    probe: {}\n"
    config.write_text(f"dialogues: {dialogues}\nppl: null\nbertscore: null\n{systems}")
    import argparse

    assert run(argparse.Namespace(config=str(config), out=str(tmp_path / "eval"))) == 0
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    probe = report["systems"][0]
    # a system without replies has its reply metrics null, not scored on its (fed) replies
    assert probe["replies"] is False and probe["diversity"] is None and probe.get("bertscore") is None
    assert probe["length_words"] is None and "empty_responses" not in probe
    acc = probe["i_acc"]["ekman6"]
    assert acc["n_invalid"] == 0 and 0 <= acc["accuracy"]["value"] <= 1 and acc["macro_f1"] is not None
    assert probe["description"]["train_dialogues"] == 154
    assert "| probe | 14 |" in render_markdown(report)


def test_probe_separates_classes_it_can_see():
    import numpy as np

    from eval.compare.probe import LabelProbe

    rng = np.random.default_rng(0)
    centres = {"anger": np.eye(4)[0], "fear": np.eye(4)[1], "sadness": np.eye(4)[2]}
    labels = [e for e in centres for _ in range(20)]
    features = np.stack([centres[e] + 0.1 * rng.standard_normal(4) for e in labels]).astype(np.float32)
    probe = LabelProbe.fit(features, labels)
    assert probe.classes == ("anger", "fear", "sadness")
    assert probe.predict(features) == labels
    single = LabelProbe.fit(features[:20], labels[:20])  # one emotion seen: it answers that one
    assert single.predict(features) == ["anger"] * len(labels)


def _curve_on_sample(tmp_path, settings: str):
    """`eval curve`'s arguments for a curve over a hand-made teacher run of the sample's first 12 train
    dialogues, with the config's other `settings` (YAML lines)."""
    import argparse

    from data_prep.loaders import load_split
    from eval.curve.adapter_runs import CPU_TRAIN_CONFIG

    dialogues = _sample_dialogues(tmp_path)
    handmade_run(load_split(dialogues, "train")[:12], tmp_path / "teacher")
    # The shipped train config at 2 rows a step: a budget of a few hundred tokens is one step either way,
    # and one of 8 rows costs 4 times the compute while proving nothing more here.
    shipped = CPU_TRAIN_CONFIG.read_text()
    assert "per_device_train_batch_size: 8\n" in shipped
    train = tmp_path / "train.yaml"
    train.write_text(shipped.replace("per_device_train_batch_size: 8\n", "per_device_train_batch_size: 2\n"))
    config = tmp_path / "curve.yaml"
    config.write_text(f"traces: {tmp_path / 'teacher'}\ndialogues: {dialogues}\ntrain_config: {train}\n{settings}")
    return argparse.Namespace(config=str(config), out=str(tmp_path / "curve"))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_curve_with_two_points_writes_report_and_plot_then_reuses_both(tmp_path, capsys):
    from eval.curve.cli_curve import run

    args = _curve_on_sample(
        tmp_path,
        "points: [3, 5]\ntest_limit: 2\nmax_tokens_budget: 300\nbase: false\nrequire_gold_emotion: false\n"
        "ppl: null\nstudents: [traces, teacher-reply, joint]\n",
    )  # direct and rationale train and run in the emotion curve's test, at a fraction of the cost; their
    # datasets and sources have fast tests above
    assert run(args) == 0
    first = capsys.readouterr().out
    curve = json.loads((tmp_path / "curve" / "curve.json").read_text())
    assert curve["points"] == [3, 5]
    trained = {(t["n"], t["system"], t["role"]) for t in curve["tokens"] if t["tokens_seen"] > 0}
    assert (5, "student-teacher-reply", "ers") in trained and (5, "student-traces", "asi") in trained
    assert (5, "student-teacher-reply", "asi") not in trained  # borrowed from traces: not trained twice
    assert curve["sources"]["student-teacher-reply"]["ers"]["target"] == "teacher's reply"
    systems = {(r["n"], r["system"]) for r in curve["rows"]}
    for n in (3, 5):
        for name in ("traces", "teacher-reply", "joint"):
            assert (n, f"student-{name}") in systems
        assert (n, "probe") in systems
    asked = {(p["n"], tuple(p["pair"]), p["metric"]) for p in curve["paired"]}
    assert (5, ("student-joint", "student-traces"), "i_acc") in asked
    assert (5, ("student-teacher-reply", "student-traces"), "bertscore_f1") in asked
    md = (tmp_path / "curve" / "curve.md").read_text()
    assert md.splitlines()[2].startswith("At N = 5 train conversations, on 2 test dialogues")
    assert (tmp_path / "curve" / "curve.png").stat().st_size > 1000
    # the teacher-reply student borrows the traces student's asi, cae and srp, and trains ers alone
    point = tmp_path / "curve" / "n5"
    for role in ("asi", "cae", "srp"):
        assert (point / "adapters-teacher-reply" / role).resolve() == (point / "adapters-traces" / role).resolve()
    assert not (point / "adapters-teacher-reply" / "ers").is_symlink()
    # ... so it copies their steps from the traces student's run and generates ers alone
    runs = {
        name: {t.dialogue.id: t for t in TraceStore(point / "eval" / "systems" / f"student-{name}").read()[0]}
        for name in ("traces", "teacher-reply")
    }
    assert runs["traces"].keys() == runs["teacher-reply"].keys()
    for key, own in runs["teacher-reply"].items():
        lent = {s.role: s for s in runs["traces"][key].steps}
        for step in own.steps:
            if step.role == "ers":
                assert step.attempts >= 1
            else:
                assert step.raw == lent[step.role].raw and step.events[-1].startswith("reused from")
    assert any(s.role == "ers" for t in runs["teacher-reply"].values() for s in t.steps)
    joint = json.loads((point / "adapters-joint" / "joint" / "trace_distill_adapter.json").read_text())
    assert joint["role"] == "joint" and joint["train_config"]["max_tokens_budget"] == 4 * 300
    traces_asi = point / "adapters-traces" / "asi" / "trace_distill_adapter.json"
    assert "example" not in json.loads(traces_asi.read_text())  # a sweep decodes no card example per adapter
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "curve").rglob("adapter_model.safetensors")}

    assert run(args) == 0
    second = capsys.readouterr().out
    assert "$ python -m train" in first and "$ python -m train" not in second  # nothing retrained
    for n in (3, 5):
        assert f"reusing {tmp_path / 'curve' / f'n{n}' / 'eval' / 'report.json'}" in second
    assert mtimes == {p: p.stat().st_mtime_ns for p in (tmp_path / "curve").rglob("adapter_model.safetensors")}


def load_split_tasks(folder) -> set[str]:
    from datasets import load_from_disk

    return set(load_from_disk(str(folder))["train"]["task"])


def test_joint_dataset_holds_every_role_under_its_own_tag(tiny_dialogues):
    from distill.datasets.sft_tasks import joint_dataset

    built = build_role_datasets([handmade_trace(d) for d in tiny_dialogues], None, DatasetOptions(eval_fraction=0.25))
    joint = joint_dataset(built, seed=0)
    for split in ("train", "validation"):
        tags = [row[0]["content"] for row in joint[split]["prompt"]]
        assert sorted(tags) == sorted(f"[{r}]" for r in built for _ in range(len(built[r][split])))


def test_every_student_reads_the_registry():
    from eval.curve.config import CurveConfig
    from eval.curve.students import STUDENTS

    assert set(STUDENTS) == {"traces", "direct", "rationale", "teacher-reply", "joint"}
    config = CurveConfig(traces="t", dialogues="d", points=[5], students=["rationale"])
    assert [s.name for s in config.ordered_students()] == ["traces", "rationale"]
    for student in STUDENTS.values():
        assert set(student.trains) | set(student.borrows) <= set(ROLES) | {JOINT}
        assert student.joint == (student.trains == (JOINT,))


def test_variants_are_students_with_their_own_levers():
    from eval.curve.config import CurveConfig
    from eval.curve.students import EMOTION_ONLY
    from train import TOKENS_BUDGET

    variants = [
        {"name": "direct-bal", "like": "direct", "options": {"balance_emotions": True}},
        {"name": "rat-half", "like": "rationale", "options": {"rationale_share": 0.5}, "tokens_per_conversation": 9},
    ]
    config = CurveConfig(traces="t", dialogues="d", points=[5], students=["direct"], variants=variants)
    students = {s.name: s for s in config.ordered_students()}
    assert list(students) == ["traces", "direct", "direct-bal", "rat-half"]  # rat-half borrows traces' cae, ers
    assert students["direct-bal"].options == {"inputs": "direct", "balance_emotions": True}
    assert students["direct-bal"].pipeline == students["direct"].pipeline
    assert students["rat-half"].rationale_task and students["rat-half"].borrows == ("cae", "ers")
    assert config.budget(10, students["rat-half"]) == 90 and config.budget(10, students["direct"]) == TOKENS_BUDGET
    per_conversation = CurveConfig(traces="t", dialogues="d", points=[5], tokens_per_conversation=7)
    assert per_conversation.budget(10, students["direct"]) == 70

    emotion = CurveConfig(traces="t", dialogues="d", points=[5], task="emotion", variants=variants)
    for student in emotion.ordered_students():
        assert student.trains in ((), ("asi",)) and student.borrows == ()
        assert {k: student.pipeline[k] for k in EMOTION_ONLY} == EMOTION_ONLY
        PipelineConfig(**student.pipeline)  # a valid pipeline: asi, then the human reply
    assert [s.trains for s in emotion.ordered_students()][:3] == [("asi",)] * 3


def test_a_variant_retrains_the_roles_it_names_under_its_seed_and_borrows_the_rest(tmp_path, monkeypatch):
    """`roles: [ers]` with a budget raises the reply's tokens alone (asi runs `like`'s adapter); `seed` repeats
    `like` under another LoRA init and sampling seed, so it retrains every role and samples with that seed."""
    from eval.curve import adapter_runs
    from eval.curve.config import CurveConfig
    from eval.curve.curve import train_student

    variants = [
        {"name": "ers250", "like": "direct", "roles": ["ers"], "tokens_per_conversation": 250},
        {"name": "seed1", "like": "direct", "seed": 1},
    ]
    config = CurveConfig(traces="t", dialogues="d", points=[5], students=["direct"], variants=variants)
    students = {s.name: s for s in config.ordered_students()}
    ers250, seed1 = students["ers250"], students["seed1"]
    assert (ers250.trains, ers250.borrows, ers250.lender) == (("ers",), ("asi",), "direct")
    assert ers250.pipeline == students["direct"].pipeline and config.budget(10, ers250) == 2500
    assert (seed1.trains, seed1.borrows, seed1.seed, seed1.pipeline["seed"]) == (("asi", "ers"), (), 1, 1)
    assert "seed" not in students["direct"].pipeline and config.at_paper_decoding() == {}
    # sampled otherwise too, a retrained variant's guards fall from the student it is made like, not from itself
    hot = [*variants, {"name": "seed1-t1", "like": "direct", "seed": 1, "decoding": {"temperatures": {"ers": 1.0}}}]
    hot_config = CurveConfig(traces="t", dialogues="d", points=[5], students=["direct"], variants=hot)
    assert hot_config.at_paper_decoding() == {"student-seed1-t1": "student-direct"}

    calls = []
    monkeypatch.setattr(adapter_runs, "copy_identical", lambda *a, **k: None)
    monkeypatch.setattr(adapter_runs, "train_stale", lambda _d, _a, options, *a, **k: calls.append(options) or {})
    (tmp_path / "adapters-direct" / "asi").mkdir(parents=True)
    adapters = train_student(Runner(tmp_path), ers250, 5, tmp_path, config)
    assert calls[-1] == {"ers": {"max_tokens_budget": 1250}}
    assert (adapters / "asi").resolve() == (tmp_path / "adapters-direct" / "asi").resolve()
    train_student(Runner(tmp_path), seed1, 5, tmp_path, config)
    assert calls[-1] == dict.fromkeys(("asi", "ers"), {"max_tokens_budget": config.budget(5, seed1), "seed": 1})


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"variants": [{"name": "direct", "like": "direct"}]}, "name direct is taken"),
        ({"variants": [{"name": "a", "like": "direct"}, {"name": "a", "like": "traces"}]}, "name a is taken"),
        ({"variants": [{"name": "a", "like": "direct", "options": {"epochs": 3}}]}, "epochs"),
        ({"variants": [{"name": "a", "like": "direct", "roles": ["srp"]}]}, "roles: srp not among the roles 'direct'"),
        ({"task": "emotion", "students": ["joint"]}, "'joint' trains more than asi"),
        ({"task": "emotion", "students": ["teacher-reply"]}, "'teacher-reply' trains more than asi"),
    ],
)
def test_curve_config_refuses_a_bad_variant_or_task(tmp_path, fields, message):
    import yaml

    from eval.compare.systems import CompareError
    from eval.curve.config import load_curve_config

    path = tmp_path / "curve.yaml"
    path.write_text(yaml.safe_dump({"traces": "t", "dialogues": "d", "points": [5], **fields}))
    with pytest.raises(CompareError, match=message):
        load_curve_config(str(path))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"points": [-5, 0]}, "field 'points.0': Input should be greater than or equal to 1"),
        ({"paper_reference": "trace-table9"}, "paper_reference: 'trace-table9' is neither a shipped table"),
        ({"points": [1, 5]}, r"points: eval compare refuses it: field 'systems\.\d\.probe\.limit': Input should be"),
        ({"students": [], "base": False, "probe": False}, "students: none, and base and probe are off"),
        (
            {"variants": [{"name": "hot", "like": "traces", "decoding": {"top_p": {"wizard": 0.9}}}]},
            "variants.0.decoding: field 'top_p': 'wizard' is not a role",
        ),
        (
            {"backend": {"type": "carrier-pigeon"}},
            "backend: eval compare refuses it: .* backend needs a 'type', one of",
        ),
        ({"backend": {"type": "local", "model": "/etc"}}, "field 'backend': '/etc' is a directory but holds no model"),
        ({"ppl": {"model": "/etc"}}, "field 'ppl.model': '/etc' is a directory but holds no model"),
    ],
)
def test_curve_config_refuses_at_load_what_would_fail_after_training(tmp_path, fields, message):
    """A point below 1, an unknown paper table, a point too small for the probe, a decoding the pipeline refuses,
    a backend or model that cannot run: each used to be found after the first adapters trained (or never)."""
    from eval.compare.systems import CompareError
    from eval.curve.config import load_curve_config

    path = tmp_path / "curve.yaml"
    path.write_text(yaml.safe_dump({"traces": "t", "dialogues": "d", "points": [5], **fields}))
    with pytest.raises(CompareError, match=message) as err:
        load_curve_config(str(path))
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def test_eval_curve_checks_its_points_flag_as_the_config_would(tmp_path, capsys):
    """`--points` replaces the config's points and is validated with the rest: a point of 1 with the probe on."""
    from eval.__main__ import main

    path = tmp_path / "curve.yaml"
    path.write_text(yaml.safe_dump({"traces": "t", "dialogues": "d", "points": [5]}))
    assert main(["curve", "--config", str(path), "--points", "1", "--out", str(tmp_path / "out")]) == 2
    assert f"{path}: points: eval compare refuses it:" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_variant_changes_only_its_dataset_options(tiny_dialogues, tmp_path):
    from eval.curve.config import CurveConfig
    from eval.curve.curve import build_datasets

    traces = [handmade_trace(d) for d in tiny_dialogues]
    config = CurveConfig(
        traces=str(tmp_path), dialogues="d", points=[5], require_gold_emotion=False,
        variants=[{"name": "half", "like": "rationale", "options": {"rationale_share": 0.5}}],
    )  # fmt: skip
    full, half = (s for s in config.ordered_students() if s.rationale_task)
    for student in (full, half):
        build_datasets(Runner(tmp_path), student, traces, tmp_path / student.name, config, None)
    tasks = {s.name: load_split_tasks(tmp_path / s.name / "asi") for s in (full, half)}
    counts = {}
    for name in ("rationale", "half"):
        from datasets import load_from_disk

        rows = load_from_disk(str(tmp_path / name / "asi"))["train"]["task"]
        counts[name] = (rows.count("label"), rows.count("rationale"))
    assert tasks["rationale"] == tasks["half"] == {"label", "rationale"}
    assert counts["rationale"][0] == counts["half"][0] == counts["rationale"][1]  # label rows unchanged
    assert 0 < counts["half"][1] < counts["rationale"][1]


def _looping_cause_and_an_unfiltered_variant(tiny_dialogues, tmp_path):
    """Hand-made traces, one with a looping cause the quality filter drops, and a curve with `traces` and a
    variant of it whose quality checks are off."""
    from eval.curve.config import CurveConfig

    traces = [handmade_trace(d) for d in tiny_dialogues]
    traces[2].outputs["cae"]["triggers"] = ["stress_and_anxiety_and_depression" + "_and_depression" * 4]
    config = CurveConfig(
        traces=str(tmp_path), dialogues="d", points=[5], require_gold_emotion=False,
        variants=[{"name": "unfiltered", "like": "traces", "options": {"quality": "off"}}],
    )  # fmt: skip
    return traces, config


def test_a_quality_variant_trains_on_what_the_filter_drops(tiny_dialogues, tmp_path):
    """Filter against no filter (issue 38's experiment): the `off` variant keeps a looping cause."""
    from datasets import load_from_disk

    from eval.curve.config import CurveConfig
    from eval.curve.curve import build_datasets
    from eval.curve.students import STUDENTS

    traces, config = _looping_cause_and_an_unfiltered_variant(tiny_dialogues, tmp_path)
    students = {s.name: s for s in config.ordered_students()}
    assert students["unfiltered"].trains == students["traces"].trains  # its own four adapters, none borrowed

    def dialogues_with_rows(student, config: CurveConfig, role: str) -> set[str]:
        build_datasets(Runner(tmp_path), student, traces, tmp_path / student.name, config, None)
        folder = tmp_path / student.name / role
        return {r["dialogue_id"] for split in load_from_disk(str(folder)).values() for r in split}

    kept = {name: dialogues_with_rows(students[name], config, "cae") for name in ("traces", "unfiltered")}
    assert kept["unfiltered"] - kept["traces"] == {tiny_dialogues[2].id}

    # the teacher-reply student's ers learns the teacher's replies: that is where replies are gated
    traces[3].outputs["ers"]["response"] = "#181181"  # no words: a non_reply
    config = CurveConfig(
        traces=str(tmp_path), dialogues="d", points=[5], require_gold_emotion=False,
        variants=[{"name": "replies-unfiltered", "like": "teacher-reply", "options": {"quality": "off"}}],
    )  # fmt: skip
    students = {s.name: s for s in config.ordered_students()} | {"teacher-reply": STUDENTS["teacher-reply"]}
    names = ("teacher-reply", "replies-unfiltered")
    kept = {name: dialogues_with_rows(students[name], config, "ers") for name in names}
    assert kept["replies-unfiltered"] - kept["teacher-reply"] == {tiny_dialogues[3].id}


def _trained_meta(adapter, dataset, budget: int, weights: str = "trained") -> None:
    """What `python -m train` writes and `train_stale` then records: the metadata of an adapter trained on
    `dataset` at `budget` tokens under the CPU train YAML, its weights, and its stage key."""
    from datasets import load_from_disk

    from distill.pipeline.stage_key import write_key
    from distill.roles.roles import STUDENT_PROMPT_VERSION
    from eval.curve.adapter_runs import CPU_TRAIN_CONFIG, adapter_inputs, training_settings

    adapter.mkdir(parents=True, exist_ok=True)
    options = {"max_tokens_budget": budget}
    meta = {"dataset_fingerprint": load_from_disk(str(dataset))["train"]._fingerprint}
    meta |= {"prompt_version": STUDENT_PROMPT_VERSION, "train_config": training_settings(options, CPU_TRAIN_CONFIG)}
    (adapter / "trace_distill_adapter.json").write_text(json.dumps(meta))
    (adapter / "adapter_model.safetensors").write_text(weights)
    write_key(adapter, adapter_inputs(dataset, options, CPU_TRAIN_CONFIG))


def test_a_variant_copies_the_adapters_whose_rows_its_options_left_unchanged(tiny_dialogues, tmp_path, monkeypatch):
    """`quality: off` changes only the roles the filter dropped rows from: those train, the rest are copied from
    the lender's adapters (the same key), and a copy never changes when its donor is retrained later (a link
    used to show the donor's new weights under the variant that linked to it, within the same run)."""
    from datasets import load_from_disk

    from eval.curve import adapter_runs
    from eval.curve.curve import build_datasets, train_student

    traces, config = _looping_cause_and_an_unfiltered_variant(tiny_dialogues, tmp_path)
    students = {s.name: s for s in config.ordered_students()}
    point = tmp_path / "n5"
    for name in ("traces", "unfiltered"):
        build_datasets(Runner(tmp_path), students[name], traces, point / f"datasets-{name}", config, None)
    budget = config.budget(5, students["traces"])
    for role in students["traces"].trains:
        _trained_meta(point / "adapters-traces" / role, point / "datasets-traces" / role, budget)
    trained: list[str] = []

    def fake_train(argv, roles):
        trained.extend(roles)
        for role in roles:
            _trained_meta(point / "adapters-unfiltered" / role, point / "datasets-unfiltered" / role, budget)

    monkeypatch.setattr(adapter_runs, "_train", fake_train)
    adapters = train_student(Runner(tmp_path), students["unfiltered"], 5, point, config)

    def fingerprint(name, role):
        return load_from_disk(str(point / f"datasets-{name}" / role))["train"]._fingerprint

    changed = {r for r in students["traces"].trains if fingerprint("traces", r) != fingerprint("unfiltered", r)}
    assert "cae" in changed and set(trained) == changed and len(changed) < 4
    kept = sorted(set(students["traces"].trains) - changed)
    for role in kept:
        assert not (adapters / role).is_symlink() and (adapters / role / "adapter_model.safetensors").read_text() == (
            "trained"
        )
    # the donor retrained on other data, in place: the variant's adapter holds what it held, and still fits
    _trained_meta(point / "adapters-traces" / kept[0], point / "datasets-traces" / "cae", budget, weights="retrained")
    assert (adapters / kept[0] / "adapter_model.safetensors").read_text() == "trained"
    trained.clear()
    train_student(Runner(tmp_path), students["unfiltered"], 5, point, config)
    assert trained == []


def test_a_system_whose_reply_is_the_human_one_is_not_scored_on_it(tiny_dialogues):
    from eval.compare.systems import SystemRun

    own = [handmade_trace(d) for d in tiny_dialogues]
    fed = [t.model_copy(update={"config": {**t.config, "oracle": {"ers": "gold"}}}) for t in own]
    assert SystemRun("student", own, "generated").replies
    assert not SystemRun("student", fed, "generated").replies
    asi_fed = [t.model_copy(update={"config": {**t.config, "oracle": {"asi": "gold"}}}) for t in own]
    assert SystemRun("attribution", asi_fed, "generated").replies


def test_each_student_states_what_it_learns_from_whom():
    from eval.curve.config import CurveConfig

    config = CurveConfig(
        traces="t", dialogues="d", points=[5], students=["traces", "direct", "rationale", "teacher-reply"]
    )
    sources = config.sources()
    assert sources["student-traces"]["ers"] == {"target": "human reply", "input": "dialogue + teacher's asi, cae, srp"}
    assert sources["student-traces"]["asi"]["target"].startswith("gold label (rows where the teacher agreed)")
    assert sources["student-direct"] == {
        "asi": {"target": "gold label", "input": "dialogue"},
        "ers": {"target": "human reply", "input": "dialogue"},
    }
    reply = sources["student-teacher-reply"]
    assert reply["ers"] == {"target": "teacher's reply", "input": "dialogue + teacher's asi, cae, srp"}
    assert {reply[r]["adapter"] for r in ("asi", "cae", "srp")} == {"student-traces's"}
    assert "twin: ED's situation (human)" in sources["student-rationale"]["srp"]["target"]
    ungated = CurveConfig(traces="t", dialogues="d", points=[5], require_gold_emotion=False)
    assert ungated.sources()["student-traces"]["asi"]["target"] == "teacher's label"


def test_teacher_reply_student_learns_the_teachers_reply_and_nothing_else(tiny_dialogues, tmp_path):
    from datasets import load_from_disk

    from eval.curve.config import CurveConfig
    from eval.curve.curve import build_datasets
    from eval.curve.students import STUDENTS

    config = CurveConfig(traces=str(tmp_path), dialogues="d", points=[3], require_gold_emotion=False)
    traces = [handmade_trace(d) for d in tiny_dialogues]
    build_datasets(Runner(tmp_path), STUDENTS["teacher-reply"], traces, tmp_path / "reply", config, None)
    build_datasets(Runner(tmp_path), STUDENTS["traces"], traces, tmp_path / "traces", config, None)
    assert sorted(p.name for p in (tmp_path / "reply").iterdir() if p.is_dir()) == ["ers"]
    teacher = {t.dialogue.id: t.outputs["ers"]["response"] for t in traces}
    gold = {t.dialogue.id: t.dialogue.gold_response for t in traces}
    for folder, expected in (("reply", teacher), ("traces", gold)):
        rows = load_from_disk(str(tmp_path / folder / "ers"))["train"]
        for row in rows:
            assert json.loads(row["completion"][0]["content"])["response"] == expected[row["dialogue_id"]]


def _adapter_meta(folder, role: str, seen: int, budget: int = 1000) -> None:
    folder.mkdir(parents=True)
    meta = {"role": role, "tokens_seen": seen, "global_step": 3, "train_config": {"max_tokens_budget": budget}}
    meta["tokens"] = {"examples": 10, "tokens": 500}
    (folder / "trace_distill_adapter.json").write_text(json.dumps(meta))


def test_curve_table_shows_tokens_seen_and_flags_unequal_students(tmp_path):
    from eval.curve.config import CurveConfig
    from eval.curve.curve_report import write_curve

    point = tmp_path / "n5"
    (point / "eval").mkdir(parents=True)
    report = point / "eval" / "report.json"
    systems = [{"name": "student-traces"}, {"name": "student-direct"}]
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems}))
    _adapter_meta(point / "adapters-traces" / "asi", "asi", 1010)
    _adapter_meta(point / "adapters-traces" / "ers", "ers", 990)
    _adapter_meta(point / "adapters-direct" / "asi", "asi", 980)
    _adapter_meta(point / "adapters-direct" / "ers", "ers", 600)  # a student that saw less: flagged
    (point / "adapters-rationale").mkdir()
    (point / "adapters-rationale" / "ers").symlink_to(point / "adapters-traces" / "ers")  # borrowed: not a row
    curve = write_curve({5: report}, tmp_path, CurveConfig(traces="t", dialogues="d", points=[5]))
    seen = {(t["system"], t["role"]): t["tokens_seen"] for t in curve["tokens"]}
    assert seen == {
        ("student-traces", "asi"): 1010,
        ("student-traces", "ers"): 990,
        ("student-direct", "asi"): 980,
        ("student-direct", "ers"): 600,
    }
    assert {t["passes"] for t in curve["tokens"] if t["tokens_seen"] == 1010} == {2.02}
    md = (tmp_path / "curve.md").read_text()
    assert "## Training tokens seen per role" in md and "| 5 | student-direct | ers | 1000 | 600 |" in md
    flagged = md.split("**Unequal budgets**")[1]
    assert "N = 5, ers" in flagged and "N = 5, asi" not in flagged
    assert "## What each student learns, from whom" in md


def test_a_bertscore_without_a_value_is_a_dash_not_a_crash(tmp_path):
    """A system with nothing to score (`{"value": None}`) used to stop write_curve in plot_curve's whiskers."""
    from eval.curve.config import CurveConfig
    from eval.curve.curve_report import CURVE_PNG, write_curve

    point = tmp_path / "n5"
    (point / "eval").mkdir(parents=True)
    report = point / "eval" / "report.json"
    accuracy = {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6}
    system = {"name": "student-traces", "bertscore": {"f1": {"value": None}}}
    system["i_acc"] = {"ekman6": {"accuracy": accuracy}}
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": [system]}))
    write_curve({5: report}, tmp_path, CurveConfig(traces="t", dialogues="d", points=[5]))
    assert "| 5 | student-traces | 0.50 [0.40, 0.60] | – | – |" in (tmp_path / "curve.md").read_text()
    assert (tmp_path / CURVE_PNG).stat().st_size > 0


def test_curve_shows_its_largest_point_beside_the_papers_rows(tmp_path):
    from eval.curve.curve_report import write_curve
    from eval.paper import load_paper_reference

    systems = [{"name": "student-traces", "human_ratio": {"dist1": 0.5, "dist2": 0.6, "ead1": 0.7, "ead2": 0.8}}]
    test = {"dialogues": "d", "split": "test", "n": 4}
    reports = {}
    for n in (5, 10):
        (tmp_path / f"n{n}" / "eval").mkdir(parents=True)
        reports[n] = tmp_path / f"n{n}" / "eval" / "report.json"
        paper = load_paper_reference("trace-table1") if n == 10 else None
        reports[n].write_text(json.dumps({"test": test, "systems": systems, "paper": paper}))
    write_curve(reports, tmp_path)
    table = (tmp_path / "curve.md").read_text().split("## Against the paper")[1]
    assert table.startswith(": diversity as a share of the human replies (N = 10)")
    assert "| student-traces | 0.50 | 0.60 | 0.70 | 0.80 | – |" in table
    assert "| GPT-4o TRACE (paper, Table 1) * | 0.91 |" in table


def test_curve_shows_the_largest_points_shares_against_corpus_size_as_a_table_and_a_figure(tmp_path):
    from eval.curve.curve_report import write_curve
    from eval.curve.shares_plot import SHARES_PNG
    from eval.paper import load_paper_reference

    share = {"value": 0.9, "ci_low": 0.85, "ci_high": 0.95}
    by_size = [{"n": n, **dict.fromkeys(("dist1", "dist2", "ead1", "ead2"), share)} for n in (2, 4)]
    systems = [{"name": "student-traces", "human_ratio": {"dist1": 0.9}, "human_ratio_by_size": by_size}]
    (tmp_path / "n5" / "eval").mkdir(parents=True)
    report = tmp_path / "n5" / "eval" / "report.json"
    paper = load_paper_reference("trace-table1")
    report.write_text(
        json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems, "paper": paper})
    )
    write_curve({5: report}, tmp_path)
    md = (tmp_path / "curve.md").read_text()
    assert "| student-traces | 4 | 0.900 [0.850, 0.950] |" in md and "![shares against corpus size](shares.png)" in md
    assert (tmp_path / SHARES_PNG).stat().st_size > 0
    systems[0].pop("human_ratio_by_size")
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems}))
    (tmp_path / SHARES_PNG).unlink()
    write_curve({5: report}, tmp_path)
    assert not (tmp_path / SHARES_PNG).exists() and "shares.png" not in (tmp_path / "curve.md").read_text()


def test_the_target_needs_every_paper_figure_and_a_bertscore_within_002_of_the_papers_decoding(tmp_path):
    from eval.curve.config import CurveConfig
    from eval.curve.curve_report import write_curve
    from eval.paper import load_paper_reference

    config = CurveConfig(
        traces="t", dialogues="d", points=[5], students=["traces", "direct"],
        variants=[{"name": "hot", "like": "traces", "decoding": {"temperatures": {"ers": 1.0}}},
                  {"name": "warm", "like": "traces", "decoding": {"temperatures": {"ers": 0.8}}}],
    )  # fmt: skip
    assert config.at_paper_decoding() == {"student-hot": "student-traces", "student-warm": "student-traces"}

    def system(name, ratio, i_acc, bertscore):  # the paper's row: 0.91, 0.81, 0.82, 0.84 and I-ACC 0.4428
        return {
            "name": name, "human_ratio": dict(zip(("dist1", "dist2", "ead1", "ead2"), ratio)),
            "i_acc": {"ekman6": {"accuracy": {"value": i_acc}}}, "bertscore": {"f1": {"value": bertscore}},
        }  # fmt: skip

    systems = [
        system("student-traces", (0.6, 0.5, 0.6, 0.5), 0.60, 0.300),  # TRACE's decoding: below on diversity
        system("student-hot", (0.95, 0.9, 0.9, 0.9), 0.60, 0.285),  # above on all five, 0.015 below: met
        system("student-warm", (0.95, 0.9, 0.9, 0.9), 0.60, 0.270),  # above on all five, 0.03 below: not met
        system("student-direct", (0.95, 0.9, 0.9, 0.9), 0.40, 0.310),  # I-ACC below 44.28
    ]
    # above the paper's Dist-1 (0.908) by value, but its interval reaches below it: not shown to beat it
    systems[1]["human_ratio"]["dist1"] = {"value": 0.95, "ci_low": 0.93, "ci_high": 0.97}
    systems[2]["human_ratio"]["dist1"] = {"value": 0.95, "ci_low": 0.90, "ci_high": 1.00}
    # the paired BERTScore differences (system − its lender), as eval compare writes them: the fall is judged on them
    paired = [
        {"pair": ["student-traces", name], "metric": "bertscore_f1", "diff": diff, "ci_low": diff - 0.004,
         "ci_high": diff + 0.004, "n": 4, "reading": "higher is better"}
        for name, diff in (("student-hot", 0.015), ("student-warm", 0.03))
    ]  # fmt: skip
    report = tmp_path / "n5" / "eval" / "report.json"
    report.parent.mkdir(parents=True)
    paper = load_paper_reference("trace-table1")
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems,
                                  "paper": paper, "paired": paired}))  # fmt: skip
    curve = write_curve({5: report}, tmp_path, config)
    target = {t["system"]: t for t in curve["target"]}
    assert {name for name, t in target.items() if t["met"]} == {"student-hot"}
    assert target["student-warm"]["bertscore_drop"] == pytest.approx(0.03)
    assert target["student-warm"]["bertscore_drop_ci"] == pytest.approx([0.026, 0.034])
    assert [f for f, beats in target["student-warm"]["beats"].items() if not beats] == ["Dist-1 / human"]
    assert (
        target["student-direct"]["beats"]["I-ACC (6)"] is False
        and target["student-direct"]["bertscore_reference"] == "student-direct"
    )
    assert list(target["student-traces"]["beats"].values()) == [False] * 4 + [True]  # I-ACC alone
    md = (tmp_path / "curve.md").read_text()
    assert "## The target: beat GPT-4o TRACE (paper, Table 1) on every figure" in md
    assert "| student-hot | yes | yes | yes | yes | yes | student-traces | 0.0150 [0.0110, 0.0190] | **yes** |" in md
    assert "Met by: student-hot." in md


def test_the_target_is_not_met_when_only_ppl_given_the_dialogue_rises_past_its_allowance(tmp_path):
    """A lever above the paper on every figure, holding BERTScore, whose PPL given the dialogue (lower is better)
    rises past the allowance over its whole paired interval: curve.json's target and curve.md say not met."""
    from eval.curve.config import CurveConfig
    from eval.curve.curve_report import write_curve
    from eval.curve.target import DIALOGUE_PPL_ALLOWANCE
    from eval.paper import load_paper_reference

    config = CurveConfig(
        traces="t", dialogues="d", points=[5], students=["traces"],
        variants=[{"name": "hot", "like": "traces", "decoding": {"temperatures": {"ers": 1.0}}}],
    )  # fmt: skip
    above = {"human_ratio": {"dist1": 0.95, "dist2": 0.9, "ead1": 0.9, "ead2": 0.9},
             "i_acc": {"ekman6": {"accuracy": {"value": 0.6}}}, "bertscore": {"f1": {"value": 0.3}}}  # fmt: skip
    systems = [
        {"name": "student-traces", **above, "dialogue_ppl": {"value": 25.0}},
        {"name": "student-hot", **above, "dialogue_ppl": {"value": 25.0 + 2 * DIALOGUE_PPL_ALLOWANCE}},
    ]
    rise = 2 * DIALOGUE_PPL_ALLOWANCE
    paired = [  # as eval compare writes them: first − second
        {"pair": ["student-traces", "student-hot"], "metric": "bertscore_f1", "diff": 0.0, "ci_low": -0.004,
         "ci_high": 0.004, "n": 4, "reading": "higher is better"},
        {"pair": ["student-traces", "student-hot"], "metric": "dialogue_ppl", "diff": -rise, "ci_low": -rise - 0.5,
         "ci_high": -rise + 0.5, "n": 4, "reading": "lower is better"},
    ]  # fmt: skip
    report = tmp_path / "n5" / "eval" / "report.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems,
                                  "paper": load_paper_reference("trace-table1"), "paired": paired}))  # fmt: skip
    curve = write_curve({5: report}, tmp_path, config)
    hot = {t["system"]: t for t in curve["target"]}["student-hot"]
    assert all(hot["beats"].values()) and hot["bertscore_held"] and hot["relevance_held"] is None
    assert hot["dialogue_ppl_drop"] == pytest.approx(rise) and hot["dialogue_ppl_held"] is False and not hot["met"]
    md = (tmp_path / "curve.md").read_text()
    assert "PPL given the dialogue rise [95% CI]" in md and "Met by: student-traces." in md  # itself: no rise


def test_the_target_is_not_met_without_a_bertscore_to_compare(tmp_path):
    """Above the paper on every figure, but no BERTScore (none computed, or none for the lender at the paper's
    decoding): the fall cannot be measured, so the target is not met."""
    from eval.curve.config import CurveConfig
    from eval.curve.curve_report import write_curve
    from eval.paper import load_paper_reference

    config = CurveConfig(
        traces="t", dialogues="d", points=[5], students=["traces", "direct"],
        variants=[{"name": "hot", "like": "traces", "decoding": {"temperatures": {"ers": 1.0}}}],
    )  # fmt: skip
    above = {"human_ratio": {"dist1": 0.95, "dist2": 0.9, "ead1": 0.9, "ead2": 0.9},
             "i_acc": {"ekman6": {"accuracy": {"value": 0.6}}}}  # fmt: skip
    systems = [
        {"name": "student-traces", **above},  # no BERTScore at all
        {"name": "student-hot", **above, "bertscore": {"f1": {"value": 0.3}}},  # its lender has none
        {"name": "student-direct", **above, "bertscore": None},
    ]
    report = tmp_path / "n5" / "eval" / "report.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems,
                                  "paper": load_paper_reference("trace-table1")}))  # fmt: skip
    curve = write_curve({5: report}, tmp_path, config)
    target = {t["system"]: t for t in curve["target"]}
    assert all(all(t["beats"].values()) for t in target.values()) and len(target) == 3
    assert {name: (t["bertscore_drop"], t["met"]) for name, t in target.items()} == {
        "student-traces": (None, False),
        "student-hot": (None, False),
        "student-direct": (None, False),
    }
    md = (tmp_path / "curve.md").read_text()
    assert "No system meets it: the table above is the frontier." in md and "Met by" not in md


def test_curve_md_says_which_student_is_better_as_the_paired_intervals_show(tmp_path):
    """The headline's verdict follows the difference's sign, oriented as the question names the pair."""
    from eval.curve.curve_report import write_curve

    def paired(pair, metric, diff, low, high):
        return {"pair": pair, "metric": metric, "reading": "higher is better", "diff": diff, "ci_low": low,
                "ci_high": high, "n": 4}  # fmt: skip

    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            {
                "test": {"dialogues": "d", "split": "test", "n": 4},
                "systems": [{"name": n} for n in ("student-traces", "student-direct", "base")],
                "paired": [
                    paired(["student-direct", "student-traces"], "i_acc", -0.2, -0.3, -0.1),  # read as traces − direct
                    paired(["student-traces", "base"], "bertscore_f1", -0.05, -0.08, -0.02),
                    paired(["student-direct", "base"], "i_acc", 0.05, -0.01, 0.1),
                ],
            }
        )
    )
    write_curve({5: report}, tmp_path)
    verdicts = [line.split(": ", 1)[1] for line in (tmp_path / "curve.md").read_text().splitlines() if line[:2] == "- "]
    assert verdicts == [
        "0.20 [0.10, 0.30]; the interval excludes 0: the first is better.",
        "-0.050 [-0.080, -0.020]; the interval excludes 0: the first is worse.",
        "0.050 [-0.010, 0.100]; the interval includes 0: no difference this test set can show.",
    ]


def test_curve_report_asks_each_variant_against_direct_and_probe(tmp_path):
    from eval.curve.config import CurveConfig
    from eval.curve.curve_report import CURVE_PNG, write_curve

    config = CurveConfig(traces="t", dialogues="d", points=[5], variants=[{"name": "bal", "like": "direct"}])
    systems = [
        {"name": n, "i_acc": {"ekman6": {"accuracy": {"value": v, "ci_low": v - 0.1, "ci_high": v + 0.1}}}}
        for n, v in (("student-direct", 0.4), ("student-bal", 0.6), ("probe", 0.5))
    ]
    paired = [
        {"pair": ["student-bal", "student-direct"], "metric": "i_acc", "reading": "higher is better",
         "diff": 0.2, "ci_low": 0.1, "ci_high": 0.3, "n": 4},
        {"pair": ["probe", "student-bal"], "metric": "i_acc", "reading": "higher is better",
         "diff": -0.1, "ci_low": -0.2, "ci_high": 0.05, "n": 4},
    ]  # fmt: skip
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"test": {"dialogues": "d", "split": "test", "n": 4}, "systems": systems,
                                  "paired": paired}))  # fmt: skip
    curve = write_curve({5: report}, tmp_path, config)
    found = {(tuple(p["pair"]), round(p["diff"], 3), p["ci_low"], p["ci_high"]) for p in curve["paired"]}
    assert found == {(("student-bal", "student-direct"), 0.2, 0.1, 0.3), (("student-bal", "probe"), 0.1, -0.05, 0.2)}
    assert "student-bal − probe" in (tmp_path / "curve.md").read_text()
    assert (tmp_path / "curve.md").read_text().count("| 5 | student-bal − student-direct |") == 1  # asked once
    hot = CurveConfig(traces="t", dialogues="d", points=[5], variants=[{"name": "hot", "like": "traces",
                      "decoding": {"temperatures": {"ers": 1.0}}}])  # fmt: skip
    from eval.curve.curve_report import questions

    assert ("student-hot", "student-traces") in {(a, b) for a, b, _ in questions(hot)}  # a lever against its lender
    assert (tmp_path / CURVE_PNG).stat().st_size > 1000  # one panel: there is no BERTScore to draw


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_emotion_curve_trains_and_runs_the_emotion_agent_alone(tmp_path, capsys):
    from eval.curve.cli_curve import run

    args = _curve_on_sample(
        tmp_path,
        "points: [5]\ntest_limit: 3\ntask: emotion\ntokens_per_conversation: 60\nbase: true\n"
        "require_gold_emotion: false\nppl: null\nbertscore: null\nstudents: [direct, rationale]\n"
        "variants: [{name: balanced, like: direct, options: {balance_emotions: true}}]\n",
    )
    assert run(args) == 0
    point = tmp_path / "curve" / "n5"
    for name in ("direct", "rationale", "balanced"):
        assert sorted(p.name for p in (point / f"adapters-{name}").iterdir()) == ["asi"]
        meta = json.loads((point / f"adapters-{name}" / "asi" / "trace_distill_adapter.json").read_text())
        assert meta["train_config"]["max_tokens_budget"] == 5 * 60
    report = json.loads((point / "eval" / "report.json").read_text())
    systems = {s["name"]: s for s in report["systems"]}
    assert set(systems) == {"student-direct", "student-rationale", "student-balanced", "probe", "base"}
    assert "rationale" in load_split_tasks(point / "datasets-rationale" / "asi")  # asi learns on rationale twins
    for s in systems.values():
        assert s["i_acc"]["ekman6"]["accuracy"]["value"] is not None and not s.get("diversity")
    generated = TraceStore(point / "eval" / "systems" / "student-direct").read()[0]
    assert {tuple(t.outputs) for t in generated} == {("asi", "ers")}
    assert all(t.response == t.dialogue.gold_response for t in generated)  # the human reply: no generation
    curve = json.loads((tmp_path / "curve" / "curve.json").read_text())
    assert {tuple(p["pair"]) for p in curve["paired"]} >= {
        ("student-balanced", "student-direct"),
        ("student-rationale", "student-direct"),
    }
    # every stage through the runner: its seconds and peak RSS in stages.json, and a rerun reuses each, saying so
    stages = json.loads((tmp_path / "curve" / "stages.json").read_text())
    names = ["base: generate", *(f"n5: {s}: {w}" for s in ("direct", "rationale", "balanced") for w in
             ("datasets", "train")), "n5: compare"]  # fmt: skip
    assert sorted(stages) == sorted(names), stages
    assert all(r["seconds"] > 0 and r["peak_rss_mb"] > 0 and not r["reused"] for r in stages.values()), stages
    assert "n5: direct: train: ran: asi: not trained yet" in capsys.readouterr().out
    assert run(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[stage] ")]
    assert sorted(line.split(": reused: key unchanged (")[0] for line in lines) == sorted(f"[stage] {n}" for n in names)
    again = json.loads((tmp_path / "curve" / "stages.json").read_text())
    assert again == {name: {**record, "reused": True} for name, record in stages.items()}


def test_a_decoding_variant_runs_its_lenders_adapters_untrained(tmp_path):
    from eval.curve.config import CurveConfig
    from eval.curve.curve import train_student
    from eval.curve.point_systems import student_system

    decoding = {"temperatures": {"ers": 1.0}, "top_p": {"ers": 0.9}, "min_p": {"ers": 0.05}, "typical_p": {"ers": 0.9}}
    config = CurveConfig(
        traces="t", dialogues="d", points=[5], students=["traces"],
        variants=[{"name": "direct-hot", "like": "direct", "decoding": decoding}],
    )  # fmt: skip
    students = {s.name: s for s in config.ordered_students()}
    assert list(students) == ["traces", "direct", "direct-hot"]  # its lender joins, ahead of it
    hot = students["direct-hot"]
    assert (hot.trains, hot.borrows, hot.lender) == ((), ("asi", "ers"), "direct")
    pipeline = PipelineConfig(**hot.pipeline)
    assert pipeline.direct and (pipeline.temperatures, pipeline.top_p, pipeline.min_p, pipeline.typical_p) == (
        {"ers": 1.0}, {"ers": 0.9}, {"ers": 0.05}, {"ers": 0.9},
    )  # fmt: skip
    assert set(config.sources()["student-direct-hot"]) == {"asi", "ers"}
    assert config.sources()["student-direct-hot"]["ers"]["adapter"] == "student-direct's"

    point = tmp_path / "n5"
    for role in ("asi", "ers"):
        (point / "adapters-direct" / role).mkdir(parents=True)
    adapters = train_student(Runner(tmp_path), hot, 5, point, config)  # trains nothing: no datasets-direct-hot
    assert (adapters / "ers").resolve() == (point / "adapters-direct" / "ers").resolve()
    pipeline = student_system(hot, adapters, config)["pipeline"]
    assert pipeline["top_p"] == {"ers": 0.9}
    # its asi runs as the direct student's does: copied from that system's run, not generated again
    assert (pipeline["reuse"], pipeline["reuse_from"]) == (["asi"], str(point / "eval" / "systems" / "student-direct"))

    with pytest.raises(ValueError, match="decoding changes how replies are sampled"):
        CurveConfig(traces="t", dialogues="d", points=[5], task="emotion", variants=config.variants)


def test_a_student_reuses_exactly_the_first_stages_it_runs_as_its_lender_does():
    from eval.curve.config import CurveConfig
    from eval.curve.students import reused_stages

    config = CurveConfig(
        traces="t", dialogues="d", points=[5], students=["traces", "direct", "rationale", "teacher-reply"],
        variants=[
            {"name": "hot", "like": "traces", "decoding": {"temperatures": {"ers": 1.0}}},
            {"name": "hot-srp", "like": "traces", "decoding": {"temperatures": {"srp": 0.7, "ers": 1.0}}},
            {"name": "same", "like": "traces", "decoding": {"top_p": {"ers": 0.9}}},
            {"name": "srp-minilm", "like": "traces",
             "decoding": {"consensus": {"srp": 4}, "consensus_by": "minilm"}},  # srp reranked: reused up to it
            {"name": "ers-minilm", "like": "traces",
             "decoding": {"consensus": {"ers": 4}, "consensus_by": "minilm"}},
            {"name": "unfiltered", "like": "traces", "options": {"quality": "off"}},
            {"name": "reply-unfiltered", "like": "teacher-reply", "options": {"quality": "off"}},
        ],
    )  # fmt: skip
    reused = {s.name: reused_stages(s, config.lender(s)) for s in config.ordered_students()}
    assert reused == {
        "traces": (), "direct": (), "rationale": (),  # each trains its first stage
        "teacher-reply": ("asi", "cae", "srp"),  # trains ers alone; the rest are traces' adapters
        "hot": ("asi", "cae", "srp"), "hot-srp": ("asi", "cae"), "same": ("asi", "cae", "srp"),
        "srp-minilm": ("asi", "cae"), "ers-minilm": ("asi", "cae", "srp"),
        "unfiltered": (), "reply-unfiltered": ("asi", "cae", "srp"),
    }  # fmt: skip


def test_a_retrained_lender_drops_its_own_and_its_borrowers_stale_generations(tmp_path, capsys):
    """A generated system's key holds what its adapters hold: the lender retrained, its own stored generation and
    that of a variant running its adapters (links) are both dropped, saying why."""
    from distill.pipeline.stage_key import write_key
    from eval.compare.reuse import adapter_fingerprints, drop_stale_run, system_inputs

    lender, borrower = tmp_path / "n5" / "adapters-traces", tmp_path / "n5" / "adapters-hot"
    borrower.mkdir(parents=True)
    for role in CORE_ROLES:  # a finished earlier run: the lender's adapters, the variant's links to them
        (lender / role).mkdir(parents=True)
        (lender / role / "adapter_config.json").write_text("{}")
        (lender / role / "adapter_model.safetensors").write_text("trained")
        (borrower / role).symlink_to(lender / role, target_is_directory=True)

    def stored(name: str, adapters) -> tuple:
        pipeline = {"prompt_style": "student", "use_adapters": True}
        system = {"name": name, "backend": {"type": "local", "adapters": str(adapters)}, "pipeline": pipeline}
        store, config = TraceStore(tmp_path / "systems" / name), PipelineConfig(**pipeline)
        fingerprints = adapter_fingerprints(system["backend"])
        info = RunInfo(config.key_dict(), "local", "m", "v2", {"adapter_fingerprints": fingerprints}, system=system)
        store.claim(info)
        write_key(store.run_dir, system_inputs(system, config, fingerprints, None))
        return store, system, config

    runs = [stored("student-traces", lender), stored("student-hot", borrower)]

    def drop_stale() -> None:
        for store, system, config in runs:
            drop_stale_run(store, system["name"], system, config, adapter_fingerprints(system["backend"]), None)

    drop_stale()
    assert all(store.run_dir.exists() for store, _, _ in runs)  # nothing changed: both reused
    (lender / "ers" / "adapter_model.safetensors").write_text("retrained")  # ers anew
    capsys.readouterr()
    drop_stale()
    assert not any(store.run_dir.exists() for store, _, _ in runs)
    assert "regenerating system 'student-hot': adapter 'ers' holds other weights" in capsys.readouterr().out


def _point_config(tmp_path, **fields) -> dict:
    """A point's compare config over the sample's dialogues: a stored base run and a student with one adapter."""
    adapters = tmp_path / "adapters-traces"
    (adapters / "ers").mkdir(parents=True, exist_ok=True)
    (adapters / "ers" / "adapter_config.json").write_text("{}")
    (adapters / "ers" / "adapter_model.safetensors").write_bytes(b"weights of the first training")
    (adapters / "ers" / "trace_distill_adapter.json").write_text(json.dumps({"dataset_fingerprint": "aaaa"}))
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    (base / "traces.jsonl").write_text('{"made": "with the old prompts"}\n')
    student = {
        "name": "student-traces",
        "backend": {"type": "local", "adapters": str(adapters)},
        "pipeline": {"prompt_style": "student", "use_adapters": True},
    }
    dialogues = tmp_path / "dialogues"
    if not dialogues.exists():
        _sample_dialogues(tmp_path)
    systems = [student, {"name": "base", "traces": str(base)}]
    return {"dialogues": str(dialogues), "limit": 2, "ppl": None, "bertscore": None, "systems": systems, **fields}


def _report_of(config_dict: dict, path, root=None) -> dict:
    """What `eval compare` stores for `config_dict` (its config, key and adapters; its paths placed in the run
    `root`), without scoring anything."""
    from distill.pipeline.stage_key import stage_key
    from eval.compare.compare import load_index, load_test_dialogues
    from eval.compare.reuse import adapter_fingerprints, json_config, report_inputs
    from eval.compare.systems import CompareConfig

    config = CompareConfig.model_validate(config_dict)
    test = load_test_dialogues(config, str(path))
    fingerprints = {s.name: fp for s in config.systems if s.backend and (fp := adapter_fingerprints(s.backend))}
    key = stage_key(report_inputs(config, test, load_index(config, test, str(path)), root))
    return {"config": json_config(config), "stage_key": key, "adapter_fingerprints": fingerprints}


def _why(report: dict, config_dict: dict, path) -> str | None:
    from eval.compare.compare import load_index, load_test_dialogues
    from eval.compare.reuse import report_changed
    from eval.compare.systems import CompareConfig

    config = CompareConfig.model_validate(config_dict)
    test = load_test_dialogues(config, str(path))
    return report_changed(report, config, test, load_index(config, test, str(path)))


def test_a_point_reuses_only_a_report_of_its_own_config(tmp_path, monkeypatch):
    """A compare killed midway leaves the new compare.yaml beside the old config's report: rerun it."""
    import eval.compare.cli_compare as cli_compare
    from eval.compare.compare import REPORT_JSON, load_config
    from eval.compare.reuse import run_root
    from eval.curve.curve import run_compare
    from eval.curve.point_systems import COMPARE_DIR

    def compare(*systems):
        return _point_config(tmp_path) | {"systems": [{"name": s, "traces": f"t-{s}"} for s in systems]}

    ran = []

    def fake_run(args):  # what cli_compare.run stores: the validated config of the file it was given, its key
        ran.append(args.config)
        root = run_root(args.out)
        report = _report_of(load_config(args.config).model_dump(), args.config, root) | {"systems": {}}
        (tmp_path / COMPARE_DIR / REPORT_JSON).write_text(json.dumps(report))
        return 0

    monkeypatch.setattr(cli_compare, "run", fake_run)
    (tmp_path / COMPARE_DIR).mkdir()
    run_compare(tmp_path, compare("a"))
    assert len(ran) == 1
    run_compare(tmp_path, compare("a"))
    assert len(ran) == 1  # the same config: its report is reused
    (tmp_path / "compare.yaml").write_text(yaml.safe_dump(compare("a", "b"), sort_keys=False))  # then killed
    run_compare(tmp_path, compare("a", "b"))
    assert len(ran) == 2
    report = json.loads((tmp_path / COMPARE_DIR / REPORT_JSON).read_text())
    assert [s["name"] for s in report["config"]["systems"]] == ["a", "b"]


def test_a_report_is_reused_only_over_adapters_that_hold_what_they_held(tmp_path):
    """The curve's reuse decision (`run_compare`'s): two configs alike, adapters under the same path that hold
    other weights or learnt another dataset make the report stale; so does a report stored without a key."""
    config = _point_config(tmp_path)
    stored, adapter = _report_of(config, "c.yaml"), tmp_path / "adapters-traces" / "ers"
    assert _why(stored, config, "c.yaml") is None

    (adapter / "adapter_model.safetensors").write_bytes(b"weights of the second training")  # same path, retrained
    assert _why(stored, config, "c.yaml").startswith("system 'student-traces': adapter 'ers' holds other weights (")
    (adapter / "trace_distill_adapter.json").write_text(json.dumps({"dataset_fingerprint": "bbbb"}))
    assert _why(stored, config, "c.yaml") == (
        "system 'student-traces': adapter 'ers' was retrained on another dataset (fingerprint aaaa → bbbb)"
    )
    old = {"config": stored["config"]}  # a report written before stage keys
    assert _why(old, config, "c.yaml") == "no stage key recorded (made by an earlier version)"
    stored = _report_of(config, "c.yaml")
    assert _why(stored, {**config, "limit": 3}, "c.yaml") == "its config changed (limit: stored 2, now 3)"
    assert _why(stored, {**config, "paper_reference": "trace-table1"}, "c.yaml") == (
        "its config changed (paper_reference: stored None, now 'trace-table1')"
    )


def test_a_report_is_computed_again_when_its_base_run_or_its_test_dialogues_change(tmp_path):
    """The base system is a `traces:` path: regenerated (a prompt change), its old figures must not stay in every
    point's report; dialogues rebuilt at the same path (other test ids) make the report stale too."""
    from data_prep.__main__ import main as data_prep_main
    from data_prep.loaders import SAMPLE_PATH

    config = _point_config(tmp_path)
    stored = _report_of(config, "c.yaml")
    (tmp_path / "base" / "traces.jsonl").write_text('{"made": "with the new prompts"}\n')
    assert _why(stored, config, "c.yaml") == "its system 'base' changed"
    stored = _report_of(config, "c.yaml")
    argv = ["dialogues", "--source", str(SAMPLE_PATH), "--out", config["dialogues"], "--seed", "7"]
    assert data_prep_main(argv) == 0  # the same path, another split
    assert _why(stored, config, "c.yaml") == "its test dialogues changed"


def test_a_generated_system_is_made_again_when_its_prompts_prompt_version_or_config_change(
    tmp_path, monkeypatch, capsys
):
    """A prompt edited without a version bump changes a generated system's key (its rendered prompts); a version
    bump or another config says so from the run's own record."""
    from distill.pipeline.stage_key import write_key
    from distill.roles import roles
    from eval.compare.reuse import drop_stale_run, system_inputs

    pipeline = {"prompt_style": "teacher", "use_adapters": False}
    system = {"name": "base", "backend": {"type": "local"}, "pipeline": pipeline}
    config = PipelineConfig(**pipeline)

    def stored() -> TraceStore:
        store = TraceStore(tmp_path / "base")
        store.claim(RunInfo(config.key_dict(), "local", "m", roles.prompt_version("teacher"), system=system))
        write_key(store.run_dir, system_inputs(system, config, {}, None))
        return store

    store = stored()
    drop_stale_run(store, "base", system, config, {}, None)
    assert store.run_dir.exists()
    monkeypatch.setattr(roles, "ROLES", {**roles.ROLES, "asi": replace(roles.ROLES["asi"], task="Name the emotion.")})
    capsys.readouterr()
    drop_stale_run(store, "base", system, config, {}, None)
    assert not store.run_dir.exists()
    assert capsys.readouterr().out == "regenerating system 'base': its prompts changed\n"
    monkeypatch.undo()
    store = stored()
    monkeypatch.setattr(roles, "PROMPT_VERSION", "v9")
    drop_stale_run(store, "base", system, config, {}, None)
    assert not store.run_dir.exists()
    assert capsys.readouterr().out == "regenerating system 'base': the prompt version changed (stored v2, now v9)\n"
    store = stored()
    other = {**system, "backend": {"type": "local", "batch_size": 4}}  # what decodes it, nothing else
    drop_stale_run(store, "base", other, config, {}, None)
    assert not store.run_dir.exists()
    assert capsys.readouterr().out == (
        "regenerating system 'base': its config changed (backend.batch_size: stored None, now 4)\n"
    )


@pytest.mark.slow  # three compares of a tiny student
def test_a_point_whose_adapter_was_retrained_computes_its_report_again(tmp_path, tiny_model_dir, capsys):
    """`run_compare` for real: its report is reused while the student's adapter holds what it held, and computed
    again, saying why, once the adapter is retrained under the same path (its old report used to be shown)."""
    from fault_proxy import save_tiny_lora

    from eval.curve.curve import run_compare
    from eval.curve.point_systems import COMPARE_DIR

    adapters = tmp_path / "n3" / "adapters-traces"
    save_tiny_lora(tiny_model_dir, adapters / "ers", seed=0)
    student = {
        "name": "student-traces",
        "backend": {"type": "local", "model": tiny_model_dir, "batch_size": 2, "adapters": str(adapters)},
        "pipeline": {"prompt_style": "student", "use_adapters": True, "max_attempts": 1, "rag": False}
        | {"use_asi": False, "use_cae": False, "use_srp": False},
    }
    dialogues = _sample_dialogues(tmp_path)
    compare = {"dialogues": str(dialogues), "limit": 2, "ppl": None, "bertscore": None, "systems": [student]}
    point, report = tmp_path / "n3", tmp_path / "n3" / COMPARE_DIR / "report.json"

    def stored_weights() -> str:
        return json.loads(report.read_text())["adapter_fingerprints"]["student-traces"]["ers"]["weights_sha256"]

    capsys.readouterr()
    run_compare(point, compare)
    first = stored_weights()
    run_compare(point, compare)
    assert f"reusing {report}" in capsys.readouterr().out
    save_tiny_lora(tiny_model_dir, adapters / "ers", seed=1)  # retrained: the same path, other weights
    run_compare(point, compare)
    log = capsys.readouterr().out
    assert f"reusing {report}" not in log
    assert (
        f"regenerating {report}: system 'student-traces': adapter 'ers' holds other weights "
        f"(sha256 {first[:12]} → {stored_weights()[:12]})"
    ) in log
    assert "regenerating system 'student-traces': adapter 'ers' holds other weights" in log  # its traces too
    assert json.loads(report.read_text())["systems"][0]["source"] == "generated"


def test_ppl_given_the_dialogue_reaches_a_point_compare_only_where_the_curve_names_it(tmp_path):
    from eval.curve.config import CurveConfig
    from eval.curve.point_systems import point_compare

    plain = CurveConfig(traces="t", dialogues="d", points=[5], students=["direct"])
    assert "dialogue_ppl" not in point_compare(tmp_path, [{"name": "a"}], plain)  # an old curve's compare unchanged
    named = CurveConfig(traces="t", dialogues="d", points=[5], students=["direct"], dialogue_ppl={"batch_size": 2})
    assert point_compare(tmp_path, [{"name": "a"}], named)["dialogue_ppl"] == {"model": "smollm2-135m", "batch_size": 2}
