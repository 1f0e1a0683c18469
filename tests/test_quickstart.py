"""The README's main command, end to end on a reduced size: every stage runs, and a rerun reuses them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from distill.roles.roles import CORE_ROLES as ROLES
from distill.roles.roles import STUDENT_PROMPT_VERSION
from eval.curve.adapter_runs import CPU_TRAIN_CONFIG, stale_reason
from eval.quickstart import main
from eval.quickstart_report import REPLY_PASS_WARNING, headline, teacher_quality

REPO = Path(__file__).resolve().parents[1]

# No card examples: each decodes to its role's token cap on these barely trained adapters, and the README
# workflow test and test_train cover them
SMALL = ["--train-limit", "4", "--test-limit", "2", "--no-judge", "--no-card-example"]
SMALL += ["--role-budgets", "asi=400,cae=300,srp=300,ers=300"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_quickstart_runs_every_stage_then_reuses_them(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["--out", str(out), *SMALL]) == 0
    first = capsys.readouterr().out
    for role in ("asi", "cae", "srp", "ers"):
        meta = json.loads((out / "adapters" / role / "trace_distill_adapter.json").read_text())
        assert meta["role"] == role and "example" not in meta  # --no-card-example reached train
        assert meta["train_config"]["max_tokens_budget"] == (400 if role == "asi" else 300)  # --role-budgets
        assert meta["train_config"]["learning_rate"] == (2e-3 if role == "asi" else 5e-4)
        assert (out / "datasets" / role / "dataset_dict.json").is_file()
    report = json.loads((out / "eval" / "report.json").read_text())
    # the teacher is the untuned model prompted: no base row repeating its outputs
    assert [s["name"] for s in report["systems"]] == ["teacher", "student"]
    assert f"report: {out / 'eval' / 'report.md'}" in first
    assert "result: the distilled student's emotion accuracy minus its teacher's is " in first
    assert "teacher replies passing every check: " in first  # what the teacher is, beside its quality line
    md = (out / "eval" / "report.md").read_text()
    assert "- `student`: the same model with one LoRA adapter per role" in md and "- `teacher`: the untuned" in md
    assert "reusing" not in first
    card = (out / "adapters" / "asi" / "README.md").read_text()  # the model card carries the eval figures
    assert "| emotion accuracy (I-ACC, 6 classes) [95% CI] |" in card and "| test dialogues | 2 |" in card

    stages = json.loads((out / "stages.json").read_text())  # the one runner's record of each stage
    assert list(stages) == ["prepare", "index", "traces", "datasets", "train", "eval"]
    assert all(s["seconds"] > 0 and s["peak_rss_mb"] > 0 and not s["reused"] for s in stages.values())

    assert main(["--out", str(out), *SMALL]) == 0
    second = capsys.readouterr().out
    for stage in ("dialogues", "index", "datasets", "adapters"):
        assert f"reusing {out / stage}" in second
    again = json.loads((out / "stages.json").read_text())
    assert [n for n, s in again.items() if s["reused"]] == ["prepare", "index", "datasets", "train"]
    assert again["train"]["seconds"] == stages["train"]["seconds"]  # a reused stage keeps the cost of its run
    assert "[stage] train: reused: key unchanged" in second
    assert "wrote 0 traces" in second  # the trace store skipped every finished dialogue

    # More train dialogues extend the run: one new trace, then datasets and adapters are rebuilt from it.
    before = {r: json.loads((out / "adapters" / r / "trace_distill_adapter.json").read_text()) for r in ROLES}
    larger = [a if a != "4" else "5" for a in SMALL]
    assert main(["--out", str(out), *larger]) == 0
    third = capsys.readouterr().out
    assert "wrote 1 traces" in third and f"regenerating {out / 'datasets'}: its teacher traces changed" in third
    for role, old in before.items():
        new = json.loads((out / "adapters" / role / "trace_distill_adapter.json").read_text())
        # a role retrains exactly when its rows changed (a failed new trace leaves them as they were)
        changed = new["dataset_fingerprint"] != old["dataset_fingerprint"]
        assert changed == (f"retraining {role}: its dataset changed" in third), role


def _trained(adapter, fingerprint: str, settings: dict, version: str = STUDENT_PROMPT_VERSION) -> None:
    """The metadata `python -m train` writes (its record of what it trained from), no stage key yet."""
    from distill.pipeline.stage_key import KEY_FILE

    adapter.mkdir(parents=True, exist_ok=True)
    meta = {"dataset_fingerprint": fingerprint, "prompt_version": version, "train_config": settings}
    (adapter / "trace_distill_adapter.json").write_text(json.dumps(meta))
    (adapter / KEY_FILE).unlink(missing_ok=True)


def test_adapter_is_stale_when_its_dataset_budget_or_format_changed(tmp_path):
    from datasets import Dataset, DatasetDict, load_from_disk

    from distill.pipeline.stage_key import KEY_FILE
    from eval.curve.adapter_runs import training_settings

    def save(rows):
        DatasetDict(train=Dataset.from_dict({"x": rows})).save_to_disk(str(tmp_path / "datasets" / "asi"))
        return load_from_disk(str(tmp_path / "datasets" / "asi"))["train"]._fingerprint

    adapter, dataset = tmp_path / "adapters" / "asi", tmp_path / "datasets" / "asi"
    assert stale_reason(adapter, dataset, {"max_tokens_budget": 300}) == "not trained yet"
    _trained(adapter, save([1, 2]), training_settings({"max_tokens_budget": 300}, CPU_TRAIN_CONFIG))
    assert stale_reason(adapter, dataset, {"max_tokens_budget": 300}) is None  # made before keys: migrated
    assert (adapter / KEY_FILE).is_file()
    assert stale_reason(adapter, dataset, {"max_tokens_budget": 600}) == "the token budget changed"
    assert (
        stale_reason(adapter, dataset, {"max_tokens_budget": 300, "learning_rate": 2e-3}) == "its learning_rate changed"
    )
    save([1, 2, 3])
    assert stale_reason(adapter, dataset, {"max_tokens_budget": 300}) == "its dataset changed"
    save([1, 2])  # the same rows again: the same fingerprint, nothing to retrain
    assert stale_reason(adapter, dataset, {"max_tokens_budget": 300}) is None
    settings = training_settings({"max_tokens_budget": 300}, CPU_TRAIN_CONFIG)
    _trained(adapter, save([1, 2]), settings, version="v1")  # an adapter from before keys, for older prompts
    assert stale_reason(adapter, dataset, {"max_tokens_budget": 300}) == "it was trained for student prompt version v1"


def test_an_edit_to_the_train_yaml_retrains(tmp_path):
    """Every setting of the train YAML is in an adapter's key, not only the recipe's flags: a new LoRA rank retrains
    (it used to be reused, and with it every report)."""
    import yaml
    from datasets import Dataset, DatasetDict, load_from_disk

    from distill.pipeline.stage_key import write_key
    from eval.curve.adapter_runs import adapter_inputs, training_settings

    dataset, adapter = tmp_path / "datasets" / "asi", tmp_path / "adapters" / "asi"
    DatasetDict(train=Dataset.from_dict({"x": [1, 2]})).save_to_disk(str(dataset))
    options = {"max_tokens_budget": 300}
    _trained(adapter, load_from_disk(str(dataset))["train"]._fingerprint, training_settings(options, CPU_TRAIN_CONFIG))
    write_key(adapter, adapter_inputs(dataset, options, CPU_TRAIN_CONFIG))  # what `train_stale` records
    config = tmp_path / "train.yaml"
    config.write_text(CPU_TRAIN_CONFIG.read_text())
    assert stale_reason(adapter, dataset, options, config) is None
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "lora_r": 32}))
    assert stale_reason(adapter, dataset, options, config) == "its lora_r changed"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "lora_r": 16, "num_train_epochs": 1}))
    assert stale_reason(adapter, dataset, options, config) == "its num_train_epochs changed"


def test_run_folder_of_other_data_is_refused(tmp_path):
    out = tmp_path / "qs"
    out.mkdir()
    (out / "quickstart.json").write_text(
        json.dumps({"source": "/data/other.csv", "split_ratios": "0.8,0,0.2", "seed": 0})
    )
    with pytest.raises(SystemExit, match=r"made with other data \(source '/data/other.csv' -> .*ed_sample.csv'"):
        main(["--out", str(out), *SMALL])
    assert not (out / "dialogues").exists()  # refused before any stage ran


def test_source_and_split_reach_the_dialogue_stage(tmp_path, monkeypatch):
    """The real-data experiment is the quickstart with --source/--split-ratios/--seed: they must be used."""
    import data_prep.__main__ as data_prep_main
    from distill.pipeline.stage_key import content_fingerprint

    seen = []

    def fake_data_main(argv):
        seen.append(argv)
        raise SystemExit("stop after the first stage")

    monkeypatch.setattr(data_prep_main, "main", fake_data_main)
    src = tmp_path / "ed.csv"
    src.write_text("utterances,prompt,emotion_id,gold_response\n")
    with pytest.raises(SystemExit, match="stop after the first stage"):
        main(
            ["--out", str(tmp_path / "qs"), "--source", str(src), "--split-ratios", "0.8,0,0.2", "--seed", "3", *SMALL]
        )
    argv = seen[0]
    assert argv[:2] == ["dialogues", "--source"] and argv[2] == str(src.resolve())
    assert argv[argv.index("--split-ratios") + 1] == "0.8,0,0.2" and argv[argv.index("--seed") + 1] == "3"
    stamp = json.loads((tmp_path / "qs" / "quickstart.json").read_text())
    assert stamp == {"source": str(src.resolve()), "split_ratios": "0.8,0,0.2", "seed": 3} | {
        "source_content": content_fingerprint(src)
    }
    # the same file edited in place is other data: refused, not resumed over dialogues made from the old one
    src.write_text("utterances,prompt,emotion_id,gold_response\nhi,there,1,hello\n")
    with pytest.raises(SystemExit, match=r"made with other data \(source_content "):
        main(["--out", str(tmp_path / "qs"), "--source", str(src), "--split-ratios", "0.8,0,0.2", "--seed", "3"])


def test_role_budgets_override_the_defaults_and_refuse_unknown_roles(capsys):
    from eval.quickstart import ROLE_BUDGETS, _budgets

    assert _budgets("asi=5") == {**ROLE_BUDGETS, "asi": 5}
    assert set(ROLE_BUDGETS) == set(ROLES)
    with pytest.raises(SystemExit):
        main(["--role-budgets", "asj=5"])
    assert "unknown role 'asj' (roles: asi, cae, srp, ers)" in capsys.readouterr().err


def test_headline_states_the_paired_result_with_its_interval(tmp_path):
    path = tmp_path / "report.json"
    paired = {
        "metric": "i_acc",
        "pair": ["teacher", "student"],
        "diff": -0.25,
        "ci_low": -0.5,
        "ci_high": -0.05,
        "n": 16,
    }
    path.write_text(json.dumps({"paired": [paired]}))
    line = headline(path)
    assert "is +0.25 (paired bootstrap 95% CI [+0.05, +0.50], n = 16 test dialogues)" in line
    assert "the interval excludes 0" in line
    paired.update(diff=0.0, ci_low=-0.2, ci_high=0.2)
    path.write_text(json.dumps({"paired": [paired]}))
    assert "too few dialogues to tell" in headline(path)
    assert "no paired" in headline(tmp_path / "missing.json")


def test_headline_says_what_holms_adjustment_makes_of_an_interval_that_excludes_0(tmp_path):
    """The report's paired table counts a row a finding only when it survives Holm; the line must not say less."""
    path = tmp_path / "report.json"
    i_acc = {"metric": "i_acc", "pair": ["student", "teacher"], "diff": 0.25, "ci_low": 0.04, "ci_high": 0.46, "n": 48}
    others = [{"metric": m, "pair": ["student", "teacher"], "p_value": 0.5, "p_holm": 1.0} for m in ("dist1", "ead1")]
    path.write_text(
        json.dumps({"paired": [{**i_acc, "p_value": 0.036, "p_holm": 0.108, "survives_holm": False}, *others]})
    )
    line = headline(path)
    assert "the interval excludes 0, and Holm's adjustment over the report's 3 paired comparisons gives p 0.108" in line
    assert "does not hold at a family-wise error rate of 0.05, so report.md's paired table does not count it" in line
    path.write_text(
        json.dumps({"paired": [{**i_acc, "p_value": 0.002, "p_holm": 0.006, "survives_holm": True}, *others]})
    )
    assert "gives p 0.006: the difference holds at a family-wise error rate of 0.05." in headline(path)


