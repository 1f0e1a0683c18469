"""`python -m eval score` on CSV and JSONL files: the cheap metrics, I-ACC, and clear input errors."""

from __future__ import annotations

import csv
import json

import pytest

from eval.__main__ import main


def _write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_score_csv_cheap_metrics_and_iacc(tmp_path, capsys):
    path = tmp_path / "resp.csv"
    _write_csv(
        path,
        [
            {"response": "I am so sorry", "pred": "sadness", "gold": "sad"},
            {"response": "i am happy", "pred": "anger", "gold": "proud"},
        ],
    )
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "score",
                "--responses",
                str(path),
                "--column",
                "response",
                "--emotion-column",
                "pred",
                "--gold-emotion-column",
                "gold",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    # one line names what was left out and the flag for each; I-ACC ran, so it is not among them
    assert captured.err.strip() == (
        "warning: skipped BERTScore, ROUGE-L, BLEU-2 (--gold-column), relevance (--seeker-column), "
        "label accuracy (--label-column and --gold-label-column), "
        "answer similarity (--answer-column and --reference-answer-column), PPL (--ppl-model, e.g. smollm2-135m)"
    )
    assert printed == json.loads(out.read_text())
    assert printed["n"] == 2 and printed["diversity"]["dist1"] == pytest.approx(5 / 7)
    assert printed["diversity"]["ead_tokenizer"] == "cl100k_base"
    assert printed["i_acc"]["ekman6"]["accuracy"]["value"] == 0.5  # gold 'sad' → sadness, 'proud' → happiness
    assert printed["i_acc"]["ed32"] is None  # Ekman predictions have no 32-class score
    assert "ppl" not in printed and "bertscore" not in printed  # only when asked for


def test_score_jsonl(tmp_path, capsys):
    path = tmp_path / "resp.jsonl"
    path.write_text('{"text": "wow"}\n\n{"text": ""}\n')
    assert main(["score", "--responses", str(path), "--column", "text"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["n"] == 2 and printed["diversity"]["dist1"] == 1.0 and printed["diversity"]["dist2"] == 0.0


@pytest.mark.parametrize(
    "content, args, message",
    [
        (None, ["--column", "response"], "no such file"),
        ("response\nhi\n", ["--column", "reply"], "no column 'reply' (columns: response)"),
        ('{"a": 1}\nnot json\n', ["--column", "a"], "line 2: not valid JSON"),
        (
            "response,gold\nhi,joy\n",
            ["--column", "response", "--emotion-column", "response", "--gold-emotion-column", "gold"],
            "row 1: field 'gold': unknown emotion label 'joy'",
        ),
        (
            "response\nhi\n",
            ["--column", "response", "--ppl-model", "smollm2-135m", "--ppl-context", "dialogue"],
            "--ppl-context dialogue needs --context-column",
        ),
        (
            "response,emotion\nhi,sad\n",
            ["--column", "response", "--answer-column", "emotion"],
            "--answer-column and --reference-answer-column go together",
        ),
    ],
)
def test_score_bad_input_is_one_line(tmp_path, capsys, content, args, message):
    suffix = ".jsonl" if content and content.startswith("{") else ".csv"
    path = tmp_path / f"resp{suffix}"
    if content is not None:
        path.write_text(content)
    assert main(["score", "--responses", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_score_with_bertscore_and_ppl(tmp_path, capsys):
    path = tmp_path / "resp.csv"
    _write_csv(
        path,
        [
            {"response": "That sounds really hard.", "gold": "That sounds really hard."},
            {"response": "Congrats on the new job!", "gold": "What a lovely surprise."},
        ],
    )
    assert (
        main(
            [
                "score",
                "--responses",
                str(path),
                "--column",
                "response",
                "--gold-column",
                "gold",
                "--ppl-model",
                "smollm2-135m",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    warned = [line for line in captured.err.splitlines() if line.startswith("warning:")]  # beside load bars
    assert warned == [
        "warning: skipped I-ACC (--emotion-column and --gold-emotion-column), relevance (--seeker-column), "
        "label accuracy (--label-column and --gold-label-column), "
        "answer similarity (--answer-column and --reference-answer-column)"
    ]
    assert printed["bertscore"]["f1"]["n"] == 2 and printed["bertscore"]["model"] == "minilm"
    assert printed["rouge_l"]["n"] == printed["bleu2"]["n"] == 2 and "items" not in printed["bleu2"]
    assert printed["ppl"]["value"] > 1 and printed["ppl"]["tokens"] > 0 and printed["ppl"]["context"] == "response"


@pytest.mark.slow
def test_score_ppl_given_the_dialogue(tmp_path, capsys):
    path = tmp_path / "resp.csv"
    _write_csv(path, [{"response": "That sounds really hard.", "dialogue": "I lost my job today."}])
    argv = ["score", "--responses", str(path), "--column", "response", "--ppl-model", "smollm2-135m"]
    assert main([*argv, "--ppl-context", "dialogue", "--context-column", "dialogue"]) == 0
    given = json.loads(capsys.readouterr().out)["ppl"]
    assert main(argv) == 0
    alone = json.loads(capsys.readouterr().out)["ppl"]
    assert given["context"] == "dialogue" and given["value"] > 1 and given["value"] != alone["value"]


@pytest.mark.slow
def test_score_relevance_and_answer_similarity_from_their_columns(tmp_path, capsys):
    """--seeker-column feeds relevance and --answer-column with --reference-answer-column feeds answer
    similarity, so their --<metric>-model flags score something rather than nothing."""
    replies = ["I am so sorry your dog is sick.", "Congratulations on passing your driving test!"]
    seekers = ["My dog is very sick.", "I passed my driving test today."]

    def scored(seeker_turns):
        rows = [{"response": r, "seeker": t, "em": "sad", "ref": "sad"} for r, t in zip(replies, seeker_turns)]
        _write_csv(tmp_path / "resp.csv", rows)
        argv = ["score", "--responses", str(tmp_path / "resp.csv"), "--column", "response", "--seeker-column", "seeker"]
        assert (
            main([*argv, "--answer-column", "em", "--reference-answer-column", "ref", "--relevance-model", "minilm"])
            == 0
        )
        return json.loads(capsys.readouterr().out)

    own, swapped = scored(seekers), scored(seekers[::-1])
    assert own["relevance"]["n"] == 2 and own["relevance"]["model"] == "minilm"
    assert own["answer_similarity"]["n"] == 2 and own["answer_similarity"]["value"] == pytest.approx(1.0, abs=1e-4)
    # replies answer their own seeker's turn better than each other's
    assert own["relevance"]["value"] > swapped["relevance"]["value"] + 0.2
