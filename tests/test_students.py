"""`eval students` on a tiny fixture in ESD-CoT's formats (the chains test_import writes, never ESD's text), with the
random 2-layer model: it runs from nothing to a report and students.json with each role's convergence; a rerun
reuses every stage; an edited mapping retrains only the student that reads it; bad input is one line, nothing
written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_import import REPO, compact_pipeline, write_full_chain, write_instruction

from eval.__main__ import main as evaluate

PIPELINES, MAPPINGS = REPO / "configs" / "pipelines", REPO / "configs" / "import"
SHIPPED = REPO / "configs" / "eval" / "escot-students.yaml"
TRAIN_FLAGS = {"per_device_train_batch_size": 2, "num_threads": 1, "bf16": False, "max_length": 256}


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the shipped configs name their files relative to the repository


def esd_cot(folder: Path) -> Path:
    """ESD-CoT's train (instruction format), val and test (full-chain format) files, from the invented chains."""
    folder.mkdir()
    write_instruction(folder / "train_em_sr_re.json")
    val = json.loads(write_full_chain(folder / "val.json").read_text())
    for n, row in enumerate(val):
        row["id"] = 200 + n
    (folder / "val.json").write_text(json.dumps(val))
    write_full_chain(folder / "test.json")
    return folder


def tiny_config(tmp_path: Path, model: str, **changes) -> Path:
    """The shipped config over the fixture, its pipelines compacted and its mappings pointing at them, the tiny
    model, two epochs at most, no model-based metrics."""
    config = yaml.safe_load(SHIPPED.read_text())
    data = esd_cot(tmp_path / "esd-cot")
    config["data"] = {split: str(data / f"{name}.json") for split, name in
                      (("train", "train_em_sr_re"), ("validation", "val"), ("test", "test"))}  # fmt: skip
    (tmp_path / "maps").mkdir()
    for student in [*config["students"], config["reference"]]:
        for key in ("mapping", "validation_mapping"):
            if key in student:
                student[key] = str(local_mapping(Path(student[key]), tmp_path))
        if "pipeline" in student:
            student["pipeline"] = str(local_variant(REPO / student["pipeline"], tmp_path / "maps"))
        if "auxiliary" in student:  # a multitask student's links: their import's mapping, compacted as well
            student["auxiliary"]["mapping"] = str(local_mapping(Path(student["auxiliary"]["mapping"]), tmp_path))
    config["student"] = ["traces", "direct", "joint"]  # the strategy link's variants: their own test
    config.update(num_train_epochs=2, seeds=[42], backend={"model": model, "dtype": "float32", "batch_size": 4})
    config["train_flags"] = dict(TRAIN_FLAGS)
    config["compare"].update(ppl=None, bertscore=None, relevance=None, max_attempts=1)
    # the shipped bertscore_f1 is off here: a metric scored; the pair one that the students chosen here train
    config["compare"]["primary"] = {"pair": ["traces", "direct"], "metric": "rouge_l"}
    config.update(changes)
    path = tmp_path / "students.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def local_mapping(mapping: Path, tmp_path: Path) -> Path:
    """A copy of a shipped mapping whose pipeline is the compacted copy of its own."""
    data = yaml.safe_load((REPO / mapping).read_text())
    pipeline = tmp_path / "maps" / Path(data["pipeline"]).name
    if not pipeline.is_file():
        compact_pipeline(REPO / data["pipeline"], pipeline, max_new_tokens=48)
    data["pipeline"] = str(pipeline)
    out = tmp_path / "maps" / mapping.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def local_variant(pipeline: Path, maps: Path) -> Path:
    """The compacted copy of a pipeline (local_mapping wrote it), or of a variant a verbatim copy, whose
    `extends` then names the compacted copy of its base."""
    out = maps / pipeline.name
    if not out.is_file():
        assert "extends" in yaml.safe_load(pipeline.read_text()), pipeline
        out.write_text(pipeline.read_text())
    return out


def adapter_times(out: Path) -> dict[str, int]:
    return {
        str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.glob("adapters/*/seed-*/*/*.safetensors"))
    }


def students(config: Path, out: Path, *extra: str) -> int:
    return evaluate(["students", "--config", str(config), "--out", str(out), "--limit", "2", *extra])