def test_headline_of_a_pre_declared_primary_comparison_tests_it_alone(tmp_path):
    """The quickstart's config declares its result's comparison primary: the line reads its own p, and says that
    Holm covers the report's other rows."""
    path = tmp_path / "report.json"
    i_acc = {"metric": "i_acc", "pair": ["student", "teacher"], "diff": 0.17, "ci_low": 0.04, "ci_high": 0.29, "n": 48}
    others = [{"metric": m, "pair": ["student", "teacher"], "p_value": 0.5, "p_holm": 1.0} for m in ("dist1", "ead1")]
    row = {**i_acc, "p_value": 0.012, "p_holm": 0.012, "survives_holm": True, "primary": True}
    path.write_text(json.dumps({"paired": [row, *others]}))
    line = headline(path)
    assert "the report's one primary comparison, declared before the run and tested alone: p 0.012" in line
    assert "so it holds at 0.05 (Holm's adjustment covers the other 2 rows)" in line
    shipped = yaml.safe_load((REPO / "configs" / "eval" / "sample.yaml").read_text(encoding="utf-8"))
    assert shipped["primary"] == {"pair": ["student", "teacher"], "metric": "i_acc"}


def test_a_primary_comparison_is_tested_alone_and_left_out_of_holms_family():
    from eval.compare.paired import paired_comparisons
    from eval.metrics.stats import holm

    rng = random.Random(0)
    rates = {"student": 0.7, "teacher": 0.4, "base": 0.4}
    systems = {
        name: {"i_acc": [rng.random() < rate for _ in range(60)], "bertscore_f1": [rng.random() for _ in range(60)]}
        for name, rate in rates.items()
    }
    plain = paired_comparisons(systems)
    declared = paired_comparisons(systems, (("teacher", "student"), "i_acc"))
    [first] = [r for r in declared if r.get("primary")]
    assert set(first["pair"]) == {"student", "teacher"} and first["metric"] == "i_acc"
    assert first["p_holm"] == first["p_value"] and first["survives_holm"] == (first["p_value"] < 0.05)
    others = [r for r in declared if not r.get("primary")]
    expected = holm({str(i): r["p_value"] for i, r in enumerate(others)})
    assert [r["p_holm"] for r in others] == [expected[str(i)] for i in range(len(others))]
    assert not any(r.get("primary") for r in plain)  # none declared: Holm over every row, as before


