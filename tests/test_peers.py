"""benchmarks/peers.py (issue 52): its schedule, scoring and summary on hand-made runs, its refusals, and one
tiny run of the project's engine against transformers' `generate` that must give the same answers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from distill.pipeline.store import RunInfo, TraceStore
from distill.pipeline.trace import Step, Trace
from distill.roles.roles import PROMPT_VERSION

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "peers.py"


@pytest.fixture()
def peers(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as `python benchmarks/peers.py` has it
    spec = importlib.util.spec_from_file_location("peers_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(engine, round_, wall, completion, texts, precision="float32", rss=900.0, **extra):
    run = dict(engine=engine, round=round_, precision=precision, wall_s=wall, prompt_tokens=100 * len(texts))
    return {**run, "completion_tokens": completion, "texts": texts, "peak_rss_mb": rss, **extra}


def test_schedule_alternates_the_order_each_round(peers):
    assert peers.schedule(["a", "b", "c"], 3) == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"),
                                                  (2, "a"), (2, "b"), (2, "c")]  # fmt: skip


def test_summary_ratios_identity_and_validity_on_hand_made_runs(peers):
    """Rates are tokens over the run's wall; identity is against the project's first run (whitespace around an
    answer ignored); ratios are of medians, and round by round; a skipped or failed run is listed, not scored."""
    good, bad = '{"response": "I am sorry."}', '{"response": '
    runs = [
        _run("project", 0, 10.0, 400, [good, good, "x"]),
        _run("generate", 0, 20.0, 400, [good + " ", good, "y"]),
        _run("generate", 1, 40.0, 400, [good, bad, "x"]),
        _run("project", 1, 8.0, 400, [good, good, "x"]),
        _run("llamacpp-f16", 0, 5.0, 410, [good, good, "x"], precision="f16", rss=300.0),
        {"engine": "generate_batch", "round": 0, "skipped": "no grammar"},
        {"engine": "llamacpp-q8_0", "round": 0, "error": "llama-server exited 1: bad"},
    ]
    peers.score(runs, {"role": "ers", "prompt_style": "teacher", "stages": ["asi", "cae", "srp", "ers"]})
    assert runs[1]["completion_tok_s"] == 20.0 and runs[1]["prompt_tok_s"] == 15.0
    assert [r.get("identical") for r in runs[:5]] == [3, 2, 2, 3, 3]
    assert [r.get("valid") for r in runs[:5]] == [2, 2, 1, 2, 2]
    summary = peers.summarise(runs)
    assert summary["reference"] == "project"
    project, generate, llama = (summary["engines"][e] for e in ("project", "generate", "llamacpp-f16"))
    assert project["median_wall_s"] == 9.0 and project["median_completion_tok_s"] == 45.0
    assert generate["median_wall_s"] == 30.0 and generate["wall_ratio"] == pytest.approx(30 / 9)
    assert generate["completion_tok_s_ratio"] == pytest.approx(15.0 / 45.0)
    assert generate["round_wall_ratios"] == [2.0, 5.0]  # 20/10 in round 0, 40/8 in round 1
    assert generate["identical"] == "2/3" and generate["valid_json"] == "1/3"  # the worse run counts
    assert llama["completion_tok_s_ratio"] == pytest.approx(82.0 / 45.0) and llama["peak_rss_mb"] == 300.0
    assert llama["precision"] == "f16" and llama["round_wall_ratios"] == [0.5]
    assert summary["skipped"] == [("generate_batch", "no grammar")]
    assert summary["failed"] == ["llamacpp-q8_0 round 0: llama-server exited 1: bad"]


def test_the_first_engine_that_ran_is_the_reference_without_the_project(peers):
    runs = [_run("generate", 0, 4.0, 40, ["a", "b"]), _run("generate_batch", 0, 8.0, 40, ["a", "c"])]
    peers.score(runs, {"role": "ers", "prompt_style": "teacher", "stages": ["ers"]})
    summary = peers.summarise(runs)
    assert summary["reference"] == "generate" and summary["engines"]["generate_batch"]["identical"] == "1/2"
    assert summary["engines"]["generate_batch"]["wall_ratio"] == 2.0


def test_an_unknown_engine_is_refused_in_one_line(peers, capsys):
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--traces", "x", "--engines", "project,vllm"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown engine 'vllm'" in err and "llamacpp-q8_0" in err


def _tiny_trace_run(run_dir: Path, tiny_dialogues) -> str:
    """Two stored traces whose `ers` steps carry prompts of different lengths (so `generate` left-pads)."""
    store = TraceStore(run_dir)
    store.claim(RunInfo(pipeline={}, backend_name="local", model="tiny", prompt_version=PROMPT_VERSION, split="test"))
    for i, d in enumerate(tiny_dialogues[:2]):
        messages = [
            {"role": "system", "content": "You write one short, kind reply as JSON."},
            {"role": "user", "content": f"{d.situation} {' '.join(t.text for t in d.turns) * (i + 1)}"},
        ]
        step = Step(role="ers", messages=messages, parsed={"response": "ok"}, prompt_tokens=40, completion_tokens=5)
        trace = Trace(key=d.id, dialogue=d, backend="local", model="tiny", prompt_version=PROMPT_VERSION,
                      prompt_style="teacher", config={}, steps=[step], outputs={"ers": {"response": "ok"}})  # fmt: skip
        store.append(trace)
    return str(run_dir)


@pytest.mark.slow  # two worker processes, each loading torch and a tiny model
def test_project_and_generate_answer_the_same_on_a_tiny_model(peers, tmp_path, tiny_model_dir, tiny_dialogues):
    out = tmp_path / "peers.json"
    argv = ["--traces", _tiny_trace_run(tmp_path / "run", tiny_dialogues), "--model", tiny_model_dir,
            "--engines", "project,generate", "--max-new-tokens", "4", "--repeats", "1", "--threads", "1",
            "--out", str(out)]  # fmt: skip
    assert peers.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["prompts"]["n"] == 2 and report["prompts"]["role"] == "ers"
    assert report["machine"]["torch"] and report["command"].startswith("python benchmarks/peers.py --traces")
    runs = {r["engine"]: r for r in report["runs"]}
    for run in runs.values():
        assert run["precision"] == "float32" and run["n"] == 2 and run["wall_s"] > 0 and run["peak_rss_mb"] > 50
        assert 0 < run["completion_tokens"] <= 8 and run["completion_tok_s"] > 0 and run["prompt_tok_s"] > 0
        assert run["identical"] == 2, run["texts"]
    assert runs["project"]["prompt_tokens"] == runs["generate"]["prompt_tokens"]
    assert runs["project"]["texts"] == runs["generate"]["texts"]
    summary = report["summary"]
    assert summary["reference"] == "project" and summary["engines"]["generate"]["identical"] == "2/2"
    assert summary["engines"]["project"]["completion_tok_s_ratio"] == 1.0 and not summary["failed"]
