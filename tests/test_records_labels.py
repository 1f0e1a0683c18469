"""`eval records write --labels JSON [...]`: the record of `benchmarks/label_decoding.py` runs (eval/records/labels.py),
rendered into a doc's block and its `summary` paragraph. Hand-made runs (two strategy runs with val and test, one
emotion run) check the exact rows and words; the repository's own benchmarks/label_decoding.json is recorded with
whatever figures it holds; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_records import _compare_report
from test_records_bad_input import WRITE, _write_refused
from test_records_students import _rendered as rendered

from eval.__main__ import main as eval_main
from eval.compare.markdown import interval
from eval.records.blocks import stale_blocks

REPO = Path(__file__).resolve().parents[1]
BY = "val macro-F1 (ties: the first of greedy, rank, rank-calibrated)"
MACHINE = {"cpu": "Test CPU", "cores": 2, "cpu_flags": ["avx2", "avx512_bf16"], "torch_threads": 2}


def _stat(value: float, low: float, high: float, n: int = 20) -> dict:
    return {"value": value, "ci_low": low, "ci_high": high, "n": n}


def _figures(acc: tuple, f1: tuple, seconds=None, ranking=None, changed=None) -> dict:
    figures = {"accuracy": _stat(*acc), "macro_f1": _stat(*f1), "n_invalid": 0, "failed": 0}
    if seconds is not None:
        figures["seconds_per_dialogue"] = seconds
    if ranking is not None:
        figures |= {"ranking_seconds_per_dialogue": ranking, "versus_greedy": {"label_changed": changed}}
    return figures


def _strategy(pipeline: str = "configs/pipelines/escot.yaml", adapters: str = "runs/s/adapters/traces/seed-42",
              majority: float = 0.30, oracle: bool = True) -> dict:  # fmt: skip
    """A strategy run as the benchmark writes it: val and test, three decodings, rank chosen on val."""
    val = {"greedy": _figures((0.30, 0.10, 0.50), (0.20, 0.10, 0.30), 0.5),
           "rank": _figures((0.40, 0.20, 0.60), (0.30, 0.20, 0.40), 0.9, 0.4, 2),
           "rank-calibrated": _figures((0.35, 0.15, 0.55), (0.25, 0.15, 0.35), 1.0, 0.5, 3)}  # fmt: skip
    test = {"greedy": _figures((0.25, 0.10, 0.40), (0.15, 0.05, 0.25), 0.6),
            "rank": _figures((0.50, 0.40, 0.60), (0.35, 0.25, 0.45), 1.0, 0.4, 5),
            "rank-calibrated": _figures((0.45, 0.25, 0.65), (0.40, 0.30, 0.50), 1.1, 0.5, 6)}  # fmt: skip
    label_only = {"split": "test", "reference": "the data's reply", "re_temperature": 0.5, "seed": 0,
                  "full": {"bertscore_f1": _stat(0.46, 0.44, 0.48), "bertscore_model": "minilm",
                           "rouge_l": _stat(0.23, 0.21, 0.25)},
                  "label_only": {"bertscore_f1": _stat(0.39, 0.37, 0.41), "bertscore_model": "minilm",
                                 "rouge_l": _stat(0.17, 0.16, 0.18)},
                  "label_only_minus_full_bertscore_f1": {"diff": -0.07, "ci_low": -0.09, "ci_high": -0.05, "n": 20},
                  "label_only_minus_full_rouge_l": {"diff": -0.06, "ci_low": -0.08, "ci_high": -0.04, "n": 20},
                  }  # fmt: skip
    return {
        "command": f"python benchmarks/label_decoding.py --adapters {adapters}", "machine": MACHINE,
        "commit": "1234567890abcdef", "task": "strategy", "dtype_resolved": "bfloat16", "adapters": adapters,
        "pipeline": pipeline, "oracle": {"em": "teacher"}, "data": "/data/esd-cot",
        "dialogues": {"val": 10, "test": 20}, "decodings": {"val": val, "test": test},
        "majority": {"label": "Question", "from": "train labels", "val": _figures((0.20, 0.10, 0.30), (0.05, 0.0, 0.1)),
                     "test": _figures((majority, 0.20, 0.40), (0.05, 0.0, 0.1))},
        "probe": {"model": "logistic regression", "train_dialogues": 100, "text": "the last turns",
                  "val": _figures((0.45, 0.25, 0.65), (0.3, 0.2, 0.4), 0.02),
                  "test": _figures((0.55, 0.35, 0.75), (0.4, 0.3, 0.5), 0.02)},
        "chosen": {"decoding": "rank", "by": BY, "val": val["rank"], "test": test["rank"]},
        "label_only_oracle": label_only if oracle else None,
    }  # fmt: skip


def _emotion() -> dict:
    """An emotion run: decodings -> i_acc, seconds beside it; majority and probe cross-fitted over folds."""

    def decoding(acc, seconds, ranking=None, changed=None):
        ranked = {"ranking_seconds_per_dialogue": ranking, "versus_greedy": {"label_changed": changed}}
        extra = ranked if ranking else {}
        return {"i_acc": _figures(acc, (0.10, 0.05, 0.15)), "seconds_per_dialogue": seconds, **extra}

    return {
        "command": "python benchmarks/label_decoding.py --emotion", "machine": MACHINE, "commit": None,
        "task": "emotion", "role": "asi", "data": "/data/ed_ekman_dev.csv", "dialogues": 40,
        "prompt_style": "teacher (untuned base, no adapters)", "oracle": {"ers": "gold"},
        "decodings": {"greedy": decoding((0.20, 0.15, 0.25), 0.3),
                      "rank": decoding((0.32, 0.28, 0.36), 0.7, 0.4, 10),
                      "rank-calibrated": decoding((0.34, 0.29, 0.38), 0.7, 0.4, 12)},
        "majority": {"from": "the other 4 of 5 conversation folds",
                     "i_acc": _figures((0.43, 0.38, 0.48), (0.1, 0.09, 0.11))},
        "probe": {"model": "logistic regression", "train_dialogues": None, "folds": 5,
                  "i_acc": _figures((0.6, 0.56, 0.65), (0.35, 0.31, 0.39))},
    }  # fmt: skip


def _files(tmp_path: Path, **runs: dict) -> list[str]:
    for name, run in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    return [str(tmp_path / f"{name}.json") for name in runs]


def _write(files: list[str], rec: Path, name: str = "labels") -> dict:
    argv = ["records", "write", "--labels", *files, "--name", name, "--command", "python -m eval records write",
            "--commit", "abc1234", "--machine", "test CPU", "--out", str(rec)]  # fmt: skip
    assert eval_main(argv) == 0
    return json.loads((rec / f"{name}.json").read_text())


def _rendered(rec: Path, tmp_path: Path, name: str = "labels") -> tuple[Path, str, str]:
    return rendered(rec, tmp_path, name)


def test_strategy_and_emotion_runs_render_one_table_per_task_and_a_summary(tmp_path):
    first = _strategy()
    second = _strategy("configs/pipelines/escot-strategy-first.yaml", "runs/s/adapters/traces-first/seed-42", 0.9,
                       oracle=False)  # fmt: skip
    files = _files(tmp_path, a=first, b=second, e=_emotion())
    record = _write(files, tmp_path / "rec")
    assert record["kind"] == "labels" and [r["task"] for r in record["runs"]] == ["strategy", "strategy", "emotion"]
    run = record["runs"][0]
    assert run["n"] == {"val": 10, "test": 20} and run["chosen"] == {"decoding": "rank", "by": BY}
    assert run["decodings"]["rank"]["test"]["labels_changed"] == 5 and run["machine"] == "2-core Test CPU, AVX512_BF16"
    assert record["runs"][2]["n"] == {"i_acc": 40} and record["runs"][1]["label_only_oracle"] is None

    doc, full, summary = _rendered(tmp_path / "rec", tmp_path)
    lines = full.splitlines()
    header = "| source | decoding | val accuracy | val macro-F1 | test accuracy | test macro-F1 | test s / dialogue |"
    at = lines.index(header)
    assert lines[at - 2] == "**The strategy label** (`sr`, oracle em: teacher; `esd-cot`, val 10, test 20 dialogues):"
    a, b = "escot traces/seed-42", "escot-strategy-first traces-first/seed-42"
    greedy = "0.30 [0.10, 0.50] | 0.20 [0.10, 0.30] | 0.25 [0.10, 0.40] | 0.15 [0.05, 0.25] | 0.60"
    rank = "0.40 [0.20, 0.60] | 0.30 [0.20, 0.40] | 0.50 [0.40, 0.60] | 0.35 [0.25, 0.45] | 1.00"
    calibrated = "0.35 [0.15, 0.55] | 0.25 [0.15, 0.35] | 0.45 [0.25, 0.65] | 0.40 [0.30, 0.50] | 1.10"
    assert lines[at + 2 : at + 10] == [
        f"| {a} | greedy | {greedy} |",
        f"| {a} | rank (chosen) | {rank} |",
        f"| {a} | rank-calibrated | {calibrated} |",
        f"| {b} | greedy | {greedy} |",
        f"| {b} | rank (chosen) | {rank} |",
        f"| {b} | rank-calibrated | {calibrated} |",
        "| – | majority class | 0.20 [0.10, 0.30] | 0.050 [0.000, 0.100] | 0.30 [0.20, 0.40] | 0.050 [0.000, 0.100] "
        "| – |",
        "| – | probe | 0.45 [0.25, 0.65] | 0.30 [0.20, 0.40] | 0.55 [0.35, 0.75] | 0.40 [0.30, 0.50] | 0.02 |",
    ]
    assert lines[at + 10] == ""  # the majority class and the probe once: the first run's, the second's 0.9 ignored
    prose = " ".join(full.split())
    ran = (
        "Runs: escot traces/seed-42: `python benchmarks/label_decoding.py --adapters runs/s/adapters/traces/seed-42` "
        "at commit `1234567`, 2-core Test CPU, AVX512_BF16, bfloat16; escot-strategy-first"
    )
    beside = (
        "Beside them the majority class Question, from train labels; the probe: logistic regression, of the last "
        f"turns, fitted on 100 train dialogues. (chosen): picked by {BY}; no setting is chosen on test."
    )
    oracle = (
        "Label-only oracle of escot traces/seed-42 (test, re at T 0.5, seed 0; scored against the data's reply, "
        "BERTScore on minilm): re given the gold label alone against re given the full oracle: BERTScore F 0.390 "
        "[0.370, 0.410] against 0.460 [0.440, 0.480] (label-only − full -0.070 [-0.090, -0.050]); ROUGE-L 0.170 "
        "[0.160, 0.180] against 0.230 [0.210, 0.250] (label-only − full -0.060 [-0.080, -0.040])."
    )
    assert ran in prose and beside in prose and oracle in prose
    assert prose.count("Label-only oracle") == 1  # the second run measured none

    emotion = lines.index("| source | decoding | I-ACC accuracy | I-ACC macro-F1 | s / dialogue |")
    title = "**The emotion label** (`asi`, oracle ers: gold; `ed_ekman_dev.csv`, I-ACC 40 dialogues):"
    assert lines[emotion - 2] == title
    base, f1 = "teacher (untuned base, no adapters)", "0.100 [0.050, 0.150]"
    assert lines[emotion + 2 : emotion + 7] == [
        f"| {base} | greedy | 0.200 [0.150, 0.250] | {f1} | 0.30 |",
        f"| {base} | rank | 0.320 [0.280, 0.360] | {f1} | 0.70 |",
        f"| {base} | rank-calibrated | 0.340 [0.290, 0.380] | {f1} | 0.70 |",
        "| – | majority class | 0.430 [0.380, 0.480] | 0.100 [0.090, 0.110] | – |",
        "| – | probe | 0.600 [0.560, 0.650] | 0.350 [0.310, 0.390] | – |",
    ]
    assert "at commit `unknown`" in prose and "cross-fitted over 5 conversation folds" in prose
    assert "Recorded at commit `abc1234`" in prose and "record `docs/records/labels.json`" in prose

    assert summary == (
        "The strategy label (`sr`, test, 20 dialogues): decodings whose whole 95% accuracy CI lies above the majority "
        "class's 0.300: escot traces/seed-42 rank 0.50 [0.40, 0.60], escot-strategy-first traces-first/seed-42 rank "
        "0.50 [0.40, 0.60]. Chosen by val macro-F1: escot traces/seed-42 rank, test accuracy 0.50 [0.40, 0.60], "
        "macro-F1 0.35 [0.25, 0.45]; escot-strategy-first traces-first/seed-42 rank, test accuracy 0.50 [0.40, 0.60], "
        "macro-F1 0.35 [0.25, 0.45]. Ranking adds, per dialogue, escot traces/seed-42: 0.40 s (rank), 0.50 s "
        "(rank-calibrated) to the greedy pass's 0.60 s; escot-strategy-first traces-first/seed-42: 0.40 s (rank), "
        "0.50 s (rank-calibrated) to the greedy pass's 0.60 s. The emotion label (`asi`, I-ACC, 40 dialogues): "
        "decodings whose whole 95% accuracy CI lies above the majority class's 0.430: none. None chosen (one split: "
        "nothing held out to choose on). Ranking adds, per dialogue, 0.40 s (rank), 0.40 s (rank-calibrated) to the "
        "greedy pass's 0.30 s. Intervals are 95% CIs (record `docs/records/labels.json`)."
    )

    assert stale_blocks([doc], tmp_path / "rec") == []  # `records render --check` knows the kind
    doc.write_text(doc.read_text().replace("| rank (chosen) | 0.40 [", "| rank (chosen) | 0.41 [", 1))
    assert stale_blocks([doc], tmp_path / "rec") == [f"{doc}:7: differs from its record (`python -m eval records "
                                                     "render` rewrites it)"]  # fmt: skip


def test_one_run_names_its_decodings_alone_in_the_summary(tmp_path):
    _write(_files(tmp_path, a=_strategy(majority=0.55)), tmp_path / "rec")
    _, _, summary = _rendered(tmp_path / "rec", tmp_path)
    assert summary.startswith(
        "The strategy label (`sr`, test, 20 dialogues): decodings whose whole 95% accuracy CI lies above the majority "
        "class's 0.550: none. Chosen by val macro-F1: rank, test accuracy 0.50 [0.40, 0.60], macro-F1 0.35 [0.25, "
        "0.45]. Ranking adds, per dialogue, 0.40 s (rank), 0.50 s (rank-calibrated) to the greedy pass's 0.60 s."
    ), summary


def test_the_benchmarks_own_output_is_recorded_with_the_figures_it_holds(tmp_path):
    """benchmarks/label_decoding.json as the benchmark wrote it: the record takes its format, and each decoding's
    row carries the file's own figures, whatever they are (a rerun rewrites them; the rows' and the summary's exact
    words are checked on the hand-made runs above)."""
    source = REPO / "benchmarks" / "label_decoding.json"
    ran = json.loads(source.read_text())
    record = _write([str(source)], tmp_path / "rec")
    [run] = record["runs"]
    assert run["chosen"]["decoding"] == ran["chosen"]["decoding"] and run["splits"] == list(ran["decodings"])
    _, full, _ = _rendered(tmp_path / "rec", tmp_path)
    rows = {line.split(" | ")[1]: line for line in full.splitlines() if line.startswith(f"| {run['source']} | ")}
    modes = list(ran["decodings"][run["splits"][0]])
    assert len(rows) == len(modes) >= 2
    for mode in modes:
        stats = [ran["decodings"][split][mode][m] for split in run["splits"] for m in ("accuracy", "macro_f1")]
        cells = " | ".join(interval(s["value"], s["ci_low"], s["ci_high"]) for s in stats)
        said = f"{mode} (chosen)" if mode == ran["chosen"]["decoding"] else mode
        assert rows[said].startswith(f"| {run['source']} | {said} | {cells} | "), rows[said]


# --- bad input: one line naming the file, exit 2, nothing written ------------------------------------------


def test_a_missing_file_is_one_line(tmp_path):
    line = _write_refused(tmp_path, "--labels", "nowhere.json", "--name", "demo", *WRITE, names=("nowhere.json",))
    assert "no such file" in line


def test_a_file_that_is_not_json_is_one_line(tmp_path):
    (tmp_path / "run.json").write_text('{"task": "strategy", "decodings": {')
    line = _write_refused(tmp_path, "--labels", "run.json", "--name", "demo", *WRITE, names=("run.json",))
    assert "not valid JSON" in line


def test_a_run_without_decodings_is_one_line_naming_the_field(tmp_path):
    good, bad = _strategy(), _strategy()
    del bad["decodings"]
    _files(tmp_path, good=good, bad=bad)
    args = ["--labels", "good.json", "bad.json", "--name", "demo", *WRITE]
    line = _write_refused(tmp_path, *args, names=("bad.json", "`decodings`"))
    assert "not a `benchmarks/label_decoding.py` output" in line and "good.json" not in line


def test_a_decoding_without_its_figures_is_one_line_naming_where(tmp_path):
    bad = _emotion()
    del bad["decodings"]["rank"]["i_acc"]["macro_f1"]
    _files(tmp_path, bad=bad)
    line = _write_refused(tmp_path, "--labels", "bad.json", "--name", "demo", *WRITE, names=("bad.json",))
    assert "`decodings.rank.i_acc.macro_f1.value` is missing" in line


@pytest.mark.parametrize("other", ["report", "record"])
def test_a_json_of_another_kind_is_refused(tmp_path, other):
    data = _compare_report(0.0) if other == "report" else {"name": "x", "kind": "compare", "points": []}
    _files(tmp_path, other=data)
    line = _write_refused(tmp_path, "--labels", "other.json", "--name", "demo", *WRITE, names=("other.json",))
    assert "not a `benchmarks/label_decoding.py` output" in line


@pytest.mark.parametrize("copy", ["the same file", "a copy under another name", "a copy written otherwise"])
def test_the_same_results_twice_are_one_line_naming_both(tmp_path, copy):
    """One run's results would be recorded twice: refused by their content, under any name or JSON layout."""
    _files(tmp_path, a=_strategy(), b=_strategy("configs/pipelines/escot-strategy-first.yaml"))
    again = {"the same file": "a.json", "a copy under another name": "c.json", "a copy written otherwise": "d.json"}
    (tmp_path / "c.json").write_text((tmp_path / "a.json").read_text())
    (tmp_path / "d.json").write_text(json.dumps(dict(reversed(_strategy().items())), indent=2))
    args = ["--labels", "a.json", "b.json", again[copy], "--name", "demo", *WRITE]
    line = _write_refused(tmp_path, *args, names=(f"--labels {again[copy]}", "--labels a.json"))
    assert "the same results as" in line and "b.json" not in line


