"""The prepared GPU run (benchmarks/gpu_workflow.py, which benchmarks/gpu_check.sh starts on a lent GPU), end to end
on the CPU with the tiny random model and tiny limits: every stage of the README's GPU workflow and of `eval students`
runs as its command, and the run leaves its stage table (seconds, peak memory), its log and its records.

ESD-CoT is the fixture in its formats that tests/test_students.py writes (never ESD's text).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_workflow.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_workflow  # noqa: E402

TRAIN_FLAGS = ["max_steps=1", "per_device_train_batch_size=2", "num_threads=1", "card_example=false", "bf16=false"]


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # test_students' configs name the shipped files relative to the repository


def _run(out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SCRIPT), "--out", str(out), "--device", "cpu", "--machine", "test CPU", *flags]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1700)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_gpu_run_runs_every_stage_on_a_cpu_and_records_it(tmp_path, tiny_model_dir):
    from test_students import tiny_config

    students = tiny_config(tmp_path, tiny_model_dir)
    flags = ["--model", tiny_model_dir, "--train-limit", "3", "--test-limit", "2"]
    flags += ["--esdcot", str(tmp_path / "esd-cot"), "--students-config", str(students), "--students-n", "4"]
    flags += ["--seeds", "42", "43", "--epochs", "1", "--students-limit", "2", "--student", "traces", "direct"]
    flags += ["--budget-s", "1600"]
    for flag in TRAIN_FLAGS:
        flags += ["--train-flag", flag]
    out = tmp_path / "run"
    run = _run(out, *flags)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]

    stages = json.loads((out / "stages.json").read_text())
    names = [s["stage"] for s in stages]
    assert names == ["dialogues", "index", "teacher train traces", "teacher test traces", "datasets", "train asi",
                     "train cae", "train srp", "train ers", "eval compare", "record compare",
                     "eval students (seeds 42)", "record students (seeds 42)", "eval students (seeds 42 43)",
                     "record students (seeds 42 43)"]  # fmt: skip
    for stage in stages:
        assert stage["rc"] == 0 and stage["seconds"] > 0 and stage["peak_rss_mib"] > 0, stage
        assert "peak_gpu_mib" in stage and not stage["cut_by_budget"]  # None here: no nvidia-smi on a CPU machine
    launches = [s["command"] for s in stages if s["stage"].startswith("train ")]
    assert all("accelerate.commands.launch" in c and "qwen0.5b-gpu.yaml" in " ".join(c) for c in launches)
    log = (out / "log.txt").read_text()
    assert all(f"== {name}: rc 0" in log for name in names)

    for role in ("asi", "cae", "srp", "ers"):  # each launch trained its role with the GPU config on the tiny model
        meta = json.loads((out / "adapters" / role / "trace_distill_adapter.json").read_text())
        assert meta["base_model"] == tiny_model_dir and meta["train_config"]["attn_implementation"] == "sdpa"
    report = json.loads((out / "eval" / "report.json").read_text())
    assert {s["name"] for s in report["systems"]} >= {"teacher", "student", "base"}
    derived = yaml.safe_load((out / "configs" / "students.yaml").read_text())
    assert derived["backend"]["device"] == "cpu" and derived["train_config"].endswith("qwen0.5b-gpu.yaml")
    for name in ("gpu-workflow", "gpu-students-1seed", "gpu-students-2seed"):
        record = json.loads((out / "records" / f"{name}.json").read_text())
        assert record["machine"] == "test CPU", name
    two = json.loads((out / "students" / "students.json").read_text())
    assert json.dumps(two).count("s43") > 0  # the second run added seed 43 beside 42


def _stage(seconds: float) -> list[str]:
    return [sys.executable, "-c", f"import time; print('working'); time.sleep({seconds})"]


def test_a_stage_past_the_budget_is_cut_and_what_needs_it_is_skipped_but_records_run(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_workflow, "RECORDS_RESERVE_S", 2)
    args = gpu_workflow.argparse.Namespace(out=tmp_path, budget_s=10.0)
    stages = [("datasets", _stage(0)), ("eval compare", _stage(60)), ("record compare", _stage(0)),
              ("eval students (seeds 42)", _stage(0))]  # fmt: skip
    with open(tmp_path / "log.txt", "w") as log:
        results = gpu_workflow.run_all(args, stages, log)
    first, cut, record, students = results
    assert first["rc"] == 0 and first["seconds"] < 5
    assert cut["cut_by_budget"] and cut["rc"] != 0 and cut["seconds"] < 15  # stopped at its share, not after 60 s
    assert record["skipped"] == "eval compare did not finish"
    assert students["skipped"] == "no budget left"
    assert json.loads((tmp_path / "stages.json").read_text()) == results


def test_the_first_students_run_needs_nothing_of_the_workflow():
    order = ["eval compare", "record compare", "eval students (seeds 42)", "record students (seeds 42)",
             "eval students (seeds 42 43)"]  # fmt: skip
    assert gpu_workflow.needs("eval students (seeds 42)", order) is None
    assert gpu_workflow.needs("record students (seeds 42)", order) == "eval students (seeds 42)"
    assert gpu_workflow.needs("eval students (seeds 42 43)", order) == "eval students (seeds 42)"


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "STASH": str(tmp_path / "stash"), "SITE": str(tmp_path / "site"), "OUT": str(tmp_path / "o")}
    return subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_bundle_missing_a_part_is_refused_in_one_line_before_anything_installs(tmp_path):
    """gpu_check.sh joins the parts gpu_carry.sh split the bundle into; one left behind is named, nothing runs."""
    import hashlib
    import tarfile

    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "wheels" / "a.txt").write_bytes(os.urandom(3000))
    with tarfile.open(tmp_path / "bundle.tar", "w") as tar:
        tar.add(bundle / "wheels", arcname="./wheels")
    data = (tmp_path / "bundle.tar").read_bytes()
    carry = tmp_path / ".gpu-carry"
    carry.mkdir()
    (carry / "part-00").write_bytes(data[:4096])
    (carry / "part-01").write_bytes(data[4096:])
    (carry / "bundle.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    stashed = _check(tmp_path, "stash", ".gpu-carry/part-00")
    assert stashed.returncode == 0 and "stashed part-00 (1 parts" in stashed.stdout, stashed.stderr
    refused = _check(tmp_path, "run")
    assert refused.returncode == 2 and not (tmp_path / "site").exists()
    assert refused.stderr.strip().count("\n") == 0 and "a part is missing" in refused.stderr
    joined = _check(tmp_path, "run", ".gpu-carry/part-01")  # the last call: stash, join, unpack, then install
    assert (tmp_path / "stash" / "bundle" / "wheels" / "a.txt").read_bytes() == (
        bundle / "wheels" / "a.txt"
    ).read_bytes()
    assert "a part is missing" not in joined.stderr
