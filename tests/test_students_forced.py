"""The `student-forced` student of `eval students` (scheduled sampling, DAgger; issue 79) on the tiny ESD-CoT-format
fixture (test_students'): its reply role learns from the upstream answers the student itself gives on the train
dialogues, cross-fitted over seeded folds, so that no upstream adapter answers a dialogue it learnt from; a share of
the reply rows keeps the teacher's upstream; a rerun reuses every stage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_students import adapter_times, students, tiny_config

FORCED = "student-forced"


def _forced(data: dict) -> dict:
    return next(s for s in data["students"] if s["name"] == FORCED)


def forced_config(tmp_path: Path, model: str, forced: dict, **changes) -> Path:
    path = tiny_config(tmp_path, model, **{"student": [FORCED], **changes})
    data = yaml.safe_load(path.read_text())
    _forced(data)["forced"] = forced
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _split(folder: Path, role: str, split: str = "train") -> list[dict]:
    from datasets import load_from_disk

    return load_from_disk(str(folder / role))[split].to_list()


def test_the_folds_partition_the_conversations_seeded():
    from eval.students.forced import fold_split

    ids = [f"c{n}" for n in range(7)] + ["c0"]  # a conversation of two dialogues is dealt once
    folds = fold_split(ids, 3, 42)
    assert sorted(c for fold in folds for c in fold) == sorted(set(ids))  # each conversation in exactly one fold
    assert sorted(len(fold) for fold in folds) == [2, 2, 3]
    assert fold_split(list(reversed(ids)), 3, 42) == folds  # the seed deals them, not their order
    assert fold_split(ids, 3, 43) != folds
    with pytest.raises(ValueError, match="forced.folds: 9 folds of 7 train conversations"):
        fold_split(ids, 9, 42)


def _write_answers(folder: Path, traces: list, held: list[str], failed: str) -> Path:
    """A fold's answers.jsonl as the fold adapters would write it: the teacher's upstream answers with their text
    replaced by a marker naming the dialogue; the dialogue `failed` lacks its sr answer (its step failed)."""
    lines = []
    for trace in traces:
        if trace.dialogue.conv_id not in held:
            continue
        did = trace.dialogue.id
        outputs = {"em": {**trace.outputs["em"], "emotion": f"student em {did}"},
                   "sr": {**trace.outputs["sr"], "reason": f"student sr {did}"}}  # fmt: skip
        if did == failed:
            del outputs["sr"]
        lines.append({"dialogue_id": did, "conv_id": trace.dialogue.conv_id, "outputs": outputs, "failure": None})
    folder.mkdir(parents=True)
    (folder / "answers.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def test_the_reply_rows_read_the_fold_answers_and_the_teachers_for_their_share(tmp_path):
    from distill.datasets.dataset_card import read_run
    from eval.runner import Runner
    from eval.students.config import load_students_config
    from eval.students.forced import fold_split, forced_reply, train_conversations
    from eval.students.recipe import import_student, train_subset

    config = load_students_config(str(forced_config(tmp_path, "smollm2-135m", {"folds": 2, "share": 0.5})))
    student, out = config.by_name(FORCED), tmp_path / "out"
    runner = Runner(out)
    train, base = import_student(runner, student, config, out, train_subset(config, out)[0])
    traces = read_run(train)[0]
    folds = fold_split(train_conversations(base, student.roles), 2, 42)
    failed = traces[0].dialogue.id
    answers = [_write_answers(tmp_path / f"answers-{k}", traces, held, failed) for k, held in enumerate(folds)]
    folder = forced_reply(runner, student, train, base, answers, out / "forced", 42, config)

    record = json.loads((folder / "forced.json").read_text())
    fold_of = {t.dialogue.id: k for t in traces for k, held in enumerate(folds) if t.dialogue.conv_id in held}
    assert {d: r["fold"] for d, r in record["dialogues"].items()} == fold_of  # every train dialogue, its own fold
    teacher = {d for d, r in record["dialogues"].items() if r["upstream"] == "teacher"}
    assert len(teacher) == 2 and record["upstream"] == {"student": 2, "teacher": 2}  # share 0.5 of 4 dialogues
    reply, by_base = student.reply_role, {r["dialogue_id"]: r for r in _split(base, student.reply_role)}
    rows = {r["dialogue_id"]: r for r in _split(folder, reply)}
    assert rows.keys() == by_base.keys() == fold_of.keys()
    for did, row in rows.items():
        assert row["completion"] == by_base[did]["completion"]  # the teacher's reply: only the upstream changes
        prompt = _text(row["prompt"])
        if did in teacher:
            assert row["prompt"] == by_base[did]["prompt"] and "student" not in prompt
            continue
        assert f"student em {did}" in prompt and row["prompt"] != by_base[did]["prompt"], prompt
        if did == failed:  # its fold's sr failed: the teacher's sr kept there, counted
            assert "student sr" not in prompt and record["dialogues"][did]["teacher_for"] == ["sr"]
        else:
            assert f"student sr {did}" in prompt
    assert record["failed"] == {"em": 0, "sr": int(failed not in teacher)}
    assert _split(folder, reply, "validation") == _split(base, reply, "validation")  # early stopping: the same rows
    for role in ("em", "sr"):  # the upstream rows are the per-role student's: its adapters are copied, not trained
        assert _split(folder, role) == _split(base, role)


FIELDS = {"one-fold": ({"folds": 1}, "folds", "1 folds: cross-fitting takes at least 2"),
          "text-folds": ({"folds": "two"}, "folds", "valid integer"),
          "share-above-one": ({"share": 1.5}, "share", "1.5 is not a share of the reply rows"),
          "share-bool": ({"share": True}, "share", "True is not a share"),
          "unknown-key": ({"fold": 2}, "fold", "Extra inputs are not permitted")}  # fmt: skip


@pytest.mark.parametrize("forced, field, words", FIELDS.values(), ids=FIELDS)
def test_a_bad_forced_setting_is_one_line_naming_the_field(tmp_path, capsys, forced, field, words):
    config = forced_config(tmp_path, "smollm2-135m", forced)
    index = [s["name"] for s in yaml.safe_load(config.read_text())["students"]].index(FORCED)
    assert students(config, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"students.{index}.forced.{field}" in err and words in err, err
    assert not (tmp_path / "out").exists()


def test_forced_on_a_one_adapter_student_or_more_folds_than_dialogues_is_one_line(tmp_path, capsys):
    config = tiny_config(tmp_path, "smollm2-135m", student=["direct"])
    data = yaml.safe_load(config.read_text())
    next(s for s in data["students"] if s["name"] == "direct")["forced"] = {"folds": 2}
    config.write_text(yaml.safe_dump(data))
    assert students(config, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "students (direct): forced: " in err and "trains reply alone" in err, err

    (tmp_path / "more").mkdir()
    config = forced_config(tmp_path / "more", "smollm2-135m", {"folds": 5})  # the fixture has 4 train dialogues
    assert students(config, tmp_path / "more" / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"students ({FORCED}): forced.folds: 5 folds of 4 train dialogues" in err
    assert not (tmp_path / "more" / "out").exists()


def test_the_shipped_student_forced_is_traces_with_two_folds_and_varies_it():
    from test_students import SHIPPED

    from eval.students.config import load_students_config

    config = load_students_config(str(SHIPPED))
    forced = config.by_name(FORCED)
    assert (forced.forced.folds, forced.forced.share, forced.roles) == (2, 0.0, config.by_name("traces").roles)
    assert config.varies(forced) == "traces"  # the record sets it against traces, and its stop table shows re alone
    assert config.compare.primary.pair == ("multitask", "direct")  # the declared primary is left as it was


def _text(prompt: list[dict]) -> str:
    return "\n".join(message["content"] for message in prompt)


def _shown(text: str, prompt: str) -> bool:
    """Whether an answer's text is in a rendered prompt (as written, or inside a JSON string)."""
    return text in prompt or json.dumps(text, ensure_ascii=False)[1:-1] in prompt