def test_the_shipped_config_loads_with_three_students_and_the_strategy_link_variants(tmp_path):
    from eval.students.config import load_students_config

    config = load_students_config(str(SHIPPED))
    expected = [("traces", ["em", "sr", "re"], "re", {}), ("direct", ["reply"], "reply", {}),
                ("joint", ["chain"], "chain", {}), ("traces-rank", ["em", "sr", "re"], "re", {"sr": "rank"}),
                ("joint-rank", ["chain"], "chain", {"chain.strategy": "rank"}),
                ("traces-strategy-first", ["em", "sr", "re"], "re", {}),
                ("traces-strategy-only", ["em", "sr", "re"], "re", {}), ("multitask", ["reply"], "reply", {}),
                ("two-stage", ["em", "sr", "re"], "re", {}),
                ("student-forced", ["em", "sr", "re"], "re", {})]  # fmt: skip
    assert [(s.name, s.roles, s.reply_role, s.label_decoding) for s in config.students] == expected
    multitask, two_stage = config.by_name("multitask"), config.by_name("two-stage")
    assert multitask.auxiliary.links == ["em", "sr"] and two_stage.init_from == "multitask"
    assert config.train_config.endswith("smollm2-cpu.yaml") and config.early_stopping_patience == 1
    # the question the run is for is declared before it, and reaches the compare it runs
    from eval.students.systems import compare_config

    trained = {"multitask": {42: tmp_path / "a"}, "direct": {42: tmp_path / "b"}}
    compare = compare_config(config, tmp_path / "ref", trained, 200)
    assert compare["primary"] == {"pair": ("multitask", "direct"), "metric": "bertscore_f1"}
    # declared before the run, with its date: the config's comment says when
    assert "declared on 2026-12-07" in SHIPPED.read_text()
    # a run of fewer students (`--student multitask`) scores no `direct`: no primary row, Holm over every row
    assert compare_config(config, tmp_path / "ref", {"multitask": trained["multitask"]}, 200)["primary"] is None
    # with several seeds a student is its first seed's system (each seed's own name also loads)
    seeded = load_students_config(str(SHIPPED), seeds=[42, 43])
    both = {name: {42: tmp_path / "a", 43: tmp_path / "b"} for name in ("multitask", "direct")}
    assert compare_config(seeded, tmp_path / "ref", both, 200)["primary"]["pair"] == ("multitask-s42", "direct-s42")


@pytest.mark.slow
def test_students_run_from_nothing_reuse_every_stage_and_retrain_what_a_mapping_changes(
    tmp_path, tiny_model_dir, capsys
):
    config, out = tiny_config(tmp_path, tiny_model_dir), tmp_path / "out"
    assert students(config, out) == 0
    report = json.loads((out / "eval" / "report.json").read_text())
    assert [s["name"] for s in report["systems"]] == ["chatgpt", "prompted", "traces", "direct", "joint", "oracle"]
    assert report["test"]["n"] == 2 and report["settings"]["reference_system"] == "chatgpt"
    record = json.loads((out / "students.json").read_text())
    for student in record["students"]:  # every role trained to the validation loss, its stop recorded
        for role, c in student["seeds"][0]["roles"].items():
            kept_the_best_epoch(c, cap=2)  # patience 1 under a cap of 2: both epochs, the better kept
            assert c["stopped_at_epoch"] == 2 and c["steps"] >= 2, (role, c)
    assert {r["seconds"] > 0 and r["peak_rss_mb"] > 0 for r in record["stages"].values()} == {True}
    assert "Where each role stopped" in (out / "students.md").read_text()
    oracle = [json.loads(line) for line in (out / "eval" / "systems" / "oracle" / "traces.jsonl").open()]
    assert all(t["outputs"]["em"] == t2["outputs"]["em"] for t, t2 in zip(oracle, chains(out)))  # the teacher's em
    trained = adapter_times(out)
    assert len(trained) == 5  # em, sr, re; reply; chain
    capsys.readouterr()

    assert students(config, out) == 0  # a rerun: every stage reused, nothing trained
    lines = capsys.readouterr().out.splitlines()
    stages = [line for line in lines if line.startswith("[stage] ")]
    assert stages and all(": reused: key unchanged (" in line for line in stages), stages
    assert adapter_times(out) == trained

    mapping = Path(yaml.safe_load(config.read_text())["students"][1]["mapping"])  # direct's: its reply's source
    edited = yaml.safe_load(mapping.read_text())
    edited["answers"]["reply"]["response"] = {"section": "Emotion"}
    mapping.write_text(yaml.safe_dump(edited))
    assert students(config, out) == 0
    log = capsys.readouterr().out
    assert "regenerating" in log and "direct: import train: ran" in log.replace("[stage] ", "")
    now = adapter_times(out)
    changed = {k for k in now if now[k] != trained[k]}
    assert changed == {"adapters/direct/seed-42/reply/adapter_model.safetensors"}

    assert students(config, out, "--seeds", "42", "43") == 0  # a second seed: seed 42's adapters are kept
    record = json.loads((out / "students.json").read_text())
    assert all(now[k] == v for k, v in adapter_times(out).items() if k in now) and len(adapter_times(out)) == 10
    for student in record["students"]:
        assert [s["system"] for s in student["seeds"]] == [f"{student['name']}-s42", f"{student['name']}-s43"]
        assert student["spread"]["tokens_per_dialogue"] is not None and student["spread"]["tokens_per_dialogue"] >= 0


