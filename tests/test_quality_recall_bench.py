"""benchmarks/quality_recall.py on a tiny fixture: a hand-made teacher run (the registry's prompts, replies written
for this test), labels for it, an ED-shaped CSV and ESD-CoT-shaped chains (test_import's invented ones). The record's
recall, false positives and kept-back split are counted by hand; a label whose text changed, a run the labels name
but the command does not, and a bad label row are refused in one line."""

from __future__ import annotations

import csv
import json
import sys

from test_datasets import write_run
from test_import import REPO, write_full_chain
from test_quality import trace_with_prompts

sys.path.insert(0, str(REPO))
from benchmarks.quality_recall import _portable_paths, main, text_sha256, wilson  # noqa: E402

REPLIES = [  # (reply, label, category)
    ("The seeker's true emotion is anger. Make your analysis consistent with it.", "bad", "prompt"),
    ("I am the Empathetic Response Synthesizer in a team of agents.", "bad", "self"),
    ("Gentle Response:", "bad", "template"),
    ("I'm going to tell you about my future plans, maybe.", "bad", "unrelated"),
    ("Oh no, that is so frustrating. Did you get your money back?", "good", "ok"),
    ("That sounds awful, I'm sorry it happened.", "good", "ok"),
]


HUMAN = [
    "Wow, and then?",
    "That's a big step, congratulations!",
    "I'd be furious too.",
    "Ugh, that sounds gross.",
    "Oh no, I'm so sorry.",
    "No way! Were you shocked?",
    "That must be scary, are you okay?",
    "What a lovely thing to hear.",
]


def _fixture(tmp_path, tiny_dialogues):
    traces = [
        trace_with_prompts(d, {"ers": {"response": r}}, f"k{i}")
        for i, (d, (r, _, _)) in enumerate(zip(tiny_dialogues, REPLIES))
    ]
    write_run(tmp_path / "run", traces)
    labels = tmp_path / "labels.jsonl"
    rows = [
        {"run": "mini", "trace": f"k{i}", "role": "ers", "field": "response", "sha256": text_sha256(r), "label": label,
         "category": cat, "held_out": i % 2 == 1, "set": "kept-back" if i % 2 else "dev"}
        for i, (r, label, cat) in enumerate(REPLIES)
    ]  # fmt: skip
    labels.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ed = tmp_path / "ed.csv"
    with ed.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["utterances", "prompt", "emotion_id", "gold_response"])
        writer.writeheader()
        for d, reply in zip(tiny_dialogues, HUMAN):
            turns = "\n".join(f"{t.speaker}: {t.text}" for t in d.turns)
            writer.writerow({"utterances": turns, "prompt": d.situation, "emotion_id": 3, "gold_response": reply})
    esd = write_full_chain(tmp_path / "test.json")
    return labels, ed, esd