def _fold_conversations(fold: Path, roles: list[str]) -> tuple[set[str], set[str]]:
    """What fold's adapters learnt (their train rows' conversations) and what they answered."""
    from datasets import load_from_disk

    from distill.adapters.adapters import read_metadata

    learnt = set()
    for role in roles:
        rows = load_from_disk(str(fold / "datasets" / role))["train"]
        # the adapter learnt exactly these rows: its metadata names their fingerprint
        assert read_metadata(fold / "adapters" / role)["dataset_fingerprint"] == rows._fingerprint
        learnt |= set(rows["conv_id"])
    lines = (fold / "answers" / "answers.jsonl").read_text().splitlines()
    return learnt, {json.loads(line)["conv_id"] for line in lines}


@pytest.mark.slow
def test_student_forced_cross_fits_its_folds_takes_traces_upstream_and_a_rerun_reuses_every_stage(
    tmp_path, tiny_model_dir, capsys
):
    config = forced_config(tmp_path, tiny_model_dir, {"folds": 2, "share": 0.0}, student=["traces", FORCED],
                           num_train_epochs=1, oracle=False, prompted=False)  # fmt: skip
    out = tmp_path / "out"
    assert students(config, out) == 0
    log = capsys.readouterr().out
    root = out / "forced" / FORCED / "seed-42"
    imported = (out / "imports" / FORCED / "train" / "traces.jsonl").read_text().splitlines()
    everyone = {json.loads(line)["dialogue"]["conv_id"] for line in imported}
    answered = []
    for k in range(2):
        learnt, answers = _fold_conversations(root / f"fold-{k}", ["em", "sr"])
        assert answers and not learnt & answers, (k, learnt, answers)  # no fold adapter answers what it learnt
        assert learnt | answers == everyone  # it learnt every other train conversation
        answered.append(answers)
    assert not answered[0] & answered[1] and answered[0] | answered[1] == everyone  # the folds partition them

    record = json.loads((root / "datasets" / "forced.json").read_text())
    assert record["upstream"] == {"student": 4, "teacher": 0}  # share 0: every reply row reads the student's
    for k, conversations in enumerate(answered):  # each reply row's upstream: the answers its fold's adapters gave
        for line in (root / f"fold-{k}" / "answers" / "answers.jsonl").read_text().splitlines():
            given = json.loads(line)
            row = record["dialogues"][given["dialogue_id"]]
            assert row["fold"] == k and given["conv_id"] in conversations
            assert row["answers"] == given["outputs"]
            assert set(row["teacher_for"]) == {"em", "sr"} - set(given["outputs"])  # a failed answer: the teacher's
    prompts = {r["dialogue_id"]: _text(r["prompt"]) for r in _split(root / "datasets", "re")}
    assert prompts.keys() == record["dialogues"].keys()
    teacher = {r["dialogue_id"]: _text(r["prompt"]) for r in _split(out / "datasets" / "traces", "re")}
    changed = {d for d, prompt in prompts.items() if prompt != teacher[d]}
    assert changed and changed <= {d for d, r in record["dialogues"].items() if r["answers"]}  # the student's answers
    for did, row in record["dialogues"].items():
        for role, answer in row["answers"].items():
            assert all(_shown(str(text), prompts[did]) for text in answer.values()), (did, role, answer)

    for role in ("em", "sr"):  # traces' upstream adapters, copied; re its own
        assert f"{out / 'adapters' / FORCED / 'seed-42' / role}: the same rows and settings as" in log
    assert "--output_dir " + str(root / "fold-0" / "adapters") in log
    report = json.loads((out / "eval" / "report.json").read_text())
    assert [s["name"] for s in report["systems"]] == ["chatgpt", "traces", FORCED]
    trained_record = json.loads((out / "students.json").read_text())["students"]
    forced = next(s for s in trained_record if s["name"] == FORCED)
    assert forced["varies"] == "traces" and "folds" not in trained_record[0]["seeds"][0]
    folds = forced["seeds"][0]["folds"]  # where each fold adapter stopped
    assert [sorted(fold) for fold in folds] == [["em", "sr"]] * 2
    assert all(c["stopped_at_epoch"] == 1 and c["steps"] >= 1 for fold in folds for c in fold.values()), folds
    trained = adapter_times(out) | {str(p): p.stat().st_mtime_ns for p in root.glob("fold-*/adapters/*/*.safetensors")}
    assert len(trained) == 10  # traces' 3, student-forced's 3 (2 copied), 2 folds x 2 upstream roles

    assert students(config, out) == 0  # a rerun: every stage reused, the fold stages among them, nothing trained
    stages = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[stage] ")]
    assert any(": fold 1: answers: reused" in line for line in stages), stages
    assert stages and all(": reused: key unchanged (" in line for line in stages), stages
    assert adapter_times(out) | {str(p): p.stat().st_mtime_ns for p in root.glob("fold-*/adapters/*/*.safetensors")} \
        == trained  # fmt: skip

    data = yaml.safe_load(config.read_text())
    _forced(data)["forced"]["share"] = 0.5  # the reply's rows change: re alone retrains, the folds are reused
    config.write_text(yaml.safe_dump(data))
    assert students(config, out) == 0
    capsys.readouterr()
    now = adapter_times(out) | {str(p): p.stat().st_mtime_ns for p in root.glob("fold-*/adapters/*/*.safetensors")}
    assert {k for k in now if now[k] != trained[k]} == {f"adapters/{FORCED}/seed-42/re/adapter_model.safetensors"}
