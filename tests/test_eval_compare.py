"""`python -m eval compare`: end to end on the embedded model (teacher run, LoRA student, base), and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from report_checks import numbers_in_tables, unbacked_numbers

from data_prep.loaders import load_sample, save_dialogues
from distill.pipeline.store import RunInfo, TraceStore
from distill.pipeline.trace import Trace
from distill.roles.roles import PROMPT_VERSION
from eval.__main__ import main


def _dataset(tmp_path: Path, name: str, test) -> str:
    out = tmp_path / name
    save_dialogues({"train": load_sample()[:20], "validation": [], "test": list(test)}, out)
    return str(out)


def _claim(store: TraceStore, pipeline: dict, split: str) -> None:
    # the same run.json fields `python -m distill generate` writes
    store.claim(
        RunInfo(
            pipeline=pipeline,
            backend_name="local",
            model="smollm2-135m",
            prompt_version=PROMPT_VERSION,
            split=split,
            source={"dialogues": "tiny", "index": None},
        )
    )


def _hand_trace_run(
    run_dir: Path,
    dialogues,
    emotion: str | None = "sadness",
    reply: str = "oh no",
    split: str = "tiny[:4]",
    replies: list[str] | None = None,
) -> str:
    """A real trace store filled with hand-written traces, stored in the order of `dialogues` (no model needed
    for the input checks); `emotion=None` answers each dialogue's gold emotion; `replies`: each dialogue's reply
    (else `reply` and the dialogue's id)."""
    from distill.pipeline.trace import Step

    store = TraceStore(run_dir)
    _claim(store, {}, split)
    for i, d in enumerate(dialogues):
        outputs = {
            "asi": {"reasoning": "r", "emotion": d.emotion if emotion is None else emotion},
            "cae": {"triggers": ["x y"], "cause": "c", "category": "Loss & Failure"},
            "srp": {"reasoning": "r", "strategy": "ER"},
            "ers": {"response": replies[i] if replies else f"{reply} {d.id}"},
        }
        steps = [
            Step(role=r, messages=[], parsed=out, latency_s=0.5, prompt_tokens=40, completion_tokens=9)
            for r, out in outputs.items()
        ]
        store.append(
            Trace(
                key=d.id,
                dialogue=d,
                backend="openai",
                model="gpt-4o",
                prompt_version=PROMPT_VERSION,
                prompt_style="teacher",
                config={},
                outputs=outputs,
                steps=steps,
            )
        )
    return str(run_dir)


def test_report_from_trace_runs_only(tmp_path, tiny_dialogues):
    """Two stored runs (gold of tiny[:4]: sadness, happiness, anger, fear), no model.

    report.json/.md/plots are written, and every table number of report.md is in report.json."""
    test = tiny_dialogues[:4]
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test),
        "ppl": None,
        "bertscore": None,
        "systems": [
            {"name": "teacher", "traces": _hand_trace_run(tmp_path / "t", test, split="test")},
            {"name": "other", "traces": _hand_trace_run(tmp_path / "o", test, "anger", "hmm", "test")},
        ],
    }
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    other = report["systems"][1]
    assert other["agreement"]["emotion"]["value"] == 0.0 and other["agreement"]["trigger_f1"]["value"] == 1.0
    assert other["i_acc"]["ekman6"]["accuracy"]["value"] == 0.25 and other["i_acc"]["ekman6"]["n"] == 4
    # gpt-4o list price: 4 roles x (40 in, 9 out) tokens per dialogue
    assert other["cost"]["usd_per_1k"] == round(4 * (40 * 2.5 + 9 * 10) / 1e6 * 1000, 4)
    assert (out / "metrics.png").stat().st_size > 0 and (out / "confusion.png").stat().st_size > 0
    # the human replies as a row of their own; the fixture's gold reply is the same 8-word sentence each time
    gold = report["human_gold"]
    assert gold["n"] == 4 and gold["length_words"]["value"] == 8.0 and "bertscore" not in gold
    # a paired difference per metric both systems have: each is right once (teacher on the sadness dialogue,
    # other on the anger one), so the difference is 0 and its interval spans both signs
    paired = {p["metric"]: p for p in report["paired"] if p["pair"] == ["teacher", "other"]}
    assert paired["i_acc"]["diff"] == 0.0 and paired["i_acc"]["n"] == 4
    assert paired["i_acc"]["ci_low"] < 0 < paired["i_acc"]["ci_high"]
    assert paired["latency_s"]["diff"] == 0.0 and paired["latency_s"]["ci_low"] == 0.0
    # Dist/EAD are paired too, a row per figure: "hmm" four times against four different replies
    dist1 = paired["dist1"]
    assert dist1["diff"] < 0 and dist1["ci_high"] < 0 and dist1["n"] == 4
    assert {"dist1", "dist2", "ead1", "ead2"} <= set(paired) and "diversity" not in paired
    md = (out / "report.md").read_text()
    assert "| human (gold replies) | 4 |" in md and "| teacher − other | i_acc | 0.00 [-0." in md
    assert report["systems"][1]["same_outputs_as"] is None  # different replies
    assert "![metrics per system](metrics.png)" in md and "![emotion confusion matrices](confusion.png)" in md
    assert len(numbers_in_tables(md)) > 20 and not unbacked_numbers(md, report)