def test_the_record_counts_recall_per_check_and_false_positives_on_each_human_set(tmp_path, tiny_dialogues, capsys):
    labels, ed, esd = _fixture(tmp_path, tiny_dialogues)
    out = tmp_path / "record.json"
    argv = ["--run", f"mini={tmp_path / 'run'}", "--labels", str(labels), "--ed", str(ed), "--esd", str(esd)]
    assert main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    replies = record["replies"]
    assert replies["bad"] == 4 and replies["missing"] == 0
    recall = replies["recall"]
    # the prompt echo, the self-description and the template are caught; the unrelated sentence is not
    assert recall["all"]["any"] == wilson(3, 4)
    assert recall["dev"]["any"]["n"] == 2 and recall["held_out"]["any"]["n"] == 2  # rows 1, 3 kept back
    assert recall["all"]["self_description"]["k"] == 1 and recall["all"]["template_fragment"]["k"] == 1
    assert replies["false_positives_on_good"]["any"] == wilson(0, 2)
    assert replies["recall_by_category"]["unrelated"]["k"] == 0
    by_set = replies["recall_by_set"]  # each set, each check: the kept-back set holds the self-description (row 1)
    assert {name: rates["any"] for name, rates in by_set.items()} == {"dev": wilson(2, 2), "kept-back": wilson(1, 2)}
    assert by_set["kept-back"]["self_description"] == wilson(1, 2) and by_set["dev"]["self_description"]["k"] == 0
    assert by_set["dev"]["template_fragment"] == wilson(1, 2) and set(by_set["dev"]) == {*replies["checks"], "any"}
    assert replies["filtered"] == {"all": wilson(3, 4), "dev": wilson(2, 2), "kept-back": wilson(1, 2)}
    human = record["human"]
    assert human["ed-dev-human"]["any"] == wilson(0, 8) and human["esd-cot-test-human"]["any"]["n"] == 4
    assert record["labels"] == {"file": "$R/labels.jsonl", "rows": 6, "held_out": 3}
    assert "text" not in json.dumps(record)
    assert "replies: 4 bad present" in capsys.readouterr().out
    # no path of this machine: the paths outside the repository are named from the folder they share
    assert str(tmp_path) not in json.dumps(record) and record["runs"] == {"mini": "$R/run"}
    assert record["command"] == (
        "python benchmarks/quality_recall.py --run mini=$R/run --labels $R/labels.jsonl --ed $R/ed.csv "
        "--esd $R/test.json --out $R/record.json"
    )


def test_paths_are_named_from_the_repository_the_shared_data_or_the_runs_folder(tmp_path):
    inside, shared = REPO / "benchmarks" / "quality_recall.json", REPO.parent / "shared" / "data" / "ed.csv"
    runs = [tmp_path / "runs" / "ed" / "teacher-val", tmp_path / "runs" / "sample" / "teacher-train"]
    named = _portable_paths([inside, shared, *runs])
    assert named[inside] == "benchmarks/quality_recall.json" and named[shared] == "../shared/data/ed.csv"
    assert [named[run] for run in runs] == ["$R/ed/teacher-val", "$R/sample/teacher-train"]
    assert _portable_paths([runs[0]]) == {runs[0]: "$R/teacher-val"}  # one path: R is its folder


def test_wilson_intervals_hold_their_edges():
    assert wilson(0, 10)["ci_low"] == 0.0 and 0.2 < wilson(0, 10)["ci_high"] < 0.35
    assert wilson(10, 10)["ci_high"] == 1.0 and wilson(5, 10)["ci_low"] < 0.5 < wilson(5, 10)["ci_high"]
    assert wilson(0, 0)["rate"] is None


def test_bad_input_is_refused_in_one_line(tmp_path, tiny_dialogues, capsys):
    labels, ed, esd = _fixture(tmp_path, tiny_dialogues)
    base = ["--labels", str(labels), "--ed", str(ed), "--esd", str(esd)]
    assert main(base) == 2
    assert capsys.readouterr().err.strip() == "error: the labels name run 'mini': pass --run mini=<trace run folder>"
    changed = labels.read_text().replace(text_sha256(REPLIES[0][0]), text_sha256("another text"))
    labels.write_text(changed)
    assert main([*base, "--run", f"mini={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "trace k0 ers.response: its text is not the text labelled" in err
    out = tmp_path / "record.json"  # --skip-changed: the row is left out of every figure and named
    assert main([*base, "--run", f"mini={tmp_path / 'run'}", "--skip-changed", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["changed"] == [{"run": "mini", "trace": "k0", "role": "ers", "field": "response", "set": "dev"}]
    assert record["replies"]["bad"] == 3 and record["replies"]["recall"]["all"]["any"] == wilson(2, 3)
    assert record["command"].endswith("--skip-changed") and "left out 1 label rows" in capsys.readouterr().out
    labels.write_text('{"run": "mini"}\n')
    assert main([*base, "--run", f"mini={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {labels}: row 1: field 'trace' missing or of the wrong type"