def test_stages_do_not_go_with_labels(tmp_path):
    _files(tmp_path, a=_strategy())
    args = ["--labels", "a.json", "--stages", "stages", "--name", "demo", *WRITE]
    assert "a label_decoding JSON keeps its own seconds" in _write_refused(tmp_path, *args, names=("--stages",))


def test_a_record_names_its_paths_from_the_repository_not_the_writers_machine(tmp_path, monkeypatch):
    """The run's adapters inside the checkout and its data beside it (`../shared/data`), written absolute by the
    benchmark: the record holds them relative to the repository, from whatever folder it is written, and renders as
    the record of the same run written with relative paths does."""
    adapters, data = (
        REPO / "runs" / "s" / "adapters" / "traces" / "seed-42",
        REPO.parent / "shared" / "data" / "esd-cot",
    )
    absolute = {**_strategy(adapters=str(adapters)), "data": str(data)}
    relative = {**_strategy(), "data": "../shared/data/esd-cot", "command": absolute["command"]}  # the same words
    monkeypatch.chdir(tmp_path)
    written = _write(_files(tmp_path, a=absolute), tmp_path / "abs")["runs"][0]
    assert (written["adapters"], written["data"]) == ("runs/s/adapters/traces/seed-42", "../shared/data/esd-cot")
    assert written["pipeline"] == "configs/pipelines/escot.yaml"  # names nothing from here: kept as written
    (tmp_path / "rel").mkdir()
    _write(_files(tmp_path / "rel", a=relative), tmp_path / "rel")
    assert _rendered(tmp_path / "abs", tmp_path)[1:] == _rendered(tmp_path / "rel", tmp_path)[1:]


def test_no_shipped_record_names_a_path_of_the_machine_that_wrote_it():
    from distill.pipeline.stage_key import PATH_FIELDS

    def absolute(value, field=False):
        if isinstance(value, str):
            return [value] if field and Path(value).is_absolute() else []
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        return [p for k, v in items for p in absolute(v, k in PATH_FIELDS)]

    found = {f.name: absolute(json.loads(f.read_text())) for f in sorted((REPO / "docs" / "records").glob("*.json"))}
    assert {name: paths for name, paths in found.items() if paths} == {}