def kept_the_best_epoch(c: dict, cap: int) -> None:
    """A role's convergence as students.json records it: one validation loss per epoch it trained, up to the cap; the
    epoch kept the one with the lowest; stopped early exactly when it stopped before the cap."""
    losses = dict(c["eval_loss_by_epoch"])
    assert c["max_epochs"] == cap and list(losses) == list(range(1, round(c["stopped_at_epoch"]) + 1)), c
    assert c["best_epoch"] == min(losses, key=losses.get), c
    assert c["best_eval_loss"] == pytest.approx(losses[c["best_epoch"]], abs=1e-5), c
    assert c["stopped_early"] == (c["stopped_at_epoch"] < cap), c


@pytest.mark.slow
def test_a_rerun_with_out_spelled_relative_or_the_run_moved_reuses_every_stage(tmp_path, tiny_model_dir, capsys):
    """Keys hold where a path is, not how it was spelled: the run made with an absolute --out, rerun with it
    relative, then copied elsewhere and rerun there, reuses every stage, the generated systems' replies included
    (n=3 of 4 rows: the train import reads a file written inside the run)."""
    import os
    import shutil

    config, out = tiny_config(tmp_path, tiny_model_dir, student=["traces", "direct"], n=3), tmp_path / "out"
    assert students(config, out.resolve()) == 0
    assert (out / "data" / "train-3.json").is_file()
    made = {p.relative_to(out): p.stat().st_mtime_ns for p in out.glob("eval/**/*.jsonl")}
    made[Path("eval/report.json")] = (out / "eval" / "report.json").stat().st_mtime_ns
    assert len(made) == 5, made  # prompted, traces, direct, oracle
    capsys.readouterr()
    moved = tmp_path / "elsewhere" / "run"
    for run, spelled in [(out, Path(os.path.relpath(out))), (moved, moved)]:
        if run == moved:
            shutil.copytree(out, moved)  # the times kept: a file rewritten shows
        assert students(config, spelled) == 0
        log = capsys.readouterr().out
        stages = [line for line in log.splitlines() if line.startswith("[stage] ")]
        assert len(stages) == 10 and all(": reused: key unchanged (" in line for line in stages), log
        assert "regenerating" not in log and "retraining" not in log, log
        assert {p: (run / p).stat().st_mtime_ns for p in made} == made, spelled


@pytest.mark.slow
def test_with_no_validation_file_eval_fraction_holds_out_train_conversations(tmp_path, tiny_model_dir, capsys):
    """--eval-fraction instead of a validation file: half the 4 train conversations validate, the rest train. At a
    learning rate of 0 the second epoch's validation loss is the first's, no better: patience 1 stops the role there,
    under a cap of 3 (--epochs), keeping epoch 1."""
    from datasets import load_from_disk

    config = tiny_config(tmp_path, tiny_model_dir, train_flags={**TRAIN_FLAGS, "learning_rate": 0.0})
    out = tmp_path / "out"
    assert students(config, out, "--student", "direct", "--eval-fraction", "0.5", "--epochs", "3") == 0
    reply = load_from_disk(str(out / "datasets" / "direct" / "reply"))
    assert reply["train"].num_rows == reply["validation"].num_rows == 2
    assert not (out / "imports" / "direct" / "validation").exists()
    report = json.loads((out / "eval" / "report.json").read_text())
    assert [s["name"] for s in report["systems"]] == ["chatgpt", "prompted", "direct"]  # no traces: no oracle row
    reply = json.loads((out / "students.json").read_text())["students"][0]["seeds"][0]["roles"]["reply"]
    kept_the_best_epoch(reply, cap=3)
    assert reply["stopped_early"] and (reply["stopped_at_epoch"], reply["best_epoch"]) == (2, 1), reply


