"""The quality gates on a trace run: `distill inspect` writes quality.json, and `distill datasets --quality`
filters, reports or skips. The run is built by hand from the registry's own teacher prompts (exemplars
included), so the expected counts are exact and no model loads."""

from __future__ import annotations

from datasets import load_from_disk
from test_datasets import write_run
from test_quality import EXEMPLAR, trace_with_prompts

from data_prep.dialogues import Dialogue
from distill.__main__ import main as distill_main
from distill.datasets.dataset_card import read_build_record
from distill.datasets.options import QUALITY_DROP
from distill.pipeline.config import PipelineConfig
from distill.pipeline.trace import Trace, trace_key
from distill.quality import QUALITY_FILE, read_quality
from distill.roles.roles import CORE_ROLES, PROMPT_VERSION

COPIED = f"{EXEMPLAR.situation} {EXEMPLAR.response}"


def clean_outputs(d: Dialogue) -> dict[str, dict]:
    seeker = d.turns[-1].text
    return {
        "asi": {"reasoning": f"What happened: {d.situation}", "emotion": d.emotion},
        "cae": {"triggers": [" ".join(seeker.split()[:5])], "cause": d.situation, "category": "Loss & Failure"},
        "srp": {"reasoning": "They need warmth before anything else.", "strategy": "ER"},
        "ers": {"response": f"Oh, {d.situation.lower().rstrip('.')}? How are you holding up?"},
    }


def teacher_trace(d: Dialogue, outputs: dict[str, dict]) -> Trace:
    """A trace whose steps carry the registry's teacher prompts, keyed as `distill generate` keys it."""
    config = PipelineConfig().model_dump()
    return trace_with_prompts(d, outputs, trace_key(d, config, "local", "tiny", PROMPT_VERSION), config)


def quality_run(tiny_dialogues, run_dir) -> list[Trace]:
    """Eight traces: four clean, then a looping cae trigger, a copied exemplar, a parroted asi reasoning and an
    ers reply that echoes the seeker."""
    outputs = [clean_outputs(d) for d in tiny_dialogues]
    outputs[4]["cae"]["triggers"] = ["stress_relief_relief_relief_relief"]
    outputs[5]["ers"]["response"] = COPIED
    outputs[6]["asi"]["reasoning"] = (
        f"Judge from the context, the seeker's true emotion is {tiny_dialogues[6].emotion}."
    )
    outputs[7]["ers"]["response"] = tiny_dialogues[7].turns[-1].text
    traces = [teacher_trace(d, out) for d, out in zip(tiny_dialogues, outputs)]
    write_run(run_dir, traces)
    return traces


