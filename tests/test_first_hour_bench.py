"""benchmarks/first_hour.py's row, read from a hand-made `make quickstart` log and clone (a git repo with a
stages.json): the whole, its stages, the rest, peak RSS and the result line; rows merge by name; the shipped
benchmarks/first_hour.json holds what the docs render (a row per CPU class, stages that add up)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_import import REPO

sys.path.insert(0, str(REPO))
from benchmarks.first_hour import main, summarise  # noqa: E402

STAGES = {"prepare": 0.5, "index": 4.5, "traces": 250.0, "datasets": 1.0, "train": 200.0, "eval": 50.0}
LOG = """== [1/7] prepare
result: the distilled student's emotion accuracy minus its teacher's is +0.25 (paired bootstrap)
	Maximum resident set size (kbytes): 5211920
	Exit status: 0
"""


@pytest.fixture
def made_by_hand(tmp_path):
    clone = tmp_path / "clone"
    (clone / "runs" / "quickstart").mkdir(parents=True)
    stages = {name: {"seconds": seconds, "peak_rss_mb": 100, "reused": False} for name, seconds in STAGES.items()}
    (clone / "runs" / "quickstart" / "stages.json").write_text(json.dumps(stages))
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    log = tmp_path / "make.log"
    log.write_text(LOG)
    return log, clone


def test_summarise_splits_the_whole_into_stages_and_the_rest(made_by_hand):
    row = summarise(*made_by_hand, wall=600.0)
    assert row["stages"] == STAGES
    assert row["stages_s"] == 506.0 and row["rest_s"] == 94.0 and row["wall_s"] == 600.0
    assert row["peak_rss_gb"] == 5.21
    assert row["result"].startswith("result: the distilled student's emotion accuracy")
    assert len(row["commit"]) >= 7


def test_rows_merge_by_name(made_by_hand, tmp_path):
    out = tmp_path / "first_hour.json"
    log, clone = made_by_hand
    for name, wall in (("bf16", 600.0), ("fp32", 700.0), ("bf16", 590.0)):
        main(["--name", name, "--out", str(out), "--summarise", str(log), str(clone), "--wall", str(wall)])
    runs = json.loads(out.read_text())["runs"]
    assert [(run["name"], run["wall_s"], run["by_hand"]) for run in runs] == [
        ("fp32", 700.0, True),
        ("bf16", 590.0, True),
    ]


def test_summarise_needs_the_wall(made_by_hand, tmp_path):
    with pytest.raises(SystemExit):
        main(["--name", "x", "--out", str(tmp_path / "o.json"), "--summarise", *map(str, made_by_hand)])


def test_the_shipped_record_adds_up():
    runs = {run["name"]: run for run in json.loads((REPO / "benchmarks" / "first_hour.json").read_text())["runs"]}
    assert set(runs) == {"bf16", "fp32-as-avx2"}
    assert runs["fp32-as-avx2"]["fp32_stands_in_for_avx2"] and runs["fp32-as-avx2"]["dtype"] == "fp32"
    for run in runs.values():
        assert run["stages_s"] == pytest.approx(sum(run["stages"].values()), abs=0.5)
        assert run["wall_s"] == pytest.approx(run["stages_s"] + run["rest_s"], abs=0.2)