@pytest.mark.parametrize("metric", ["i_acc", "dist1"])
def test_a_primary_comparison_reads_first_minus_second_as_declared(metric):
    """`pair: [student, teacher]` with the teacher listed first: the primary row is student − teacher, its interval
    that of student − teacher (a corpus figure's too); the other rows keep the systems' order."""
    from eval.compare.paired import paired_comparisons
    from eval.metrics.diversity_ci import ReplyTokens

    def replies(texts: list[str]) -> list[ReplyTokens]:
        return [ReplyTokens(tuple(t.split()), tuple(len(w) for w in t.split()), 64) for t in texts]

    rng = random.Random(1)
    texts = {"teacher": ["same words again"] * 30, "student": [f"word{i} other{i}" for i in range(30)]}
    systems = {name: {"i_acc": [rng.random() < rate for _ in range(30)], "diversity": replies(texts[name])}
               for name, rate in (("teacher", 0.2), ("student", 0.9))}  # fmt: skip
    plain = {p["metric"]: p for p in paired_comparisons(systems)}
    declared = {p["metric"]: p for p in paired_comparisons(systems, (("student", "teacher"), metric))}
    row, other = declared.pop(metric), plain.pop(metric)
    assert row["primary"] and row["pair"] == ["student", "teacher"] and other["pair"] == ["teacher", "student"]
    assert row["diff"] > 0 and row["diff"] == pytest.approx(-other["diff"])
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-other["ci_high"], -other["ci_low"]))
    assert all(p["pair"] == ["teacher", "student"] for p in declared.values())