@pytest.mark.slow
def test_a_ranked_student_takes_its_lenders_adapters_and_a_label_first_one_trains_sr_alone(
    tmp_path, tiny_model_dir, capsys
):
    """traces-rank differs from traces only in decoding: its adapters are traces', copied, and its compare row
    ranks sr's strategy (each answer's `label scores:` event). traces-strategy-first's em and re rows are traces':
    copied; its sr learns the strategy first, and is trained. traces-strategy-only's sr writes the strategy alone,
    its reason left empty in the trace."""
    from datasets import load_from_disk

    chosen = ["traces", "traces-rank", "traces-strategy-first", "traces-strategy-only"]
    config = tiny_config(tmp_path, tiny_model_dir, student=chosen, oracle=False, prompted=False)
    out = tmp_path / "out"
    assert students(config, out) == 0
    log = capsys.readouterr().out
    for role in ("em", "sr", "re"):
        assert f"adapters/traces-rank/seed-42/{role}: the same rows and settings as" in log, log
    assert "adapters/traces-strategy-first/seed-42/em: the same rows and settings as" in log
    assert "adapters/traces-strategy-first/seed-42/sr: the same rows and settings as" not in log
    times = adapter_times(out)
    assert times["adapters/traces-strategy-first/seed-42/sr/adapter_model.safetensors"]
    sr = load_from_disk(str(out / "datasets" / "traces-strategy-first" / "sr"))["train"][0]["completion"][0]
    assert sr["content"].startswith('{"strategy":'), sr
    compare = yaml.safe_load((out / "compare.yaml").read_text())
    pipelines = {s["name"]: s.get("pipeline", {}) for s in compare["systems"]}
    assert pipelines["traces-rank"]["label_decoding"] == {"sr": "rank"} and "label_decoding" not in pipelines["traces"]
    ranked = [json.loads(line) for line in (out / "eval" / "systems" / "traces-rank" / "traces.jsonl").open()]
    assert all("label scores:" in json.dumps(t) for t in ranked)
    plain = (out / "eval" / "systems" / "traces" / "traces.jsonl").read_text()
    assert "label scores:" not in plain
    alone = [json.loads(line) for line in (out / "eval" / "systems" / "traces-strategy-only" / "traces.jsonl").open()]
    assert [t["outputs"]["sr"]["reason"] for t in alone if t["outputs"].get("sr")] == [""] * len(alone)
    report = json.loads((out / "eval" / "report.json").read_text())
    assert [s["name"] for s in report["systems"]] == ["chatgpt", *chosen]


def chains(out: Path) -> list[dict]:
    """The imported test chains, in the compare's order (its first dialogues)."""
    return [json.loads(line) for line in (out / "imports" / "test" / "traces.jsonl").open()][:2]


# --- bad input: one line each, nothing written --------------------------------------------------------------------