def test_inspect_writes_quality_json_with_counts_rates_and_an_example(tiny_dialogues, tmp_path, capsys):
    run_dir = tmp_path / "run"
    quality_run(tiny_dialogues, run_dir)
    assert distill_main(["inspect", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "quality checks" in err  # the progress bar over traces
    assert f"wrote {run_dir / QUALITY_FILE}" in err
    assert out.splitlines()[0].split() == ["role", "check", "failed", "rate", "example"]
    assert "quality (8 traces): asi parroted_rationale 1/8 (12.5%); cae loop 1/8 (12.5%);" in out
    report = read_quality(run_dir)
    roles = report["roles"]
    assert {role: r["failed"] for role, r in roles.items()} == {"asi": 1, "cae": 1, "srp": 0, "ers": 2}
    loop = roles["cae"]["checks"]["loop"]
    assert (loop["count"], loop["rate"]) == (1, 0.125)
    assert loop["example"]["dialogue_id"] == tiny_dialogues[4].id and loop["example"]["field"] == "triggers[0]"
    assert roles["cae"]["checks"]["ungrounded_trigger"]["count"] == 1
    assert roles["ers"]["checks"]["exemplar_copy"]["example"]["text"] == COPIED
    assert roles["ers"]["checks"]["echo"]["example"]["dialogue_id"] == tiny_dialogues[7].id
    assert roles["srp"]["checks"]["loop"] == {"count": 0, "rate": 0.0, "example": None}
    assert report["thresholds"]["loop_word_repeats"] == 4 and "why" in report["checks"]["loop"]

    # quality.json is part of the run: the dataset builder does not report it as a stray file
    assert distill_main(["datasets", "--traces", str(run_dir), "--out", str(tmp_path / "sft")]) == 0
    assert "not part of a trace run" not in capsys.readouterr().err


def test_inspect_thresholds_and_bad_input(tiny_dialogues, tmp_path, capsys):
    run_dir = tmp_path / "run"
    quality_run(tiny_dialogues, run_dir)
    loose = tmp_path / "loose.yaml"
    loose.write_text("loop_identifier_repeats: 5\nloop_word_repeats: 5\n", encoding="utf-8")
    assert distill_main(["inspect", str(run_dir), "--thresholds", str(loose), "--no-write"]) == 0
    assert "cae loop" not in capsys.readouterr().out and not (run_dir / QUALITY_FILE).exists()

    missing = tmp_path / "nope"
    assert distill_main(["inspect", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"python -m distill inspect: error: {missing}: no traces.jsonl; is this a trace run directory?"
    )
    loose.write_text("loop_word_repeats: many\n", encoding="utf-8")
    assert distill_main(["inspect", str(run_dir), "--thresholds", str(loose)]) == 2
    assert f"{loose}: field 'loop_word_repeats'" in capsys.readouterr().err


def build(run_dir, out, *flags) -> dict[str, dict]:
    """`distill datasets` over the run; each role's build record."""
    assert distill_main(["datasets", "--traces", str(run_dir), "--out", str(out), "--eval-fraction", "0", *flags]) == 0
    return {role: read_build_record(out / role) for role in CORE_ROLES}


def test_datasets_quality_filter_is_the_default_and_drops_failing_rows(tiny_dialogues, tmp_path, capsys):
    run_dir = tmp_path / "run"
    traces = quality_run(tiny_dialogues, run_dir)
    records = build(run_dir, tmp_path / "sft")
    counts = {role: r["counts"] for role, r in records.items()}
    # asi's parroted reasoning is counted, not dropped: its student learns the label alone
    assert {role: c["kept"] for role, c in counts.items()} == {"asi": 8, "cae": 7, "srp": 8, "ers": 6}
    assert counts["ers"]["dropped"] == {"failed a quality check": 2}
    assert counts["ers"]["quality"] == {
        "mode": "filter",
        "failed": {"echo": 1, "exemplar_copy": 1},
        "kept_failing": False,
        "unfiltered": [],
    }
    assert counts["cae"]["quality"]["failed"] == {"loop": 1, "ungrounded_trigger": 1}  # one row, two checks
    assert counts["asi"]["quality"]["failed"] == {"parroted_rationale": 1}
    assert records["ers"]["quality_thresholds"]["echo_share"] == 0.8
    kept = {row["key"] for row in load_from_disk(str(tmp_path / "sft" / "ers"))["train"]}
    assert kept == {t.key for t in traces} - {traces[5].key, traces[7].key}
    card = (tmp_path / "sft" / "ers" / "README.md").read_text(encoding="utf-8")
    assert "Mode `filter`: rows whose own `ers` output failed a check were dropped." in card
    assert "| `exemplar_copy` | 1 |" in card and "| `near_duplicate` | 0 |" in card
    assert "| failed a quality check | 2 |" in card
    err = capsys.readouterr().err
    assert "ers: read 8, dropped [failed a quality check 2], kept 6 (train 6, validation 0); " in err
    assert "quality filter [echo 1, exemplar_copy 1]" in err


def test_a_parroted_reasoning_drops_its_row_only_when_the_student_learns_the_reasoning(tiny_dialogues, tmp_path):
    run_dir = tmp_path / "run"
    quality_run(tiny_dialogues, run_dir)
    asi = build(run_dir, tmp_path / "sft", "--roles", "asi", "--rationale", "teacher")["asi"]["counts"]
    assert asi["quality"]["failed"] == {"parroted_rationale": 1}
    assert asi["dropped"]["failed a quality check"] == 1  # its reasoning is the rationale twin's target


def test_a_check_every_row_fails_is_not_filtered_on_and_the_others_still_are(tiny_dialogues, tmp_path, capsys):
    """The embedded teacher's cae triggers are never spans of the seeker's turns: filtering on that check would
    leave no cae dataset, so it is set aside (loudly) and the looping rows are still dropped."""
    outputs = [clean_outputs(d) for d in tiny_dialogues]
    for out in outputs:
        out["cae"]["triggers"] = ["disgust"]
    outputs[3]["cae"]["cause"] = "stress_relief_relief_relief_relief_relief"
    write_run(tmp_path / "run", [teacher_trace(d, out) for d, out in zip(tiny_dialogues, outputs)])
    records = build(tmp_path / "run", tmp_path / "sft")
    cae = records["cae"]["counts"]
    assert cae["kept"] == 7 and cae["dropped"] == {QUALITY_DROP: 1}
    assert cae["quality"] == {
        "mode": "filter",
        "failed": {"loop": 1, "ungrounded_trigger": 8},
        "kept_failing": False,
        "unfiltered": ["ungrounded_trigger"],
    }
    assert records["asi"]["counts"]["quality"]["unfiltered"] == []
    assert "filtering on ungrounded_trigger left NO ROWS TO TRAIN ON: not filtered on it" in capsys.readouterr().err
    card = (tmp_path / "sft" / "cae" / "README.md").read_text(encoding="utf-8")
    assert "except on `ungrounded_trigger`: filtering on it left no rows to train on" in card


def test_a_check_is_set_aside_by_the_roles_own_failures_alone(tiny_dialogues, tmp_path):
    """Every cae row fails ungrounded_trigger and one ers reply echoes the seeker: what every cae row fails is
    read from cae's rows alone, so ers's echo does not stop ungrounded_trigger being set aside for cae."""
    outputs = [clean_outputs(d) for d in tiny_dialogues]
    for out in outputs:
        out["cae"]["triggers"] = ["disgust"]
    outputs[3]["cae"]["cause"] = "stress_relief_relief_relief_relief_relief"
    outputs[7]["ers"]["response"] = tiny_dialogues[7].turns[-1].text
    write_run(tmp_path / "run", [teacher_trace(d, out) for d, out in zip(tiny_dialogues, outputs)])
    records = build(tmp_path / "run", tmp_path / "sft")
    cae, ers = records["cae"]["counts"], records["ers"]["counts"]
    assert cae["kept"] == 7 and cae["dropped"] == {QUALITY_DROP: 1}  # the looping row only
    assert cae["quality"]["unfiltered"] == ["ungrounded_trigger"] and cae["quality"]["kept_failing"] is False
    assert ers["kept"] == 7 and ers["quality"]["failed"] == {"echo": 1} and ers["quality"]["unfiltered"] == []


def test_a_check_is_set_aside_when_the_rows_that_pass_it_are_all_held_out(tiny_dialogues, tmp_path, capsys):
    """Seven cae rows have ungrounded triggers and the one that passes is in the held-out conversation: the
    filter leaves rows, but none to train on (an int8 embedded teacher's quickstart stopped there), so the
    check is set aside as when every row fails it."""
    from distill.datasets.sft_data import validation_conv_ids

    held_out = validation_conv_ids([d.conv_id for d in tiny_dialogues], 0.1, 0)
    outputs = [clean_outputs(d) for d in tiny_dialogues]
    for d, out in zip(tiny_dialogues, outputs):
        if d.conv_id not in held_out:
            out["cae"]["triggers"] = ["disgust"]
    write_run(tmp_path / "run", [teacher_trace(d, out) for d, out in zip(tiny_dialogues, outputs)])
    cae = build(tmp_path / "run", tmp_path / "sft", "--roles", "cae", "--eval-fraction", "0.1")["cae"]["counts"]
    assert len(held_out) == 1 and cae["kept"] == 8 and cae["rows"]["train"] == 7
    assert cae["quality"]["unfiltered"] == ["ungrounded_trigger"] and cae["quality"]["kept_failing"] is False
    assert "filtering on ungrounded_trigger left NO ROWS TO TRAIN ON" in capsys.readouterr().err


def test_when_no_check_can_be_set_aside_the_role_fails_unless_its_rows_are_asked_for(tiny_dialogues, tmp_path, capsys):
    """Half the cae rows loop, the other half have ungrounded triggers: no check fails every row, so none can
    be set aside, and filtering would leave nothing: the role fails in one line naming the checks and counts,
    and nothing is saved; with --keep-unfiltered-when-empty the rows are kept, and the build and card say so."""
    outputs = [clean_outputs(d) for d in tiny_dialogues]
    for i, out in enumerate(outputs):
        if i % 2:
            out["cae"]["triggers"] = ["disgust"]
        else:
            out["cae"]["cause"] = "stress_relief_relief_relief_relief_relief"
    run = tmp_path / "run"
    write_run(run, [teacher_trace(d, out) for d, out in zip(tiny_dialogues, outputs)])
    argv = ["datasets", "--traces", str(run), "--out", str(tmp_path / "sft"), "--eval-fraction", "0", "--roles", "cae"]
    assert distill_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error") == 1 and "Traceback" not in err and not (tmp_path / "sft").exists()
    assert (
        f"error: {run}: role cae: the quality filter leaves no rows to train on: 8 of 8 rows fail a check "
        "(loop 4, ungrounded_trigger 4); nothing saved:" in err
    )
    assert "--keep-unfiltered-when-empty" in err
    cae = build(run, tmp_path / "sft", "--roles", "cae", "--keep-unfiltered-when-empty")["cae"]["counts"]
    assert cae["kept"] == 8 and cae["quality"]["kept_failing"] is True and cae["quality"]["unfiltered"] == []
    assert "filtering on a check left NO ROWS TO TRAIN ON: every row kept" in capsys.readouterr().err
    assert "kept and counted" not in (tmp_path / "sft" / "cae" / "README.md").read_text(encoding="utf-8")
    card = (tmp_path / "sft" / "cae" / "README.md").read_text(encoding="utf-8")
    assert "filtering left no rows to train on, so all were kept (`--keep-unfiltered-when-empty`)" in card


def test_a_thresholds_file_that_fails_every_row_in_two_checks_fails_the_role(tiny_dialogues, tmp_path, capsys):
    """Every loop rule at its minimum: every cae cause now loops, beside the ungrounded triggers every row has.
    Two checks that every row fails are not one teacher's blind spot to set aside: the role fails, naming the
    file, the role, the checks and their counts, and no role is saved."""
    outputs = [clean_outputs(d) for d in tiny_dialogues]
    for out in outputs:
        out["cae"]["triggers"] = ["disgust"]
        out["cae"]["cause"] = "I was so so tired."
    run = tmp_path / "run"
    write_run(run, [teacher_trace(d, out) for d, out in zip(tiny_dialogues, outputs)])
    strict = tmp_path / "loops.yaml"
    strict.write_text(
        "loop_word_repeats: 2\nloop_phrase_repeats: 2\nloop_identifier_repeats: 2\nloop_char_repeats: 3\n"
        "loop_chunk_repeats: 3\nloop_compression_ratio: 1.01\nloop_compression_min_chars: 1\n",
        encoding="utf-8",
    )
    argv = ["datasets", "--traces", str(run), "--out", str(tmp_path / "sft"), "--quality-thresholds", str(strict)]
    assert distill_main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and f"error: {run}: role cae: " in err[0] and "(loop 8, ungrounded_trigger 8)" in err[0]
    assert f"loosen the thresholds of {strict}" in err[0] and not (tmp_path / "sft").exists()


def test_datasets_quality_report_keeps_and_counts(tiny_dialogues, tmp_path, capsys):
    run_dir = tmp_path / "run"
    quality_run(tiny_dialogues, run_dir)
    records = build(run_dir, tmp_path / "sft", "--quality", "report")
    assert all(r["counts"]["kept"] == 8 and r["counts"]["dropped"] == {} for r in records.values())
    assert records["ers"]["counts"]["quality"] == {
        "mode": "report",
        "failed": {"echo": 1, "exemplar_copy": 1},
        "kept_failing": False,
        "unfiltered": [],
    }
    card = (tmp_path / "sft" / "cae" / "README.md").read_text(encoding="utf-8")
    assert "Mode `report`: rows whose own `cae` output failed a check were kept and counted." in card
    assert "| `loop` | 1 |" in card
    assert "quality report [loop 1, ungrounded_trigger 1]" in capsys.readouterr().err


def test_datasets_quality_off_runs_no_check(tiny_dialogues, tmp_path, capsys):
    run_dir = tmp_path / "run"
    quality_run(tiny_dialogues, run_dir)
    records = build(run_dir, tmp_path / "sft", "--quality", "off")
    assert all(r["counts"]["kept"] == 8 for r in records.values())
    assert all(
        r["counts"]["quality"] == {"mode": "off", "failed": {}, "kept_failing": False, "unfiltered": []}
        for r in records.values()
    )
    assert "Not run: `--quality off`" in (tmp_path / "sft" / "asi" / "README.md").read_text(encoding="utf-8")
    assert "quality off" in capsys.readouterr().err


def test_datasets_quality_leaves_a_gold_ers_target_alone_and_reads_a_thresholds_file(tiny_dialogues, tmp_path):
    run_dir = tmp_path / "run"
    quality_run(tiny_dialogues, run_dir)
    loose = tmp_path / "loose.yaml"
    # a field set to its default is no change: the options record only exemplar_copy_share
    loose.write_text("rationale_min_own_words: 1\nexemplar_copy_share: 1.0\n", encoding="utf-8")
    records = build(run_dir, tmp_path / "sft", "--ers-target", "gold", "--quality-thresholds", str(loose))
    # the human reply is the target: the teacher's copied and echoed replies are not in the rows
    assert records["ers"]["counts"]["kept"] == 8 and records["ers"]["counts"]["quality"]["mode"] == "off"
    assert records["asi"]["counts"]["quality"]["failed"] == {"parroted_rationale": 1}
    assert records["asi"]["options"]["quality_thresholds"] == {"exemplar_copy_share": 1.0}
    assert records["asi"]["quality_thresholds"]["exemplar_copy_share"] == 1.0


def test_inspect_and_datasets_catch_a_reference_reply_already_in_its_dialogue(tiny_dialogues, tmp_path, capsys):
    """A generated run on dialogues one of which runs on into its own gold reply (the responder's last turn):
    `leaked_reference` flags that trace's ers, inspect reports it, and the ers dataset drops the row."""
    from data_prep.dialogues import Turn

    d = tiny_dialogues[3]
    assert d.gold_response
    leaked = d.model_copy(update={"turns": [*d.turns, Turn(speaker="responder", text=d.gold_response.lower())]})
    dialogues = [*tiny_dialogues[:3], leaked, *tiny_dialogues[4:]]
    run_dir = tmp_path / "run"
    write_run(run_dir, [teacher_trace(x, clean_outputs(x)) for x in dialogues])
    assert distill_main(["inspect", str(run_dir)]) == 0
    assert "ers leaked_reference 1/8 (12.5%)" in capsys.readouterr().out
    check = read_quality(run_dir)["roles"]["ers"]["checks"]["leaked_reference"]
    assert check["count"] == 1 and check["example"]["dialogue_id"] == d.id and check["example"]["field"] == "response"
    ers = build(run_dir, tmp_path / "sft", "--roles", "ers")["ers"]["counts"]
    assert ers["kept"] == 7 and ers["quality"]["failed"] == {"leaked_reference": 1}