def test_the_quickstart_configs_primary_reads_as_declared_in_the_report_and_the_result_line(tmp_path, tiny_dialogues):
    """The quickstart's own eval config (configs/eval/sample.yaml: teacher listed first, `pair: [student, teacher]`
    on i_acc) over hand-made runs of its systems: report.json's primary row, report.md's table and its sentence
    and the `result:` line all read student − teacher, with its sign (they read teacher − student)."""
    from test_eval_compare import _dataset, _hand_trace_run

    from eval.__main__ import main as evaluate
    from eval.quickstart import _eval_config

    (tmp_path / "qs").mkdir()
    config = yaml.safe_load(_eval_config(tmp_path / "qs", 8, judge=False).read_text())
    assert config["primary"] == {"pair": ["student", "teacher"], "metric": "i_acc"}
    test = tiny_dialogues
    # the teacher answers sadness every time, the student each dialogue's gold emotion: student − teacher > 0
    answers = {"teacher": "sadness", "student": None}
    runs = {name: _hand_trace_run(tmp_path / name, test, emotion, split="test") for name, emotion in answers.items()}
    config["systems"] = [{"name": s["name"], "traces": runs[s["name"]]} for s in config["systems"]]
    assert [s["name"] for s in config["systems"]] == ["teacher", "student"]
    config.update(dialogues=_dataset(tmp_path, "ds", test), index=None, ppl=None, bertscore=None, relevance=None)
    path = tmp_path / "compare.yaml"
    path.write_text(yaml.safe_dump(config))
    assert evaluate(["compare", "--config", str(path), "--out", str(tmp_path / "eval")]) == 0

    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    [row] = [p for p in report["paired"] if p.get("primary")]
    expected = 1 - sum(d.emotion == "sadness" for d in test) / len(test)
    assert row["pair"] == ["student", "teacher"] and row["diff"] == pytest.approx(expected) and expected > 0
    md = (tmp_path / "eval" / "report.md").read_text()
    assert f"| student − teacher | i_acc | {row['diff']:.2f} [" in md and "| teacher − student | i_acc |" not in md
    assert "The config declared `student − teacher` on `i_acc`" in " ".join(md.split())
    assert f"minus its teacher's is {expected:+.2f} (paired bootstrap" in headline(tmp_path / "eval" / "report.json")


