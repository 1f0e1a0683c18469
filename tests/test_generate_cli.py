"""`python -m distill generate` as a user runs it: killed with SIGKILL at several points and rerun,
the store ends with exactly one readable trace per dialogue and reruns skip the finished ones;
bad input ends in one clear line. Also `python -m distill respond` on the embedded model.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from distill.pipeline.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
N_DIALOGUES = 6


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "distill", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory, tiny_dialogues):
    from data_prep.loaders import save_dialogues

    out = tmp_path_factory.mktemp("ed")
    save_dialogues({"train": tiny_dialogues[:N_DIALOGUES], "validation": [], "test": tiny_dialogues[N_DIALOGUES:]}, out)
    return out


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    # ASI + ERS only and one attempt: the resume logic is what is under test, and the CPU is shared.
    cfg = {
        "backend": {"type": "local", "model": "smollm2-135m", "batch_size": 16},
        "pipeline": {"rag": False, "use_cae": False, "use_srp": False, "max_attempts": 1},
    }
    path = tmp_path_factory.mktemp("cfg") / "local.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _kill_when(
    proc: subprocess.Popen, traces: Path, lines_at_least: int, extra_wait_s: float, timeout_s: float = 900
) -> None:
    deadline = time.monotonic() + timeout_s
    while _lines(traces) < lines_at_least:
        assert proc.poll() is None, f"generate exited early: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "generate made no progress"
        time.sleep(0.05)
    time.sleep(extra_wait_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_generate_survives_sigkill_and_resumes_without_repeats(tmp_path, dataset_dir, config_file):
    out = tmp_path / "run"
    traces = out / "traces.jsonl"
    args = (
        "generate",
        "--config",
        str(config_file),
        "--dialogues",
        str(dataset_dir),
        "--split",
        "train",
        "--out",
        str(out),
        "--chunk-size",
        "2",
    )
    # Kill 1: right as the first chunk lands (possibly between its two appends).
    _kill_when(_cli(*args), traces, lines_at_least=1, extra_wait_s=0.0)
    after_first = _lines(traces)
    assert 1 <= after_first <= N_DIALOGUES
    # Kill 2: in the middle of generating the next chunk.
    _kill_when(_cli(*args), traces, lines_at_least=after_first + 1, extra_wait_s=1.0)
    stored = len(TraceStore(out).read()[0])
    assert stored > after_first or stored == N_DIALOGUES
    # Rerun to the end: it skips exactly what is stored and generates only the rest.
    proc = _cli(*args)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-2000:]
    match = re.search(r"wrote (\d+) traces \((\d+) failed\), skipped (\d+)", stdout)
    assert match, stdout
    assert int(match.group(3)) == stored and int(match.group(1)) == N_DIALOGUES - stored
    assert "traces:" in stderr and "failed=" in stderr  # the progress bar with its counts
    assert "asi (iteration 0, attempt 1)" in stderr  # and a bar per stage while a chunk runs
    found, problems = TraceStore(out).read()
    assert problems == []
    assert sorted(t.dialogue.id for t in found) == sorted(f"tiny{i}#1" for i in range(N_DIALOGUES))
    assert _lines(traces) == N_DIALOGUES  # no duplicates, no partial lines left in the file
    assert (out / "run.json").is_file()
    # A fourth run has nothing left to do.
    proc = _cli(*args)
    stdout, _ = proc.communicate(timeout=900)
    assert f"wrote 0 traces (0 failed), skipped {N_DIALOGUES}" in stdout


def test_generate_rejects_bad_input_with_one_line(tmp_path, dataset_dir, config_file):
    bad_split = _cli(
        "generate",
        "--config",
        str(config_file),
        "--dialogues",
        str(dataset_dir),
        "--split",
        "nope",
        "--out",
        str(tmp_path / "r"),
    )
    _, err = bad_split.communicate(timeout=300)
    assert bad_split.returncode == 2 and err.strip().splitlines() == [err.strip()]
    assert "no split 'nope'" in err
    bad_cfg = tmp_path / "bad.yaml"
    bad_cfg.write_text("backend: {type: local}\npipeline: {max_attempts: 0}\n")
    proc = _cli("generate", "--config", str(bad_cfg), "--dialogues", str(dataset_dir), "--out", str(tmp_path / "r"))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and f"{bad_cfg}: field 'pipeline.max_attempts'" in err


@pytest.mark.slow
def test_respond_prints_every_stage_and_the_reply():
    proc = _cli("respond", "seeker: My dog ran away this morning and I can't find him.")
    stdout, stderr = proc.communicate(timeout=1800)
    assert proc.returncode == 0, stderr[-2000:]
    for role in ("asi", "cae", "srp", "ers"):
        assert re.search(rf"^\[{role}\] \{{", stdout, re.M), stdout
    assert re.search(r"^reply: \S", stdout, re.M)


def test_respond_reads_plain_or_labelled_turns():
    from distill.pipeline.cli_respond import parse_dialogue

    d = parse_dialogue("I lost my keys.\nresponder: Oh no, where?\nseeker: At the gym, I think.")
    assert [t.speaker for t in d.turns] == ["seeker", "responder", "seeker"]
    assert d.turns[2].text == "At the gym, I think." and d.emotion == ""  # no gold label for a live dialogue
    with pytest.raises(ValueError, match="the dialogue is empty"):
        parse_dialogue("  \n ")
    with pytest.raises(ValueError, match="line 2: the dialogue must end on a seeker turn"):
        parse_dialogue("I lost my keys.\nOh no!")