def test_report_gives_each_systems_diversity_as_a_share_of_the_humans_and_the_papers_rows(tmp_path, tiny_dialogues):
    from eval.compare.markdown import with_ci
    from eval.metrics.diversity import diversity_metrics

    test = tiny_dialogues[:4]
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test),
        "ppl": None,
        "bertscore": None,
        "paper_reference": "trace-table1",
        "systems": [{"name": "teacher", "traces": _hand_trace_run(tmp_path / "t", test, reply="so sorry to hear")}],
    }
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    ours = diversity_metrics([f"so sorry to hear {d.id}" for d in test])
    human = diversity_metrics([d.gold_response for d in test])
    ratio = report["systems"][0]["human_ratio"]
    for key in ("dist1", "dist2", "ead1", "ead2"):  # each share with its CI, paired with the human replies
        assert ratio[key]["value"] == pytest.approx(ours[key] / human[key], abs=1e-4)
        assert ratio[key]["ci_low"] <= ratio[key]["value"] <= ratio[key]["ci_high"] and ratio[key]["n"] == 4
    assert ratio["dist1"]["value"] != pytest.approx(1.0)  # the fixture's replies differ from the human ones
    (paper,) = report["paper"]["rows"]
    assert paper["human_ratio"]["dist2"] == pytest.approx(48.12 / 59.2, abs=1e-4)  # the paper's, on its test set
    md = (out / "report.md").read_text()
    table = md.split("## Against the paper")[1].split("\n## ")[0]
    assert f"| teacher | {with_ci(ratio['dist1'])} |" in table and " [" in with_ci(ratio["dist1"])
    assert "| GPT-4o TRACE (paper, Table 1) * | 0.91 | 0.81 | 0.81 | 0.84 | 0.443 |" in table
    assert "not re-run here" in table and "PPL is left out" in table


def test_report_runs_the_quality_checks_on_every_system_and_the_human_replies(tmp_path, tiny_dialogues):
    test = tiny_dialogues[:4]
    loop = "I'm not sure what's going on here. " * 5
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test),
        "ppl": None,
        "bertscore": None,
        "systems": [
            {"name": "teacher", "traces": _hand_trace_run(tmp_path / "t", test, reply="that sounds so hard, how are")},
            {"name": "student", "traces": _hand_trace_run(tmp_path / "s", test, reply=loop)},
        ],
    }
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    teacher, student = (s["quality"]["ers"] for s in report["systems"])
    assert (teacher["checked"], teacher["rates"]["loop"], teacher["passed"]) == (4, 0.0, 4)
    assert (student["checked"], student["rates"]["loop"], student["passed"]) == (4, 1.0, 0)
    assert report["human_gold"]["quality"]["ers"]["rates"]["loop"] == 0.0
    md = (out / "report.md").read_text()
    table = md.split("## Trace quality")[1].split("\n## ")[0]
    # outputs, how many pass every check (a count of the report's, not a share it does not hold), each check's rate
    assert "| System | role | outputs | passing every check | loop |" in table
    assert "| student | ers | 4 | 0 | 1.000 |" in table and "| human (gold replies) | ers | 4 | 4 | 0.000 |" in table