def _refused(capsys, code: int, out: Path, *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert all(w in err for w in words), err
    assert not out.exists()


def _edited(tmp_path: Path, change) -> Path:
    """The tiny config with `change` applied to its parsed form."""
    config = tiny_config(tmp_path, "smollm2-135m")
    data = yaml.safe_load(config.read_text())
    change(data)
    config.write_text(yaml.safe_dump(data))
    return config


def _rows_with(split: str, change):
    """A change to the config that writes the split's data file anew, its rows changed by `change(rows)`."""

    def edit(data: dict) -> None:
        path = Path(data["data"][split])
        rows = json.loads(path.read_text())
        change(rows)
        path.write_text(json.dumps(rows))

    return edit


def _primary(*pair: str, metric: str = "rouge_l"):
    return lambda data: data["compare"].update(primary={"pair": list(pair), "metric": metric})


# (a change to the parsed config, extra flags, words of the one line): each refused when the config loads or when the
# run starts (its data files, the compare it builds), before any stage; nothing written
BAD_CONFIGS = {
    "seed-twice": (lambda d: d.update(seeds=[42, 42]), (), ["seeds: 42 given twice"]),
    "seed-twice-flag": (None, ("--seeds", "43", "43"), ["seeds: 43 given twice"]),
    "seed-bool": (lambda d: d.update(seeds=[True]), (), ["field 'seeds.0'", "valid integer"]),
    "epochs-bool": (lambda d: d.update(num_train_epochs=True), (), ["field 'num_train_epochs'", "valid integer"]),
    "epochs-fraction": (lambda d: d.update(num_train_epochs=1.5), (), ["field 'num_train_epochs'"]),
    "patience-bool": (lambda d: d.update(early_stopping_patience=True), (), ["field 'early_stopping_patience'"]),
    "limit-0": (None, ("--limit", "0"), ["field 'compare.test_limit'", "greater than or equal to 1"]),
    "n-0": (None, ("--n", "0"), ["field 'n'", "greater than or equal to 1"]),
    "n-bool": (lambda d: d.update(n=True), (), ["field 'n'", "valid integer"]),
    "primary-same": (_primary("direct", "direct"), (), ["compare: primary.pair: two different systems"]),
    "primary-same-seed": (
        lambda d: d.update(seeds=[42, 43]) or _primary("traces", "traces-s42")(d),
        (),
        ["compare: primary.pair: two different systems"],
    ),
    "primary-metric-off": (
        _primary("traces", "direct", metric="bertscore_f1"),
        (),
        ["compare: primary.metric: bertscore_f1 is not scored here (bertscore: null)"],
    ),
    "primary-ppl-off": (_primary("traces", "direct", metric="ppl"), (), ["primary.metric: ppl is not scored here"]),
    "primary-unscored-oracle": (
        lambda d: d.update(oracle=False) or _primary("traces", "oracle")(d),
        (),
        ["compare.primary.pair: 'oracle' is not a system of this run"],
    ),
    "test-of-train-shape": (
        lambda d: d["data"].update(test=d["data"]["train"]),
        (),
        ["data.test: ", "id names field 'id', which no row of", "train_em_sr_re.json has"],
    ),
    "validation-truncated": (
        lambda d: Path(d["data"]["validation"]).write_text('[{"id": 1,'),
        (),
        ["data.validation: ", "val.json: cannot read its rows"],
    ),
    "validation-not-utf8": (
        lambda d: Path(d["data"]["validation"]).write_bytes(b"[\xe9]"),
        (),
        ["data.validation: ", "cannot read its rows"],
    ),
    "test-id-newline": (
        _rows_with("test", lambda rows: rows[2].update(id="7\n8")),
        (),
        ["data.test: ", "test.json row 3, field 'id': control character U+000A in the id"],
    ),
    "train-id-escape": (
        _rows_with("train", lambda rows: rows[0].update(dialog_id="\x1b[2J")),
        (),
        ["data.train: ", "train_em_sr_re.json row 1, field 'dialog_id': control character U+001B"],
    ),
}


@pytest.mark.parametrize("change, flags, words", BAD_CONFIGS.values(), ids=BAD_CONFIGS)
def test_a_bad_config_is_one_line_before_any_stage_runs(tmp_path, capsys, monkeypatch, change, flags, words):
    from eval.runner import Runner

    def no_stage(*_):
        raise AssertionError("a stage ran")

    monkeypatch.setattr(Runner, "run", no_stage)
    config = _edited(tmp_path, change or (lambda data: None))
    _refused(capsys, students(config, tmp_path / "out", *flags), tmp_path / "out", *words)


def test_label_decoding_of_a_role_the_student_does_not_train_is_one_line(tmp_path, capsys):
    config = _edited(tmp_path, lambda data: data["students"][1].update(label_decoding={"sr": "rank"}))  # direct's
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "students (direct)", "label_decoding: sr",
             "not a role it trains")  # fmt: skip


def test_a_primary_comparison_naming_no_system_of_the_run_is_one_line(tmp_path, capsys):
    config = _edited(tmp_path, lambda data: data["compare"].update(primary={"pair": ["traces", "nobody"],
                                                                             "metric": "bertscore_f1"}))  # fmt: skip
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "compare.primary.pair: 'nobody' is not a "
             "system of this run", "traces, direct")  # fmt: skip


