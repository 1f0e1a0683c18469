"""EmpatheticDialogues loaders, the `data_prep dialogues` CLI, splits, bad input and the shipped sample."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter, defaultdict

import pytest

from data_prep import taxonomy
from data_prep.__main__ import main
from data_prep.ed_formats import DataError, content_id
from data_prep.loaders import (
    SAMPLE_PATH,
    SPLITS,
    limit_leaves_out,
    load_dialogues,
    load_sample,
    load_split,
    read_csv,
    split_dialogues,
)

ED_HEADER = "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags"
# Small conversations written for these tests: (conv_id, fine label, situation, utterances).
ED_CONVS = [
    (
        "hit:1_conv:2",
        "proud",
        "I won the office chess tournament, finally.",
        [
            "I finally won the chess tournament at work, after five years!",
            "Five years, wow. How did the final go?",
            "I was down a rook, but my opponent ran out of time.",
            "A win is a win. Congratulations!",
        ],
    ),
    (
        "hit:2_conv:4",
        "terrified",
        "A wasp got into my car while I was driving.",
        ["A wasp flew into my car on the motorway and I nearly swerved.", "That is scary at that speed."],
    ),
    (
        "hit:3_conv:6",
        "prepared",
        "I have my bags packed for the hospital.",
        [
            "The baby is due next week and the hospital bag has been by the door for a month.",
            "You sound ready. Is it your first?",
            "It is, so I packed three of everything.",
        ],
    ),
]
TRACE_ROWS = [
    {
        "utterances": "seeker: My cat knocked my coffee onto the keyboard.\nresponder: Oh no, does it still work?\n"
        "seeker: Only half the keys do.",
        "prompt": "My cat ruined my keyboard.",
        "emotion_id": "0",
        "gold_response": "That is so frustrating, especially before work.",
    },
    {
        "utterances": "seeker: We adopted a puppy today!",
        "prompt": "We got a puppy.",
        "emotion_id": "3",
        "gold_response": "Congratulations! What's the puppy's name?",
    },
]


def esc(text: str) -> str:
    return text.replace(",", "_comma_")


def ed_lines(convs=ED_CONVS) -> list[str]:
    lines = [ED_HEADER]
    for conv_id, fine, prompt, utterances in convs:
        for j, text in enumerate(utterances, start=1):
            lines.append(f"{conv_id},{j},{fine},{esc(prompt)},{1 if j % 2 else 2},{esc(text)},5|5|5_5|5|5,")
    return lines


def write_lines(path, lines) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def write_trace(path, rows=TRACE_ROWS) -> str:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["utterances", "prompt", "emotion_id", "gold_response"])
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def dumps(dialogues) -> list[dict]:
    return [d.model_dump() for d in dialogues]


# ---------------------------------------------------------------- loaders


def test_ed_csv_gives_one_example_per_listener_turn(tmp_path):
    dialogues = read_csv(write_lines(tmp_path / "train.csv", ed_lines()))
    assert [d.id for d in dialogues] == ["hit:1_conv:2#2", "hit:1_conv:2#4", "hit:2_conv:4#2", "hit:3_conv:6#2"]
    first, second = dialogues[:2]
    assert [t.speaker for t in second.turns] == ["seeker", "responder", "seeker"]
    assert second.turns[-1].text == "I was down a rook, but my opponent ran out of time."  # _comma_ undone
    assert second.gold_response == "A win is a win. Congratulations!"
    assert first.turns == second.turns[:1] and first.gold_response == second.turns[1].text
    assert second.situation == "I won the office chess tournament, finally."
    assert (second.emotion, second.emotion_fine) == ("happiness", "proud")
    assert (dialogues[2].emotion, dialogues[3].emotion) == ("fear", "happiness")  # prepared → happiness


def test_ed_rows_with_extra_columns_still_load(tmp_path):
    lines = ed_lines()
    lines[1] += ",candidate one|candidate two,extra"  # the ED release has rows like this
    dialogues = read_csv(write_lines(tmp_path / "ed.csv", lines))
    assert dialogues[0].turns[0].text == ED_CONVS[0][3][0]
    assert len(dialogues) == 4


def test_ed_directory_keeps_its_splits(tmp_path):
    write_lines(tmp_path / "train.csv", ed_lines(ED_CONVS[:1]))
    write_lines(tmp_path / "valid.csv", ed_lines(ED_CONVS[1:2]))
    write_lines(tmp_path / "test.csv", ed_lines(ED_CONVS[2:]))
    loaded = load_dialogues(tmp_path)
    assert loaded.has_splits
    assert {name: [d.conv_id for d in ds] for name, ds in loaded.splits.items()} == {
        "train": ["hit:1_conv:2", "hit:1_conv:2"],
        "validation": ["hit:2_conv:4"],
        "test": ["hit:3_conv:6"],
    }


def test_trace_csv_one_example_per_row(tmp_path):
    dialogues = read_csv(write_trace(tmp_path / "trace.csv"))
    assert [d.id for d in dialogues] == [content_id(d.situation, d.turns) for d in dialogues]
    assert [d.conv_id for d in dialogues] == [d.id for d in dialogues]
    assert all(re.fullmatch(r"trace-[0-9a-f]{16}", d.id) for d in dialogues)
    assert [d.emotion for d in dialogues] == ["anger", "happiness"]
    assert dialogues[0].emotion_fine is None
    assert [t.speaker for t in dialogues[0].turns] == ["seeker", "responder", "seeker"]
    assert dialogues[0].turns[1].text == "Oh no, does it still work?"
    assert dialogues[1].gold_response == "Congratulations! What's the puppy's name?"


def test_format_auto_matches_explicit_format(tmp_path):
    ed, trace = write_lines(tmp_path / "ed.csv", ed_lines()), write_trace(tmp_path / "t.csv")
    assert dumps(read_csv(ed)) == dumps(read_csv(ed, "ed"))
    assert dumps(read_csv(trace)) == dumps(read_csv(trace, "trace"))


def test_datasets_directory_loads_like_the_csv(tmp_path):
    from datasets import Dataset, DatasetDict

    path = write_lines(tmp_path / "ed.csv", ed_lines())
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["utterance_idx"], row["speaker_idx"] = int(row["utterance_idx"]), int(row["speaker_idx"])
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "flat"))
    assert dumps(load_dialogues(tmp_path / "flat").splits["all"]) == dumps(read_csv(path))

    DatasetDict({"train": Dataset.from_list(rows[:4]), "valid": Dataset.from_list(rows[4:])}).save_to_disk(
        str(tmp_path / "dict")
    )
    loaded = load_dialogues(tmp_path / "dict")
    assert loaded.has_splits and set(loaded.splits) == {"train", "validation"}
    assert dumps(loaded.splits["train"] + loaded.splits["validation"]) == dumps(read_csv(path))


def test_unreachable_hub_id_is_one_sentence():
    with pytest.raises(DataError) as info:
        load_dialogues("no-such-owner/empathetic_dialogues_missing")
    message = str(info.value)
    assert message.startswith("no-such-owner/empathetic_dialogues_missing: ")
    assert "\n" not in message and "hub" in message


# ---------------------------------------------------------------- bad input


def _bad_ed(lines_edit):
    lines = ed_lines()
    lines_edit(lines)
    return lines


BAD_ED = {
    "unknown emotion": (
        lambda ls: ls.__setitem__(3, ls[3].replace(",proud,", ",elated,")),
        4,
        "context",
        "unknown emotion label 'elated'",
    ),
    "empty utterance": (
        lambda ls: ls.__setitem__(5, ls[5].rsplit(",", 3)[0] + ",,5|5|5_5|5|5,"),
        6,
        "utterance",
        "empty utterance",
    ),
    "no listener turn": (
        lambda ls: ls.__delitem__(6),
        6,
        "utterance_idx",
        "conversation 'hit:2_conv:4' has no listener turn (even utterance_idx) after a seeker turn",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ED))
def test_bad_ed_rows_name_file_row_and_column(tmp_path, case):
    edit, row, column, reason = BAD_ED[case]
    path = write_lines(tmp_path / "bad.csv", _bad_ed(edit))
    with pytest.raises(DataError) as info:
        read_csv(path)
    assert str(info.value) == f"{path} row {row}, column '{column}': {reason}"


def test_missing_column_is_named(tmp_path):
    path = write_lines(tmp_path / "bad.csv", [line.split(",", 1)[1] for line in ed_lines()])  # drop conv_id
    with pytest.raises(DataError) as info:
        read_csv(path, "ed")
    assert str(info.value) == f"{path} row 1, column 'conv_id': missing column 'conv_id' (needed by the ed format)"
    with pytest.raises(DataError, match="column 'conv_id': missing column"):
        read_csv(path)  # auto-detection names it too


def test_non_utf8_bytes_are_located(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("\n".join(ed_lines()).replace("motorway", "autopista caf\xe9").encode("latin-1"))
    with pytest.raises(DataError) as info:
        read_csv(path)
    assert str(info.value) == f"{path} row 6, column 'utterance': non-UTF-8 bytes (save the file as UTF-8)"


def test_bad_trace_rows_name_file_row_and_column(tmp_path):
    rows = [dict(TRACE_ROWS[0], emotion_id="9"), dict(TRACE_ROWS[1], gold_response="  ")]
    path = write_trace(tmp_path / "t.csv", rows)
    with pytest.raises(DataError) as info:
        read_csv(path)
    assert str(info.value) == f"{path} row 2, column 'emotion_id': unknown emotion label '9'"
    path = write_trace(tmp_path / "t2.csv", rows[1:])
    with pytest.raises(DataError, match=r"t2.csv row 2, column 'gold_response': empty utterance"):
        read_csv(path)


def test_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    path = write_lines(tmp_path / "bad.csv", _bad_ed(BAD_ED["unknown emotion"][0]))
    assert main(["dialogues", "--source", path, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = f"python -m data_prep dialogues: error: {path} row 4, column 'context': unknown emotion label 'elated'"
    assert err == [want]
    assert not (tmp_path / "out").exists()


def test_skip_invalid_writes_a_report_and_keeps_the_rest(tmp_path, capsys):
    lines = _bad_ed(BAD_ED["unknown emotion"][0])
    BAD_ED["no listener turn"][0](lines)
    path = write_lines(tmp_path / "bad.csv", lines)
    out = tmp_path / "out"
    assert main(["dialogues", "--source", path, "--out", str(out), "--skip-invalid"]) == 0
    assert "skipped 3 invalid" in capsys.readouterr().err
    report = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    assert [(r["row"], r["column"]) for r in report] == [(4, "context"), (2, "conv_id"), (6, "utterance_idx")]
    assert all(r["file"] == path and r["reason"] for r in report)
    kept = [d for split in SPLITS for d in load_split(out, split)]
    assert [d.conv_id for d in kept] == ["hit:3_conv:6"]  # the conversation with a bad row goes whole


# ---------------------------------------------------------------- saving and splitting


def test_cli_round_trip_equals_the_originals(tmp_path, capsys):
    out = tmp_path / "sample"
    assert main(["dialogues", "--source", str(SAMPLE_PATH), "--out", str(out), "--seed", "3"]) == 0
    assert "wrote" in capsys.readouterr().out
    splits = {name: load_split(out, name) for name in SPLITS}
    expected = split_dialogues(load_sample(), seed=3)
    assert {k: dumps(v) for k, v in splits.items()} == {k: dumps(v) for k, v in expected.items()}
    assert sorted(d.id for v in splits.values() for d in v) == sorted(d.id for d in load_sample())
    assert load_split(out, "valid") == splits["validation"]
    with pytest.raises(DataError, match="no split 'dev2'"):
        load_split(out, "dev2")


def test_a_limit_on_the_shipped_sample_sees_every_emotion_and_one_that_does_not_warns():
    """The sample is in a seeded, mixed order: any limit a user starts with trains and scores on every class."""
    from eval.quickstart import SAMPLE_SPLIT_RATIOS

    ratios = [float(r) for r in SAMPLE_SPLIT_RATIOS.split(",")]
    for splits in (split_dialogues(load_sample(), seed=0), split_dialogues(load_sample(), seed=0, ratios=ratios)):
        for name, limit in (("train", 24), ("test", 12)):
            assert limit_leaves_out(splits[name][:limit], splits[name], "x") is None, name
    train = split_dialogues(load_sample(), seed=0)["train"]
    angry = [d for d in train if d.emotion == "anger"]
    warning = limit_leaves_out(angry, train, "--limit 5 on the train split")
    assert warning == (
        "warning: --limit 5 on the train split leaves out 5 of the split's emotions "
        "(disgust, fear, happiness, sadness, surprise): a student trained or scored on it never sees them"
    )


def test_split_is_by_conversation_seeded_and_stratified():
    sample = load_sample()
    splits = split_dialogues(sample, seed=0)
    owner = defaultdict(set)
    for name, dialogues in splits.items():
        for d in dialogues:
            owner[d.conv_id].add(name)
    assert all(len(names) == 1 for names in owner.values())
    assert sum(len(v) for v in splits.values()) == len(sample)
    assert dumps(split_dialogues(sample, seed=0)["test"]) == dumps(splits["test"])
    assert [d.id for d in split_dialogues(sample, seed=1)["test"]] != [d.id for d in splits["test"]]
    for name in ("validation", "test"):  # stratified: every emotion reaches the small splits
        assert {d.emotion for d in splits[name]} == set(taxonomy.EKMAN)
    convs = Counter(name for names in owner.values() for name in names)
    assert convs["train"] > 0.7 * len(owner) and convs["test"] > 0.05 * len(owner)


def test_unsplit_trace_csv_gets_all_three_splits(tmp_path):
    rows = [dict(TRACE_ROWS[i % 2], prompt=f"situation {i}") for i in range(20)]
    out = tmp_path / "out"
    assert main(["dialogues", "--source", write_trace(tmp_path / "t.csv", rows), "--out", str(out)]) == 0
    sizes = {name: len(load_split(out, name)) for name in SPLITS}
    assert sum(sizes.values()) == 20 and all(sizes.values())


# ---------------------------------------------------------------- the shipped sample


def _sample_rows() -> list[dict]:
    with open(SAMPLE_PATH, encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_sample_meets_the_counts():
    rows = _sample_rows()
    convs = defaultdict(list)
    for row in rows:
        convs[row["conv_id"]].append(row)
    assert len(convs) >= 96
    fine = Counter(rows_[0]["context"] for rows_ in convs.values())
    assert set(fine) == set(taxonomy.ED_EMOTIONS)
    assert fine["disgusted"] >= 16
    ekman = Counter(taxonomy.to_ekman(label) for label in fine.elements())
    assert all(ekman[e] >= 16 for e in taxonomy.EKMAN), ekman
    lengths = Counter(len(rows_) for rows_ in convs.values())
    assert set(lengths) <= {2, 3, 4} and lengths[4] > len(convs) / 2
    for rows_ in convs.values():
        assert [int(r["utterance_idx"]) for r in rows_] == list(range(1, len(rows_) + 1))
        assert len({r["speaker_idx"] for r in rows_[0::2]} | {r["speaker_idx"] for r in rows_[1::2]}) == 2


def test_sample_text_is_escaped_and_varied():
    rows = _sample_rows()
    assert any("_comma_" in r["utterance"] for r in rows)
    assert all("," not in r["utterance"] + r["prompt"] for r in rows)
    utterances = [r["utterance"] for r in rows]
    assert len(set(utterances)) == len(utterances)
    prompts = {r["conv_id"]: r["prompt"] for r in rows}
    assert len(set(prompts.values())) == len(prompts)


def test_load_sample_gives_valid_dialogues():
    sample = load_sample()
    assert len({d.conv_id for d in sample}) >= 96
    assert all(d.turns[-1].speaker == "seeker" and d.gold_response for d in sample)
    assert all(taxonomy.to_ekman(d.emotion_fine) == d.emotion for d in sample)


# ---------------------------------------------------------------- the real data, when present


def test_missing_shared_data_skips_saying_where_and_fails_under_ci(tmp_path, monkeypatch):
    from conftest import require_shared_data

    missing = tmp_path / "shared" / "data" / "ed_ekman_dev.csv"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"real data not present at {re.escape(str(missing))}"):
        require_shared_data(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"not present at {re.escape(str(missing))} .CI=true"):
        require_shared_data(missing)
    missing.parent.mkdir(parents=True)
    missing.write_text("conv_id\n")
    assert require_shared_data(missing) == missing


def test_shared_ed_dev_file_loads_with_its_class_counts(shared_ed_csv):
    dialogues = load_dialogues(shared_ed_csv).splits["all"]
    assert len(dialogues) == 1263
    assert Counter(d.emotion for d in dialogues) == {
        "anger": 178,
        "fear": 155,
        "disgust": 40,
        "happiness": 472,
        "sadness": 313,
        "surprise": 105,
    }
    assert all(d.turns[-1].speaker == "seeker" for d in dialogues)
    assert len({d.id for d in dialogues}) == 1263


# ---------------------------------------------------------------- the index command


@pytest.mark.slow
def test_index_command_embeds_the_train_split(tmp_path, capsys):
    from data_prep.retrieval import ExemplarIndex

    dialogues_dir, index_dir = tmp_path / "dialogues", tmp_path / "index"
    assert main(["dialogues", "--source", str(SAMPLE_PATH), "--out", str(dialogues_dir)]) == 0
    assert main(["index", "--dialogues", str(dialogues_dir), "--split", "train", "--out", str(index_dir)]) == 0
    train = load_split(dialogues_dir, "train")
    index = ExemplarIndex.load(index_dir)
    assert index.dialogue_ids == {d.id for d in train}
    hits = index.query_dialogues(train[:1], emotions=[train[0].emotion], k=2, tau=0.0)[0]
    assert hits and all(h.conv_id != train[0].conv_id for h in hits)
    assert main(["index", "--dialogues", str(tmp_path / "missing"), "--out", str(index_dir)]) == 2
    assert "not a dialogues directory" in capsys.readouterr().err


# ---------------------------------------------------------------- duplicates, ids across files, long fields


def test_trace_duplicates_are_dropped_and_reported_so_no_conversation_spans_splits(tmp_path, capsys):
    rows = TRACE_ROWS + TRACE_ROWS + [TRACE_ROWS[0]]  # every row repeated
    path = write_trace(tmp_path / "dup.csv", rows)
    dialogues = read_csv(path)
    assert len(dialogues) == len(TRACE_ROWS) and len({d.conv_id for d in dialogues}) == len(TRACE_ROWS)
    assert capsys.readouterr().err.count("duplicate of row") == len(TRACE_ROWS) + 1
    skipped: list = []
    read_csv(path, skipped=skipped)
    assert [(r.row, r.reason.split(" (")[0]) for r in skipped][0] == (2 + len(TRACE_ROWS), "duplicate of row 2")


def test_ed_duplicate_rows_do_not_double_the_context(tmp_path):
    lines = ed_lines()
    path = write_lines(tmp_path / "train.csv", lines[:1] + lines[1:] + lines[1:3])  # two rows again
    clean = read_csv(write_lines(tmp_path / "clean.csv", lines))
    doubled = read_csv(path, skipped=(skipped := []))
    assert dumps(doubled) == dumps(clean) and len(skipped) == 2


def test_trace_ids_come_from_content_so_files_never_collide(tmp_path):
    first = read_csv(write_trace(tmp_path / "a.csv", TRACE_ROWS[:1]))
    second = read_csv(write_trace(tmp_path / "b.csv", TRACE_ROWS[1:2]))
    again = read_csv(write_trace(tmp_path / "c.csv", TRACE_ROWS[1:2] + TRACE_ROWS[:1]))
    assert first[0].conv_id != second[0].conv_id  # both were 'trace-0' when ids were row positions
    assert [d.conv_id for d in again] == [second[0].conv_id, first[0].conv_id]


def test_fields_over_the_csv_default_limit_load(tmp_path):
    long_reply = "so " * 70_000  # 210,000 characters: over csv's default 131,072
    row = {**TRACE_ROWS[0], "gold_response": long_reply}
    [dialogue] = read_csv(write_trace(tmp_path / "long.csv", [row]))
    assert dialogue.gold_response == long_reply.strip()