def test_an_unknown_paper_reference_is_refused_before_anything_runs(tmp_path, capsys, tiny_dialogues):
    cfg = {"dialogues": _dataset(tmp_path, "ds", tiny_dialogues[:2]), "paper_reference": "trace-table9"}
    cfg["systems"] = [{"name": "t", "traces": str(tmp_path / "nowhere")}]
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "paper_reference: 'trace-table9' is neither a shipped table (trace-table1) nor a file" in err


def test_traces_stored_out_of_order_are_paired_by_dialogue_not_position(tmp_path, tiny_dialogues):
    """A trace run stores traces in the order they finished (a resumed or concurrent run), not in test order.

    Both systems answer every dialogue's gold emotion (the four differ), the teacher's run stored shuffled with
    no trace in its test position: paired by position, every figure below would read 0 instead of 1."""
    from eval.compare.compare import system_sample
    from eval.compare.systems import SystemSpec, load_trace_system
    from eval.metrics.registry import score_sample

    test = tiny_dialogues[:4]
    shuffled = [test[i] for i in (2, 0, 3, 1)]
    assert len({d.emotion for d in test}) == 4
    teacher = _hand_trace_run(tmp_path / "t", shuffled, emotion=None, split="test")
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test),
        "ppl": None,
        "bertscore": None,
        "systems": [
            {"name": "teacher", "traces": teacher},
            {"name": "student", "traces": _hand_trace_run(tmp_path / "s", test, emotion=None, split="test")},
        ],
    }
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["test"]["ids"] == [d.id for d in test]
    teacher_row, student_row = report["systems"]
    assert teacher_row["i_acc"]["ekman6"]["accuracy"]["value"] == 1.0
    assert student_row["agreement"]["emotion"]["value"] == 1.0  # each against the teacher's trace of its dialogue
    paired = {p["metric"]: p for p in report["paired"] if p["pair"] == ["teacher", "student"]}
    assert (paired["i_acc"]["diff"], paired["i_acc"]["ci_low"], paired["i_acc"]["ci_high"]) == (0.0, 0.0, 0.0)
    # the per-dialogue values the paired bootstrap resamples, dialogue by dialogue
    run = load_trace_system(SystemSpec(name="teacher", traces=teacher), test, "cmp.yaml")
    assert [t.dialogue.id for t in run.traces] == [d.id for d in test]
    assert [t.response for t in run.traces] == [f"oh no {d.id}" for d in test]  # each reply names its dialogue
    assert score_sample(system_sample(run, test, None), {"i_acc": {}})[1]["i_acc"] == [1.0] * 4


def _reflection_trace(d, audits: list[str | None], final: int) -> Trace:
    """A hand-written reflection trace: iteration 0's four stages, then one audit per iteration, each
    fault (a stage name) rerunning from that stage; `final` is the iteration the pick chose."""
    from distill.pipeline.trace import Step

    first = {
        "asi": {"reasoning": "r", "emotion": "sadness"},
        "cae": {"triggers": ["x y"], "cause": "c", "category": "Loss & Failure"},
        "srp": {"reasoning": "r", "strategy": "ER"},
        "ers": {"response": f"first {d.id}"},
    }
    steps = [Step(role=r, messages=[], parsed=out, attempts=2 if r == "asi" else 1) for r, out in first.items()]
    iterations = [first]
    for it, fault in enumerate(audits):
        checks = [{"stage": s, "passed": s != fault} for s in first]
        steps.append(Step(role="gra", iteration=it, messages=[], parsed={"checks": checks, "earliest_failure": fault}))
        if fault is not None and it + 1 < len(audits):
            rerun = {**iterations[-1], "ers": {"response": f"second {d.id}"}}
            stages = list(first)[list(first).index(fault) :]
            steps += [Step(role=r, iteration=it + 1, messages=[], parsed=rerun[r]) for r in stages]
            iterations.append(rerun)
    config = {"reflection": True, "retry_temperature": 0.7}
    return Trace(
        key=d.id, dialogue=d, backend="local", model="m", prompt_version=PROMPT_VERSION, prompt_style="teacher",
        config=config, steps=steps, outputs=iterations[final], final_iteration=final,
    )  # fmt: skip