def test_a_smaller_train_limit_on_a_rerun_trains_on_its_first_dialogues_alone(tmp_path):
    """The teacher annotated 6 train dialogues; a rerun with --train-limit 3 builds the datasets from the traces of
    the first 3 (it used to keep the 6-dialogue datasets, and the student was reported as having learnt from 3)."""
    import argparse

    from datasets import load_from_disk
    from test_curve import handmade_trace

    from data_prep.__main__ import main as data_prep_main
    from data_prep.loaders import SAMPLE_PATH, load_split
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.store import RunInfo, TraceStore
    from eval.quickstart import SAMPLE_SPLIT_RATIOS, step_datasets

    out = tmp_path / "qs"
    argv = ["dialogues", "--source", str(SAMPLE_PATH), "--out", str(out / "dialogues")]
    assert data_prep_main([*argv, "--split-ratios", SAMPLE_SPLIT_RATIOS]) == 0
    train = load_split(out / "dialogues", "train")[:6]
    store = TraceStore(out / "teacher-train")
    source = {"dialogues": str((out / "dialogues").resolve())}
    store.claim(RunInfo(PipelineConfig().key_dict(), "handmade", "handmade", "v2", split="train", source=source))
    for d in train:
        store.append(handmade_trace(d))

    def asi_dialogues(limit: int) -> set[str]:
        step_datasets(out, argparse.Namespace(train_limit=limit, require_gold_emotion=False), str(SAMPLE_PATH))
        built = load_from_disk(str(out / "datasets" / "asi"))
        return {row for split in built for row in built[split]["dialogue_id"]}

    assert asi_dialogues(6) == {d.id for d in train}
    assert asi_dialogues(3) == {d.id for d in train[:3]}


def test_the_teacher_line_gives_its_reply_pass_rate_and_warns_naming_the_checks(tiny_dialogues, tmp_path):
    """A teacher whose replies are mostly not replies says so in one warning line naming what they fail; the
    line says where the student's replies come from either way."""
    from test_quality import trace_with_prompts

    from distill.quality import check_traces

    written = ["The seeker's true emotion is sadness.", "I am the Empathetic Response Synthesizer.", "Gentle Reply:"]
    fine = ["Oh no, what happened next?", "That sounds so hard, I'm sorry.", "Wow, congratulations!"]
    for name, replies in (("weak", written + fine[:1]), ("fine", fine + written[:1])):
        traces = [
            trace_with_prompts(d, {"ers": {"response": r}}, f"{name}{i}")
            for i, (d, r) in enumerate(zip(tiny_dialogues, replies))
        ]
        check_traces(traces).write((tmp_path / name).mkdir() or tmp_path / name)
    weak = teacher_quality(tmp_path / "weak").splitlines()
    assert weak[1].startswith("teacher replies passing every check: 1/4 (25%)") and "gold guidance" in weak[1]
    assert weak[2].startswith("warning: most of the teacher's replies are not replies to the seeker (failed: ")
    assert "meta_commentary" in weak[2] and "self_description" in weak[2] and "template_fragment" in weak[2]
    fine_lines = teacher_quality(tmp_path / "fine").splitlines()
    assert 3 / 4 >= REPLY_PASS_WARNING and len(fine_lines) == 2 and "passing every check: 3/4 (75%)" in fine_lines[1]
    assert teacher_quality(tmp_path / "none") == "teacher quality: not checked"
