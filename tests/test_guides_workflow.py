"""Every guide under docs/guides, run as written: its bash blocks' commands, in order, as the README's are
(tests/workflow_blocks.py: run on the shipped sample at small sizes, or, for API, GPU, server and hours-long
commands, their `--help` and the paths they read and write).

The guides share one scratch folder, in the order a reader meets them, so a guide that starts from the
quickstart's run (`trace-distill quickstart`, again) resumes it as a rerun does. A file a guide calls the
reader's own (`my_dialogues.csv`, `replies.csv`) is made from the shipped sample, and the adapters that
`evaluate.md` says to put at `configs/eval/external-adapters.yaml`'s paths are the quickstart's.
"""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest
from workflow_blocks import ACTIVATE, MAKE_QUICKSTART, REPO, SHARED, Scratch, bash_commands, python_argv

GUIDES = ["quickstart", "curves", "evaluate", "your-data", "your-teacher", "gpu", "your-traces"]
SAMPLE = REPO / "data_prep" / "sample" / "ed_sample.csv"
ESD_COT = SHARED / "data" / "esd-cot"


def guide_commands(name: str) -> list[list[str]]:
    return bash_commands((REPO / "docs" / "guides" / f"{name}.md").read_text(encoding="utf-8"))


def _replies_csv(path) -> None:
    """The reader's replies: the sample's first listener turns, as `evaluate.md`'s `eval score` names the columns."""
    with SAMPLE.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["utterance_idx"] == "2"][:4]
    with path.open("w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow(["response", "gold", "emotion", "gold_emotion"])
        out.writerows([r["utterance"], r["utterance"], r["context"], r["context"]] for r in rows)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Scratch:
    scratch = Scratch.make(tmp_path_factory.mktemp("guides"))
    shutil.copy(SAMPLE, scratch.cwd / "my_dialogues.csv")
    _replies_csv(scratch.cwd / "replies.csv")
    return scratch


def _require_esd_cot() -> None:
    """As tests/conftest.py's require_shared_data: a skip naming where it looked, a failure under CI."""
    if (ESD_COT / "train_em_sr_re.json").is_file():
        return
    why = f"ESD-CoT not present at {ESD_COT} (your-traces.md imports it)"
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{why} (CI={os.environ['CI']}: the real-data tests must run)", pytrace=False)
    pytest.skip(why)


def _report(path) -> dict:
    return json.loads((path / "report.json").read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("guide", GUIDES)
def test_guide_commands_connect(guide, scratch):
    runs = scratch.cwd / "runs"
    if guide == "evaluate":  # "put your adapters at the paths it names": the quickstart's stand in for them
        if not (runs / "quickstart" / "adapters").is_dir():
            scratch.run([ACTIVATE, MAKE_QUICKSTART])
        (runs / "external-adapters").symlink_to(runs / "quickstart" / "adapters")
    if guide == "your-traces":
        _require_esd_cot()
    ran, helped = len(scratch.ran), len(scratch.helped)
    scratch.run(guide_commands(guide))
    ran, helped = scratch.ran[ran:], scratch.helped[helped:]
    outputs = {
        "quickstart": [runs / "quickstart/eval/report.json", runs / "export/serve_vllm.sh"],
        "curves": [runs / "quickstart/teacher-train/traces.jsonl"],
        "evaluate": [runs / "sample/eval-external/report.json", scratch.cwd / "scores.json"],
        "your-data": [runs / "mine/index", runs / "mine-quickstart/eval/report.json"],
        "your-teacher": [runs / "sample/index"],
        "gpu": [runs / "gpu/index"],
        "your-traces": [runs / "esdcot/adapters/sr/adapter_config.json", runs / "esdcot/eval/report.json"],
    }[guide]
    assert all(p.exists() for p in outputs), [str(p) for p in outputs if not p.exists()]
    assert ran, f"{guide}.md: no command ran"
    if guide == "evaluate":
        assert [s["name"] for s in _report(runs / "sample/eval-external")["systems"]] == ["external", "base"]
    if guide == "gpu":  # the GPU steps are shown their --help, each reading what the one before it writes
        assert any("configs/eval/qwen0.5b-gpu.yaml" in line for line in helped), helped


def test_every_guide_command_is_one_the_test_knows():
    """Fast: every guide with a bash block is tested, its blocks parse, and each command's program is known."""
    with_blocks = {p.stem for p in (REPO / "docs" / "guides").glob("*.md") if "```bash" in p.read_text("utf-8")}
    assert with_blocks == set(GUIDES)
    for guide in GUIDES:
        commands = guide_commands(guide)
        first = next(i for i, argv in enumerate(commands) if argv[0] in ("python", "trace-distill", "accelerate"))
        assert ACTIVATE in commands[:first], f"{guide}.md: a new shell runs its first command without the venv"
        for argv in commands:
            if argv[0] in ("python", "trace-distill", "accelerate"):
                assert python_argv(argv)
            else:
                assert argv[0] in (".", "make", "pip", "python3", "sh", "bash", ".vllm/bin/vllm"), (guide, argv)