def test_report_shows_reflection_figures_and_retries_per_role(tmp_path, tiny_dialogues):
    test = tiny_dialogues[:4]
    store = TraceStore(tmp_path / "r")
    _claim(store, {"reflection": True}, "test")
    # d0: srp faulted, the rerun passes and is picked; d1: the reply faulted twice, the tie keeps iteration 0
    for d, audits, final in zip(test, (["srp", None], ["ers", "ers"], [None], [None]), (1, 0, 0, 0)):
        store.append(_reflection_trace(d, audits, final))
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", test),
        "ppl": None,
        "bertscore": None,
        "systems": [
            {"name": "reflect", "traces": str(tmp_path / "r")},
            {"name": "plain", "traces": _hand_trace_run(tmp_path / "p", test, split="test")},
        ],
    }
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    reflect, plain = report["systems"]
    r = reflect["reflection"]
    assert (r["audit_calls"], r["valid_audits"], r["clean_audits"]) == (6, 6, 3)
    assert r["blamed"] == {"srp": 1, "ers": 2}
    assert r["rerun_rate"]["value"] == 0.5 and r["mean_selected_iteration"]["value"] == 0.25
    assert r["reply_changed_by_pick"]["value"] == 0.25
    assert plain["reflection"] is None
    assert reflect["retries"]["retry_temperature"] == 0.7 and plain["retries"]["retry_temperature"] is None
    assert reflect["retries"]["roles"]["asi"] == {"calls": 4, "retried_calls": 4, "retries": 4, "transport_retries": 0}
    assert reflect["retries"]["roles"]["ers"]["calls"] == 6  # two reruns rewrote the reply
    md = (out / "report.md").read_text()
    assert "| reflect | 6 / 6 | 3 | srp 1, ers 2 | 0.50 [" in md and "| plain | " not in md.split("## Reflection")[1]
    assert "| reflect | ≥ 0.7 | asi | 4 | 4 | 4 | 0 |" in md and "| plain | same settings | asi | 4 | 0 | 0 | 0 |" in md
    assert not unbacked_numbers(md, report)


def _write_config(tmp_path: Path, cfg: dict) -> str:
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _run_bad(tmp_path, capsys, cfg) -> str:
    capsys.readouterr()  # drop the progress bars of building the fixtures
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m eval compare: error: ")
    assert not (tmp_path / "out" / "report.json").exists()
    return err


def test_missing_system_path_is_a_clear_error(tmp_path, capsys, tiny_dialogues):
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", tiny_dialogues[:4]),
        "systems": [{"name": "teacher", "traces": str(tmp_path / "nope")}],
    }
    assert "system 'teacher': traces path" in _run_bad(tmp_path, capsys, cfg)


def test_trace_run_on_another_split_is_refused(tmp_path, capsys, tiny_dialogues):
    run_dir = _hand_trace_run(tmp_path / "run", tiny_dialogues[:4])
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", tiny_dialogues[4:]),
        "systems": [{"name": "teacher", "traces": run_dir}],
    }
    err = _run_bad(tmp_path, capsys, cfg)
    assert "lacks 4 of 4 test dialogues (e.g. id 'tiny4#1')" in err and "split 'tiny[:4]' of tiny" in err


def test_config_errors_name_the_field(tmp_path, capsys, tiny_dialogues):
    cfg = {"dialogues": "x", "systems": [{"name": "a", "traces": "r", "backend": {"type": "local"}}]}
    assert "give exactly one of 'traces', 'backend' or 'probe'" in _run_bad(tmp_path, capsys, cfg)
    cfg = {"dialogues": "x", "systems": [{"name": "a", "traces": "r"}], "judge": {"backend": {}, "against": "b"}}
    assert "judge.against: no system named 'b'" in _run_bad(tmp_path, capsys, cfg)