def test_a_student_whose_mapping_imports_another_pipeline_is_one_line(tmp_path, capsys):
    config = _edited(tmp_path, lambda data: data["students"][0].update(pipeline=data["students"][2]["pipeline"]))
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "students (traces)", "nor the pipeline it "
             "extends")  # fmt: skip


def test_a_missing_validation_file_is_one_line_offering_eval_fraction(tmp_path, capsys):
    config = _edited(tmp_path, lambda data: data["data"].update(validation=str(tmp_path / "nowhere.json")))
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "data.validation", "nowhere.json",
             "eval_fraction")  # fmt: skip


def test_no_validation_split_is_one_line_offering_eval_fraction(tmp_path, capsys):
    config = _edited(tmp_path, lambda data: data["data"].update(validation=None))
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "data.validation", "eval_fraction")


def test_n_larger_than_the_train_file_is_one_line(tmp_path, capsys):
    config = tiny_config(tmp_path, "smollm2-135m")
    _refused(capsys, students(config, tmp_path / "out", "--n", "9"), tmp_path / "out", "n: 9", "has 4")


@pytest.mark.parametrize("content", [b'[{"a":', b"\xe9\xe9", b'{"rows": 1}'])
def test_a_train_file_that_is_not_a_json_list_is_one_line_naming_it(tmp_path, capsys, content):
    config = tiny_config(tmp_path, "smollm2-135m")
    data = yaml.safe_load(config.read_text())
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    data["data"]["train"] = str(bad)
    config.write_text(yaml.safe_dump(data))
    _refused(capsys, students(config, tmp_path / "out", "--n", "2"), tmp_path / "out", "data.train", str(bad))


def test_an_unknown_student_is_one_line(tmp_path, capsys):
    config = tiny_config(tmp_path, "smollm2-135m")
    code = students(config, tmp_path / "out", "--student", "traces", "nobody")
    _refused(capsys, code, tmp_path / "out", "unknown student 'nobody'", "traces, direct, joint")


def test_an_empty_student_list_is_one_line(tmp_path, capsys):
    """`student: []` trained no student and wrote a students.json without one, which records then kept."""
    config = _edited(tmp_path, lambda data: data.update(student=[]))
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "field 'student'", "at least 1 item")


def test_a_pipeline_without_a_reply_role_is_one_line(tmp_path, capsys):
    config = tiny_config(tmp_path, "smollm2-135m")
    data = yaml.safe_load(config.read_text())
    pipeline = yaml.safe_load(Path(data["students"][0]["pipeline"]).read_text())
    pipeline["name"] = "escot_no_reply"
    pipeline["roles"] = [r for r in pipeline["roles"] if r["name"] != "re"]
    (tmp_path / "no-reply.yaml").write_text(yaml.safe_dump(pipeline))
    mapping = yaml.safe_load(Path(data["students"][0]["mapping"]).read_text())
    mapping.update(pipeline=str(tmp_path / "no-reply.yaml"))
    del mapping["answers"]["re"]
    (tmp_path / "no-reply-map.yaml").write_text(yaml.safe_dump(mapping))
    data["students"][0].update(pipeline=str(tmp_path / "no-reply.yaml"), mapping=str(tmp_path / "no-reply-map.yaml"))
    del data["students"][0]["validation_mapping"]
    config.write_text(yaml.safe_dump(data))
    _refused(capsys, students(config, tmp_path / "out"), tmp_path / "out", "students (traces)", "no reply role")


def test_epochs_on_the_command_line_caps_each_role_over_the_config(monkeypatch, tmp_path):
    """`--epochs 2` is the config's `num_train_epochs` for this run, as the CPU record's command gives it."""
    import eval.students.recipe as recipe

    seen = {}
    stop = RuntimeError("stop before training")

    def run_students(config, out):
        seen["config"] = config
        raise stop

    monkeypatch.setattr(recipe, "run_students", run_students)
    with pytest.raises(RuntimeError, match="stop before training"):
        evaluate(["students", "--config", str(SHIPPED), "--out", str(tmp_path / "out"), "--epochs", "2"])
    assert seen["config"].num_train_epochs == 2 and yaml.safe_load(SHIPPED.read_text())["num_train_epochs"] != 2