def test_index_with_test_conversations_is_refused(tmp_path, capsys, tiny_dialogues):
    from data_prep.retrieval import ExemplarIndex, build_index
    from eval.compare.systems import check_index_disjoint

    load_index = ExemplarIndex.load
    build_index(tiny_dialogues[:2]).save(tmp_path / "leaky-index")
    run_dir = _hand_trace_run(tmp_path / "run", tiny_dialogues[:4])
    cfg = {
        "dialogues": _dataset(tmp_path, "ds", tiny_dialogues[:4]),
        "index": str(tmp_path / "leaky-index"),
        "systems": [{"name": "teacher", "traces": run_dir}],
    }
    assert "contains 2 test conversation(s), e.g. conv_id 'tiny0'" in _run_bad(tmp_path, capsys, cfg)
    # the same conversations under other ids (another file, another id scheme) are caught by content
    copies = [d.model_copy(update={"id": f"other{i}#1", "conv_id": f"other{i}"}) for i, d in enumerate(tiny_dialogues)]
    build_index(copies[:2]).save(tmp_path / "copied-index")
    cfg["index"] = str(tmp_path / "copied-index")
    assert "holds the situation and gold reply of 2 test dialogue(s)" in _run_bad(tmp_path, capsys, cfg)
    # ...while different conversations with look-alike ids are not refused
    build_index(copies[4:]).save(tmp_path / "clean-index")
    cfg["index"] = str(tmp_path / "clean-index")
    check_index_disjoint(load_index(tmp_path / "clean-index"), tiny_dialogues[:4], "clean-index")


def test_report_rounds_to_meaningful_digits():
    from eval.compare.markdown import fmt, interval, with_ci

    assert interval(9.7725, 6.9847, 19.5992) == "9.8 [7.0, 19.6]"
    assert with_ci({"value": 0.61, "ci_low": 0.51, "ci_high": 0.71}) == "0.61 [0.51, 0.71]"
    assert interval(-0.1429, -0.3571, 0.0) == "-0.14 [-0.36, 0.00]"
    assert fmt(1030.1111) == "1030" and fmt(0.193442) == "0.193" and fmt(14.6049) == "14.6" and fmt(100) == "100"
    assert fmt(None) == "–" and with_ci({"value": 0.25, "ci_low": None}) == "0.250"


def test_plot_whiskers_only_where_there_are_intervals_and_human_bars_stand_apart():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from eval.compare.report_plots import _bars

    fig, (corpus, mean) = plt.subplots(1, 2)
    _bars(corpus, [("student", {"value": 0.6}, False), ("human", {"value": 0.9}, True)])  # Dist-2: corpus-level
    _bars(
        mean, [("student", {"value": 20.0, "ci_low": 18.0, "ci_high": 24.0}, False), ("human", {"value": 89.0}, True)]
    )

    def whiskers(ax):
        return sum(isinstance(c, ErrorbarContainer) for c in ax.containers)

    assert whiskers(corpus) == 0 and whiskers(mean) == 1
    assert [t.get_text() for t in corpus.get_xticklabels()] == ["student", "human"]
    student_bar, human_bar = corpus.patches
    assert student_bar.get_facecolor() != human_bar.get_facecolor()
    plt.close(fig)


# The end-to-end report (stored teacher, trained student, generated base, every metric) is the README
# workflow's: tests/test_readme_workflow.py checks it with report_checks.

# Every shipped compare config parses: tests/test_shipped_configs.py.


@pytest.mark.slow
def test_external_adapters_config_evaluates_plain_peft_folders(tmp_path, smollm_path, tiny_dialogues):
    """configs/eval/external-adapters.yaml as shipped, with its paths pointed at a tiny base and at
    adapters saved by plain PEFT (no trace-distill metadata, folder names that are not role names)."""
    from fault_proxy import make_tiny_model
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = make_tiny_model(smollm_path, tmp_path / "tiny")
    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs/eval/external-adapters.yaml").read_text())
    external, base = cfg["systems"]
    for role in external["backend"]["adapters"]:
        folder = tmp_path / "from-elsewhere" / f"lora-{role}"
        lora = LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
        get_peft_model(AutoModelForCausalLM.from_pretrained(model), lora).save_pretrained(folder)
        external["backend"]["adapters"][role] = str(folder)
    external["backend"]["model"] = base["backend"]["model"] = str(model)
    cfg.update(dialogues=_dataset(tmp_path, "ds", tiny_dialogues[:2]), index=None, ppl=None, bertscore=None)
    out = tmp_path / "out"
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [s["name"] for s in report["systems"]] == ["external", "base"] and report["systems"][0]["n"] == 2
    store = TraceStore(out / "systems" / "external")
    assert len(store.read()[0]) == 2 and all(t.prompt_style == "student" for t in store.read()[0])
    assert store.run_info().backend["adapters"] == external["backend"]["adapters"]  # each role's own folder


@pytest.mark.slow
def test_compare_resumes_a_crashed_run_without_regenerating(tmp_path, smollm_path, tiny_dialogues, capsys):
    """The first system is generated and stored, then the compare dies on the second. The rerun reuses the
    stored traces byte for byte. (The model stays: a generated system's key holds its base weights' content.)"""
    from fault_proxy import make_tiny_model

    model = make_tiny_model(smollm_path, tmp_path / "tiny")
    student = {
        "name": "student",
        "backend": {"type": "local", "model": str(model), "batch_size": 4},
        "pipeline": {"max_attempts": 1, "rag": False},
    }
    broken = {"name": "broken", "backend": {"type": "local", "model": str(tmp_path / "no-such-model")}}
    cfg = {"dialogues": _dataset(tmp_path, "ds", tiny_dialogues[:2]), "ppl": None, "bertscore": None}
    out = tmp_path / "out"
    cfg["systems"] = [student, broken]
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 2
    assert "no-such-model" in capsys.readouterr().err
    stored, _ = TraceStore(out / "systems" / "student").read()
    assert len(stored) == 2 and not (out / "report.json").exists()
    traces = (out / "systems" / "student" / "traces.jsonl").read_bytes()
    cfg["systems"] = [student]
    assert main(["compare", "--config", _write_config(tmp_path, cfg), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["systems"][0]["source"] == f"reused from {out / 'systems' / 'student'}"
    assert (out / "systems" / "student" / "traces.jsonl").read_bytes() == traces
    assert report["systems"][0]["n"] == 2


@pytest.mark.slow
def test_compare_killed_mid_system_keeps_its_finished_chunks(tmp_path, smollm_path, tiny_dialogues):
    """SIGKILL after the first chunk of a generated system is stored: the rerun keeps those traces byte for
    byte and generates only the rest (a whole system's generation used to be lost)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from fault_proxy import make_tiny_model

    model = make_tiny_model(smollm_path, tmp_path / "tiny")
    test = tiny_dialogues[:4]  # two chunks of two; asi and ers only: the CPU is shared
    system = {
        "name": "student",
        "backend": {"type": "local", "model": str(model), "batch_size": 2},
        "pipeline": {"max_attempts": 1, "rag": False, "use_cae": False, "use_srp": False},
    }
    cfg = {"dialogues": _dataset(tmp_path, "ds", test), "ppl": None, "bertscore": None, "chunk_size": 2}
    cfg["systems"] = [system]
    config, out = _write_config(tmp_path, cfg), tmp_path / "out"
    traces = out / "systems" / "student" / "traces.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "eval", "compare", "--config", config, "--out", str(out)]
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1], env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 900
        while not (traces.exists() and traces.read_bytes().count(b"\n") >= 2):
            assert proc.poll() is None, (tmp_path / "first.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "compare stored no chunk"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    data = traces.read_bytes()
    kept = data[: data.rfind(b"\n") + 1]  # a line cut by the kill is not a stored trace
    stored = kept.count(b"\n")
    assert 2 <= stored < len(test), "the kill should land mid-system"
    assert not (out / "report.json").exists()
    assert main(["compare", "--config", config, "--out", str(out)]) == 0
    assert traces.read_bytes().startswith(kept)  # the finished chunks are reused, not regenerated
    found, problems = TraceStore(traces.parent).read()
    assert problems == [] and len(found) == len(test) == traces.read_bytes().count(b"\n")
    report = json.loads((out / "report.json").read_text())
    n = len(test)
    assert report["systems"][0]["source"] == f"generated {n - stored} of {n}, the rest reused"


@pytest.mark.slow
def test_a_student_whose_adapter_was_retrained_under_the_same_path_is_generated_again(
    tmp_path, tiny_model_dir, tiny_dialogues, capsys
):
    """The stored system is reused while its adapters hold what they held; retrained under the same path (or
    stored before fingerprints were recorded), the student is generated again and the log says why."""
    from fault_proxy import save_tiny_lora

    adapter = save_tiny_lora(tiny_model_dir, tmp_path / "adapters" / "ers", seed=0)
    student = {
        "name": "student",
        "backend": {"type": "local", "model": tiny_model_dir, "batch_size": 2, "adapters": {"ers": str(adapter)}},
        "pipeline": {"prompt_style": "student", "use_adapters": True, "max_attempts": 1, "rag": False}
        | {"use_asi": False, "use_cae": False, "use_srp": False},
    }
    cfg = {"dialogues": _dataset(tmp_path, "ds", tiny_dialogues[:2]), "ppl": None, "bertscore": None}
    config, out = _write_config(tmp_path, {**cfg, "systems": [student]}), tmp_path / "out"
    stored = out / "systems" / "student"

    def compare() -> tuple[str, str]:
        capsys.readouterr()
        assert main(["compare", "--config", config, "--out", str(out)]) == 0
        source = json.loads((out / "report.json").read_text())["systems"][0]["source"]
        return source, capsys.readouterr().out

    assert compare()[0] == "generated"
    first = TraceStore(stored).run_info().backend["adapter_fingerprints"]["ers"]
    source, log = compare()
    assert source == f"reused from {stored}" and "regenerating" not in log  # nothing changed

    save_tiny_lora(tiny_model_dir, adapter, seed=1)  # retrained: the same path, other weights
    source, log = compare()
    assert source == "generated"
    now = TraceStore(stored).run_info().backend["adapter_fingerprints"]["ers"]
    assert now != first
    assert (
        f"regenerating system 'student': adapter 'ers' holds other weights "
        f"(sha256 {first['weights_sha256'][:12]} → {now['weights_sha256'][:12]})"
    ) in log.splitlines()
    report = json.loads((out / "report.json").read_text())
    assert report["adapter_fingerprints"] == {"student": {"ers": now}}

    # a run stored before stage keys and fingerprints were recorded cannot show which adapter it ran: made again
    record = json.loads((stored / "run.json").read_text())
    del record["backend"]["adapter_fingerprints"]
    (stored / "run.json").write_text(json.dumps(record))
    (stored / "stage-key.json").unlink()
    source, log = compare()
    assert source == "generated" and "regenerating system 'student': its run.json holds no adapter fingerprints" in log


def test_an_adapter_folder_holding_another_roles_adapter_is_one_line(tmp_path, tiny_model_dir, tiny_dialogues, capsys):
    """adapters/asi holding a copy of adapters/cae: one line naming the folder and the role its metadata gives,
    before any model loads, instead of a traceback at the first asi stage."""
    import shutil

    from fault_proxy import save_tiny_lora

    from distill.adapters.adapters import write_metadata

    adapters = tmp_path / "adapters"
    for role in ("cae", "ers"):
        write_metadata(save_tiny_lora(tiny_model_dir, adapters / role, seed=0), {"role": role})
    shutil.copytree(adapters / "cae", adapters / "asi")
    student = {
        "name": "student",
        "backend": {"type": "local", "model": tiny_model_dir, "adapters": str(adapters)},
        "pipeline": {"prompt_style": "student", "use_adapters": True, "rag": False},
    }
    cfg = {"dialogues": _dataset(tmp_path, "ds", tiny_dialogues[:2]), "ppl": None, "bertscore": None}
    config = _write_config(tmp_path, {**cfg, "systems": [student]})
    capsys.readouterr()
    assert main(["compare", "--config", config, "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert (
        f"{adapters / 'asi'}: holds the adapter for role 'cae' (its trace_distill_adapter.json), not for 'asi'"
        in err[0]
    )

    shutil.rmtree(adapters / "asi")  # and one under a name that is no role, beside the real cae: a second cae
    shutil.copytree(adapters / "cae", adapters / "cae-copy")
    assert main(["compare", "--config", config, "--out", str(tmp_path / "out")]) != 0
    assert f"{adapters / 'cae-copy'}: a second adapter for role 'cae'" in capsys.readouterr().err


def test_a_generated_systems_key_holds_its_index_base_weights_and_resolved_dtype(tmp_path, monkeypatch, capsys):
    """Inputs no key held: the exemplar index's content, the base model's weights and what `dtype: auto` resolved
    to. A change to any of them makes a stored generation stale, and the log names it."""
    import numpy as np

    import data_prep.models as models
    from data_prep.retrieval import ExemplarIndex, IndexEntry
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.stage_key import write_key
    from eval.compare.reuse import drop_stale_run, system_inputs

    model = tmp_path / "base-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"the base weights")
    pipeline = {"prompt_style": "teacher", "use_adapters": False}
    system = {"name": "base", "backend": {"type": "local", "model": str(model), "dtype": "auto"}, "pipeline": pipeline}
    config = PipelineConfig(**pipeline)
    entry = IndexEntry("d1", "c1", "happiness", "I passed.", "Well done!")
    index = ExemplarIndex(np.ones((1, 4)), [entry])

    def stale_after(change) -> str:
        store = TraceStore(tmp_path / "systems" / "base")
        store.claim(RunInfo(config.key_dict(), "local", str(model), PROMPT_VERSION, system=system))
        write_key(store.run_dir, system_inputs(system, config, {}, index))
        change()
        capsys.readouterr()
        drop_stale_run(store, "base", system, config, {}, index)
        assert not store.run_dir.exists()
        return capsys.readouterr().out.strip()

    assert stale_after(lambda: index.vectors.__setitem__(0, 2.0)) == "regenerating system 'base': its index changed"
    weights = model / "model.safetensors"
    assert stale_after(lambda: weights.write_bytes(b"other weights")) == (
        "regenerating system 'base': its base model changed"
    )
    dtype = models.resolve_dtype
    other = {str(dtype("fp32", "cpu")): dtype("bf16", "cpu"), str(dtype("bf16", "cpu")): dtype("fp32", "cpu")}
    assert stale_after(
        lambda: monkeypatch.setattr(models, "resolve_dtype", lambda d, device: other[str(dtype(d, device))])
    ) == ("regenerating system 'base': its base model changed")  # `auto` resolves otherwise on another machine


@pytest.mark.parametrize(
    "primary, message",
    [
        ({"pair": ["student", "nobody"], "metric": "i_acc"}, "primary.pair.1: no system named 'nobody'"),
        ({"pair": ["student", "student"], "metric": "i_acc"}, "primary.pair: two different systems are compared"),
        ({"pair": ["student", "teacher"], "metric": "accuracy"}, "metric 'accuracy' is no paired row's metric"),
        (  # a metric the config turns off has no row to be primary: refused, not warned after every system ran
            {"pair": ["student", "teacher"], "metric": "bertscore_f1"},
            "primary.metric: bertscore_f1 is not scored here (bertscore: null)",
        ),
        ({"pair": ["student", "teacher"], "metric": "dist2"}, None),  # a figure of diversity: always scored
    ],
)
def test_a_primary_comparison_names_two_systems_and_a_paired_metric(tmp_path, primary, message):
    from eval.compare.compare import load_config
    from eval.compare.systems import CompareError

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs/eval/sample.yaml").read_text())
    path = tmp_path / "compare.yaml"
    path.write_text(yaml.safe_dump({**config, "primary": primary, "bertscore": None}))
    if message is None:
        assert load_config(str(path)).primary.metric == primary["metric"]
        return
    with pytest.raises(CompareError) as err:
        load_config(str(path))
    assert message in str(err.value) and "\n" not in str(err.value)
