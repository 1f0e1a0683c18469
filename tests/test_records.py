"""Results quoted in the docs come from records (eval/records/curve.py): a record is written from a curve run, rendered
by code into the docs' record blocks (eval/records/blocks.py), and a block that differs from its record's rendering
fails here."""

from __future__ import annotations

import json

import pytest

from eval.curve.target import target_rows
from eval.paper import load_paper_reference
from eval.records.blocks import doc_files, render_blocks, stale_blocks
from eval.records.curve import RecordError, record_from_curve, rejudged, render_record


def _stat(value, half=0.05):
    return {"value": value, "ci_low": value - half, "ci_high": value + half, "n": 4}


def _row(name, ratio, i_acc, bertscore, reply_tokens, seconds=0.8):
    return {
        "name": name,
        "human_ratio": {key: _stat(ratio) for key in ("dist1", "dist2", "ead1", "ead2")},
        "i_acc": {"ekman6": {"accuracy": _stat(i_acc)}},
        "bertscore": {"f1": _stat(bertscore, 0.01)},
        "cost": {"tokens_per_role": {"ers": {"completion_per_dialogue": reply_tokens}}, "latency_s": _stat(seconds)},
    }


def _pair(metric, diff, half, reading="higher is better"):
    """A paired row at the largest point: student-hot − student-traces on `metric`."""
    low, high = round(diff - half, 4), round(diff + half, 4)
    return {"n": 400, "pair": ["student-hot", "student-traces"], "metric": metric, "diff": diff, "ci_low": low,
            "ci_high": high, "dialogues": 4, "reading": reading, "meaning": "lever"}  # fmt: skip


def _curve(hot=(0.97, 0.29), traces=(0.6, 0.30), half=0.01, relevance=None, dialogue_ppl=None):
    """Two students against TRACE's GPT-4o row (Dist/EAD shares 0.81-0.91, I-ACC 0.443): by default student-hot
    (its shares 0.97 [0.92, 1.02], BERTScore 0.01 [0, 0.02] below student-traces, paired) meets the target,
    student-traces does not. `half`: the half-width of the paired BERTScore difference's interval; `relevance` and
    `dialogue_ppl`: (student-traces's, student-hot's, the half-width of their paired difference), or not measured."""
    own = {"asi": {"target": "gold label"}, "ers": {"target": "human reply"}}
    lent = {role: {**source, "adapter": "student-traces's"} for role, source in own.items()}
    systems = [
        _row("student-traces", traces[0], 0.6, traces[1], 20.0),
        _row("student-hot", hot[0], 0.6, hot[1], 21.5, 1.7),
    ]
    largest = [_pair("bertscore_f1", round(hot[1] - traces[1], 4), half)]
    if relevance:
        for system, value in zip(systems, relevance):
            system["relevance"] = _stat(value, 0.02)
        largest.append(_pair("relevance", round(relevance[1] - relevance[0], 4), relevance[2]))
    if dialogue_ppl:
        for system, value in zip(systems, dialogue_ppl):
            system["dialogue_ppl"] = _stat(value, 2.0)
        rise = round(dialogue_ppl[1] - dialogue_ppl[0], 4)
        largest.append(_pair("dialogue_ppl", rise, dialogue_ppl[2], "lower is better"))
    against = {"n": 400, "systems": systems, "paper": load_paper_reference("trace-table1")}
    return {
        "test": {"dialogues": "d", "split": "test", "n": 4},
        "sources": {"student-traces": own, "student-hot": lent},
        "config": {"variants": [{"name": "hot", "like": "traces", "decoding": {"temperatures": {"ers": 1.0}}}]},
        "against_paper": against,
        "paired": [
            *largest,
            {"n": 20, "pair": ["student-hot", "student-traces"], "metric": "i_acc", "diff": 0.0, "ci_low": 0.0,
             "ci_high": 0.0, "dialogues": 4, "reading": "higher is better", "meaning": "a smaller point"},
        ],
        "target": target_rows(against, {"student-hot": "student-traces"}, largest),
    }  # fmt: skip


def test_a_record_renders_every_system_beside_the_paper_with_its_cis_and_its_provenance():
    record = record_from_curve(_curve(), "demo", "bash run.sh", "abc1234", "2-core test CPU")
    assert json.loads(json.dumps(record)) == record  # plain JSON
    lines = render_record(record)
    assert max(len(line) for line in lines if not line.startswith("|")) <= 120  # prose wrapped to the docs' width
    text = " ".join(lines)
    assert "| student-traces | TRACE's (T 0.5) | 0.600 [0.550, 0.650] |" in text
    assert "| student-hot | T 1.0 | 0.970 [0.920, 1.020] |" in text and "| 0.290 [0.280, 0.300] | 21.5 | 1.70 |" in text
    assert "| GPT-4o TRACE (paper, Table 1) * | – | 0.91 | 0.81 | 0.81 | 0.84 | 0.443 | – | – | – |" in text
    assert "What student-traces's adapters learned, from whom: asi: gold label; ers: human reply." in text
    assert "| student-hot − student-traces | BERTScore F | -0.010 [-0.020, 0.000] | higher is better |" in text
    assert "I-ACC (6) | 0.00" not in text  # the largest point's questions only
    assert "met by student-hot." in text and "Trained on 400 train conversations, scored on 4 test" in text
    assert "Run at commit `abc1234` on " in text and "2-core test CPU: `bash run.sh`" in text
    with pytest.raises(RecordError, match="missing commit"):
        render_record({k: v for k, v in record.items() if k != "commit"})


def test_the_verdict_names_what_the_closest_system_misses():
    record = record_from_curve(_curve(hot=(0.97, 0.25)), "demo", "bash run.sh", "abc1234", "test CPU")
    assert "not met; student-hot beats every figure, but its BERTScore falls 0.050 [0.040, 0.060]." in " ".join(
        render_record(record)
    )
    # both miss every Dist/EAD share: the smaller fall is closer
    record = record_from_curve(_curve(hot=(0.6, 0.25)), "demo", "bash run.sh", "abc1234", "test CPU")
    assert "the closest, student-traces, falls short on Dist-1 / human, Dist-2 / human" in " ".join(
        render_record(record)
    )


def test_the_verdict_is_recomputed_from_the_figures_by_the_records_own_rule():
    """A stored `met` or `beats` the figures do not give is an error; the BERTScore rule is the record's."""
    record = record_from_curve(_curve(), "demo", "bash run.sh", "abc1234", "test CPU")
    assert record["target_bertscore_drop"] == 0.02 and "BERTScore falling at most 0.02 below" in " ".join(
        render_record(record)
    )
    typed = json.loads(json.dumps(record))
    typed["target"][0]["met"] = True  # student-traces, which beats no share
    with pytest.raises(RecordError, match="target row student-traces: stored met True, its figures give False"):
        render_record(typed)
    typed = json.loads(json.dumps(record))
    typed["target"][1]["beats"]["Dist-1 / human"] = False
    with pytest.raises(RecordError, match="stored beats"):
        render_record(typed)
    stricter = {**record, "target_bertscore_drop": 0.005}  # student-hot falls 0.01: not met under this rule
    with pytest.raises(RecordError, match="target row student-hot: stored met True, its figures give False"):
        render_record(stricter)
    stricter["target"] = [{**t, "met": False, "bertscore_held": t["system"] != "student-hot"} for t in record["target"]]
    text = " ".join(render_record(stricter))
    assert "BERTScore falling at most 0.005 below" in text and "not met; student-hot beats every figure" in text
    with pytest.raises(RecordError, match="a target without the rule"):
        render_record({k: v for k, v in record.items() if k != "target_bertscore_drop"})


def test_the_bertscore_fall_is_judged_on_its_whole_paired_interval():
    """A fall of 0.015 at its point value meets the target only when its paired interval stays within 0.02 too."""
    reaching = record_from_curve(_curve(hot=(0.97, 0.285), half=0.01), "demo", "run", "abc", "cpu")
    hot = {t["system"]: t for t in reaching["target"]}["student-hot"]
    assert hot["bertscore_drop"] == pytest.approx(0.015) and hot["bertscore_drop_ci"] == pytest.approx([0.005, 0.025])
    assert hot["met"] is False and hot["bertscore_held"] is False
    assert "but its BERTScore falls 0.015 [0.005, 0.025]." in " ".join(render_record(reaching))
    within = record_from_curve(_curve(hot=(0.97, 0.285), half=0.004), "demo", "run", "abc", "cpu")
    assert {t["system"]: t["met"] for t in within["target"]} == {"student-traces": False, "student-hot": True}
    assert "met by student-hot." in " ".join(render_record(within))


def test_a_target_judged_by_the_point_rule_is_refused_until_it_is_judged_again():
    """A stored row without the fall's interval was judged on the point value alone; the renderer refuses it
    rather than show a verdict the current rule may not give, and `rejudged` judges it from the record's own
    figures and paired falls."""
    record = record_from_curve(_curve(hot=(0.97, 0.285), half=0.01), "demo", "run", "abc", "cpu")
    old = json.loads(json.dumps(record))
    for t in old["target"]:  # as records were written before the interval rule: met by the point value 0.015
        t["bertscore_drop"] = 0.015 if t["system"] == "student-hot" else 0.0
        t["met"] = t["system"] == "student-hot"
        for key in ("bertscore_drop_ci", "bertscore_held"):
            del t[key]
    with pytest.raises(RecordError, match="target row student-traces has no bertscore_drop_ci: judged by an older"):
        render_record(old)
    again = rejudged(old)
    assert again["target"] == record["target"] and "not met; student-hot beats every figure" in " ".join(
        render_record(again)
    )


def test_the_coherence_guard_judges_a_record_that_carries_it_and_is_named_unmeasured_in_one_that_does_not():
    """Relevance to the seeker's last turn is held to its allowance over its whole paired interval, like BERTScore;
    a record without it (made before the guard) renders without its column and says it was not measured."""
    held = record_from_curve(_curve(relevance=(0.40, 0.39, 0.005)), "demo", "run", "abc", "cpu")
    assert held["target_relevance_drop"] == 0.02 and {t["system"]: t["met"] for t in held["target"]}["student-hot"]
    text = " ".join(render_record(held))
    assert "relevance ↑" in text and "| 0.390 [0.370, 0.410] |" in text and "met by student-hot." in text
    assert "BERTScore falling at most 0.02 and relevance at most 0.02 below" in text
    assert "Not measured in this run: PPL given the dialogue" in text and "relevance (the coherence" not in text
    falls = record_from_curve(_curve(relevance=(0.40, 0.385, 0.01)), "demo", "run", "abc", "cpu")
    hot = {t["system"]: t for t in falls["target"]}["student-hot"]
    assert hot["relevance_drop_ci"] == pytest.approx([0.005, 0.025]) and not hot["met"] and hot["bertscore_held"]
    assert "but its relevance falls 0.015 [0.005, 0.025]." in " ".join(render_record(falls))
    typed = json.loads(json.dumps(falls))
    typed["target"][1]["met"], typed["target"][1]["relevance_held"] = True, True
    with pytest.raises(RecordError, match="target row student-hot: stored met True, its figures give False"):
        render_record(typed)
    with pytest.raises(RecordError, match=r"a target without the rule it was judged by \(target_relevance_drop\)"):
        render_record({k: v for k, v in falls.items() if k != "target_relevance_drop"})
    unmeasured = record_from_curve(_curve(), "demo", "run", "abc", "cpu")
    for t in unmeasured["target"]:  # as a record made before the guard holds its rows
        for key in ("relevance_drop", "relevance_drop_ci", "relevance_held"):
            del t[key]
    text = " ".join(render_record({k: v for k, v in unmeasured.items() if k != "target_relevance_drop"}))
    assert (
        "relevance ↑" not in text
        and "met by student-hot. Not measured in this run: relevance (the coherence guard), PPL given the dialogue"
        in text
    )


def test_ppl_given_the_dialogue_is_a_guard_that_must_not_rise_past_its_allowance():
    """The third guard, where lower is better: student-hot beats every figure and holds BERTScore and relevance,
    but its PPL given the dialogue rises past the allowance over its whole paired interval: not met. Within the
    allowance it is met; a record made before the guard (its rows without it) renders it as not measured."""
    rises = record_from_curve(_curve(relevance=(0.40, 0.39, 0.005), dialogue_ppl=(25.0, 28.0, 0.5)), *"drac")
    hot = {t["system"]: t for t in rises["target"]}["student-hot"]
    assert hot["bertscore_held"] and hot["relevance_held"] and all(hot["beats"].values())
    assert hot["dialogue_ppl_drop"] == pytest.approx(3.0) and hot["dialogue_ppl_drop_ci"] == pytest.approx([2.5, 3.5])
    assert hot["dialogue_ppl_held"] is False and not hot["met"]
    text = " ".join(" ".join(render_record(rises)).split())
    allowance = rises["target_dialogue_ppl_drop"]
    assert f"relevance at most 0.02 below the same student at TRACE's decoding and PPL given the dialogue rising at " \
        f"most {allowance} above it" in text  # fmt: skip
    assert "not met; student-hot beats every figure, but its PPL given the dialogue rises 3.00 [2.50, 3.50]." in text
    assert "PPL given the dialogue ↓" in text and "Not measured" not in text
    # a fall of PPL (the setting better than its lender) is a negative rise: held
    falls = record_from_curve(_curve(relevance=(0.40, 0.39, 0.005), dialogue_ppl=(25.0, 24.0, 0.5)), *"drac")
    hot = {t["system"]: t for t in falls["target"]}["student-hot"]
    assert hot["dialogue_ppl_drop_ci"] == pytest.approx([-1.5, -0.5]) and hot["dialogue_ppl_held"] and hot["met"]
    assert "met by student-hot." in " ".join(render_record(falls))
    old = record_from_curve(_curve(relevance=(0.40, 0.39, 0.005)), *"drac")
    for t in old["target"]:  # as a record made before the guard holds its rows and its rule
        for key in ("dialogue_ppl_drop", "dialogue_ppl_drop_ci", "dialogue_ppl_held"):
            del t[key]
    del old["target_dialogue_ppl_drop"]
    text = " ".join(" ".join(render_record(old)).split())
    assert "PPL given the dialogue ↓" not in text and "relevance ↑" in text
    assert "met by student-hot. Not measured in this run: PPL given the dialogue (the untuned base's coherence " \
        "guard)." in text  # fmt: skip


def test_a_marker_line_with_a_trailing_space_or_crlf_is_checked_and_a_stray_one_is_an_error(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "demo.json").write_text(json.dumps(record_from_curve(_curve(), "demo", "bash run.sh", "abc", "cpu")))
    doc = tmp_path / "doc.md"
    doc.write_text("# Results\n\n<!-- record: demo -->  \nold text\n<!-- /record -->\n")
    assert stale_blocks([doc], folder), "a marker with trailing spaces was skipped"
    doc.write_text(render_blocks(doc.read_text(), folder))
    assert stale_blocks([doc], folder) == [] and "| student-hot |" in doc.read_text()
    crlf = "<!-- record: demo -->\r\nold text\r\n<!-- /record -->\r\n"
    rendered = render_blocks(crlf, folder)
    assert "old text" not in rendered and "| student-hot |" in rendered
    assert all(line.endswith("\r") for line in rendered.split("\n")[:-1])  # its own line ending kept
    assert render_blocks(rendered, folder) == rendered
    doc.write_text("intro\n<!-- record: demo\nold\n<!-- /record -->\n")  # a marker that opens no block
    with pytest.raises(RecordError, match=r"doc\.md:2: a record marker that opens no block"):
        stale_blocks([doc], folder)


def test_a_block_is_rendered_from_its_record_and_an_edited_figure_is_caught(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    record = record_from_curve(_curve(), "demo", "bash run.sh", "abc1234", "cpu")
    (folder / "demo.json").write_text(json.dumps(record))
    doc = tmp_path / "doc.md"
    doc.write_text("# Results\n\n<!-- record: demo -->\nold text\n<!-- /record -->\n\nafter\n")
    assert stale_blocks([doc], folder) and "doc.md:4: differs from its record" in stale_blocks([doc], folder)[0]
    doc.write_text(render_blocks(doc.read_text(), folder))
    assert stale_blocks([doc], folder) == [] and doc.read_text().endswith("<!-- /record -->\n\nafter\n")
    doc.write_text(doc.read_text().replace("0.970 [0.920, 1.020]", "0.990 [0.920, 1.020]", 1))  # a figure typed over
    assert len(stale_blocks([doc], folder)) == 1
    doc.write_text("<!-- record: demo systems=student-hot -->\n<!-- /record -->\n")  # one system and the paper
    shown = render_blocks(doc.read_text(), folder)
    assert "| student-hot |" in shown and "| student-traces |" not in shown and "GPT-4o TRACE" in shown
    doc.write_text("<!-- record: demo systems=student-cold -->\n<!-- /record -->\n")
    with pytest.raises(RecordError, match="no system student-cold"):
        stale_blocks([doc], folder)
    doc.write_text("<!-- record: nosuch -->\n<!-- /record -->\n")
    with pytest.raises(RecordError, match="no such record"):
        stale_blocks([doc], folder)


def test_every_record_block_in_the_docs_matches_its_record():
    """The shipped README and docs: a figure changed by hand inside a record block fails here."""
    assert stale_blocks(doc_files()) == []


# --- a record of compare reports (ESCoT's curve) ---------------------------------------------------


def _compare_report(point_shift: float) -> dict:
    def row(name, bertscore, accuracy=None, loop=0.1):
        figures = {"name": name, "bertscore": {"f1": _stat(bertscore, 0.01)},
                   "reply_checks": {"checked": 4, "rates": {"loop": loop, "echo": 0.0, "non_reply": 0.0}},
                   "cost": {"latency_s": _stat(1.5), "prompt_tokens_per_dialogue": 300.0,
                            "completion_tokens_per_dialogue": 50.0}}  # fmt: skip
        if accuracy is not None:
            figures["label_accuracy"] = {"accuracy": _stat(accuracy), "majority": {"rate": 0.185}}
        return figures

    chatgpt = row("chatgpt", 1.0, 1.0)
    teacher = {"model": "gpt-3.5-turbo", "encoding": "cl100k_base", "prompt_tokens_per_dialogue": 1500.0,
               "completion_tokens_per_dialogue": 130.0, "usd_per_1k": 0.945}  # fmt: skip
    chatgpt["cost"] = {"latency_s": _stat(0.0), "teacher_estimate": teacher}

    def paired(first, second, metric, diff):
        return {"pair": [first, second], "metric": metric, "diff": diff, "ci_low": diff - 0.02,
                "ci_high": diff + 0.01, "n": 4, "p_holm": 0.5, "survives_holm": False,
                "reading": "higher is better"}  # fmt: skip

    return {
        "test": {"dialogues": "runs/escot/imports/test", "split": "test", "n": 4, "ids": ["0", "1", "2", "3"]},
        "settings": {"reference_system": "chatgpt"},
        "config": {"systems": [{"name": name, "about": f"{name}'s recipe"}
                               for name in ("chatgpt", "traces", "direct", "joint")]},
        "systems": [chatgpt, row("traces", 0.30 + point_shift, 0.4), row("direct", 0.29), row("joint", 0.31, 0.3)],
        "paired": [paired("traces", "direct", "bertscore_f1", 0.01), paired("direct", "joint", "bertscore_f1", -0.02),
                   paired("traces", "joint", "label_accuracy", 0.1), paired("traces", "direct", "rouge_l", 0.03),
                   paired("traces", "direct", "relevance", -0.04)],
    }  # fmt: skip


def test_a_record_of_compare_reports_states_the_pairs_as_asked(tmp_path, capsys):
    from eval.__main__ import main

    reports = {}
    for point, shift in (("150", 0.0), ("400", 0.01)):
        path = tmp_path / f"{point}.json"
        path.write_text(json.dumps(_compare_report(shift)))
        reports[point] = path
    stages = tmp_path / "stages"
    stages.mkdir()
    for n, (stage, seconds) in enumerate((("import-test", 3.0), ("150-traces-train", 900.0))):
        (stages / f"{stage}.json").write_text(json.dumps({"stage": stage, "command": ["x"], "seconds": seconds,
                                                          "peak_rss_mb": 800, "finished": 100 + n}))  # fmt: skip
    argv = ["records", "write", "--compare", *(f"{p}={path}" for p, path in reports.items()), "--stages", str(stages),
            "--name", "escot-test", "--command", "python benchmarks/escot_curve.py", "--out", str(tmp_path / "rec"),
            "--commit", "abc1234", "--machine", "2-core test"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((tmp_path / "rec" / "escot-test.json").read_text())
    assert record["kind"] == "compare" and [p["point"] for p in record["points"]] == ["150", "400"]
    pairs = {(tuple(p["pair"]), p["metric"]): p for p in record["points"][0]["paired"]}
    # the report asked direct − joint; the record states joint − direct, its interval turned round
    assert pairs[("joint", "direct"), "bertscore_f1"] | {} == {"pair": ["joint", "direct"], "metric": "bertscore_f1",
        "diff": 0.02, "ci_low": 0.01, "ci_high": 0.04, "n": 4, "p_holm": 0.5, "survives_holm": False}  # fmt: skip
    assert set(pairs) == {
        (("traces", "direct"), "bertscore_f1"),
        (("joint", "direct"), "bertscore_f1"),
        (("traces", "joint"), "label_accuracy"),
        (("traces", "direct"), "relevance"),
    }  # ROUGE-L is not one the record states; fmt: skip
    traces = record["points"][1]["systems"][1]
    assert (
        traces["figures"]["bertscore.f1"]["value"] == pytest.approx(0.31)
        and traces["figures"]["reply_checks.rates.loop"] == 0.1
    )
    lines = render_record(record)
    text = "\n".join(lines)
    assert "| joint − direct | BERTScore F | 0.020 [0.010, 0.040] | 4 | 0.500 | no |" in text
    assert "0.94 (gpt-3.5-turbo, est.)" in text and "| 150-traces-train | 900 | 800 |" in text
    assert "**150 train dialogues** (majority class 0.185):" in text and "`abc1234`" in text
    summary = " ".join(render_blocks("<!-- record: escot-test summary -->\n<!-- /record -->", tmp_path / "rec").split())
    # the README's line: the largest point only, on BERTScore and strategy accuracy (the docs page has the rest)
    assert "400 train dialogues: traces − direct BERTScore F 0.010 [-0.010, 0.020] (no finding: CI spans 0);" in summary
    # in words: who won a pair whose CI leaves 0 out, and the labels beside the majority class (the reference aside)
    assert "joint − direct BERTScore F 0.020 [0.010, 0.040] (no finding after Holm)" in summary
    assert (
        "Strategy accuracy at 400: traces 0.400, joint 0.300; the majority class 0.185: traces, joint above it"
        in summary
    )
    assert "150 train dialogues" not in summary and "relevance" not in summary
    assert main([*argv[:3], "150", "--name", "x", "--command", "y"]) == 2
    assert "--compare 150: give POINT=REPORT" in capsys.readouterr().err


def test_a_record_carries_each_systems_shares_against_corpus_size():
    """A run asked for `shares_by_size` keeps each system's shares per sub-corpus size with their intervals, and
    the docs show them beside the paper's test-set size; a run that did not ask shows no such table."""
    curve = _curve()
    hot = curve["against_paper"]["systems"][1]
    hot["human_ratio_by_size"] = [
        {"n": n, **{k: {**_stat(share), "half_samples": 200} for k in ("dist1", "dist2", "ead1", "ead2")}}
        for n, share in ((2, 1.10), (4, 0.90))
    ]
    record = record_from_curve(curve, "demo", "bash run.sh", "abc1234", "2-core test CPU")
    shares = record["systems"][1]["shares_by_size"]
    assert [row["n"] for row in shares] == [2, 4]
    assert shares[0]["dist1"] == pytest.approx({"value": 1.1, "ci_low": 1.05, "ci_high": 1.15})
    assert record["systems"][0]["shares_by_size"] is None
    text = "\n".join(render_record(record))
    assert "| student-hot | 2 | 1.100 [1.050, 1.150] |" in text and "2,465 conversations" in text
    assert "| GPT-4o TRACE (paper, Table 1) * | 2,465 | 0.91 |" in text  # the paper's n marked, its Dist-1 share
    # the verdict at each n: at 4, Dist-1's interval (0.85-0.95) reaches below the paper's 0.91
    assert "| 1.100 [1.050, 1.150] | 4 of 4 |" in text and "| 0.900 [0.850, 0.950] | 3 of 4 |" in text
    assert "| student-traces | 2 |" not in text
    assert "against corpus size" not in "\n".join(render_record(record, only=["student-hot"]))
    assert "against corpus size" not in "\n".join(render_record(record_from_curve(_curve(), "d", "c", "a", "m")))


def test_a_record_gives_the_spread_of_a_setting_over_its_seed_repeats():
    """Variants that differ from another only in `seed` are its repeats: the record names what each repeats and
    renders every figure under each seed with its spread; a record without repeats has no such table."""
    curve = _curve()
    hot = {"name": "hot", "like": "traces", "decoding": {"temperatures": {"ers": 1.0}}, "seed": None}
    curve["config"]["variants"] = [hot, {**hot, "name": "hot-seed1", "seed": 1}, {**hot, "name": "cold-seed2",
                                   "seed": 2, "decoding": {"temperatures": {"ers": 0.7}}}]  # fmt: skip
    repeat = _row("student-hot-seed1", 0.95, 0.6, 0.285, 21.0)
    other = _row("student-cold-seed2", 0.80, 0.6, 0.30, 19.0)
    curve["against_paper"]["systems"] += [repeat, other]
    record = record_from_curve(curve, "demo", "bash run.sh", "abc1234", "2-core test CPU")
    repeats = {s["name"]: (s["seed"], s["repeats"]) for s in record["systems"]}
    assert repeats["student-hot-seed1"] == (1, "student-hot") and repeats["student-hot"] == (None, None)
    assert repeats["student-cold-seed2"] == (2, None)  # other decoding: a setting of its own, not a repeat
    text = "\n".join(render_record(record))
    assert "student-hot under 2 seeds (LoRA init, data order and sampling)" in text
    assert "| BERTScore F | 0.290 [0.280, 0.300] | 0.285 [0.275, 0.295] | 0.005 |" in text
    assert "| Dist-1 / human | 0.970 [0.920, 1.020] | 0.950 [0.900, 1.000] | 0.020 |" in text
    assert "under 2 seeds" not in "\n".join(render_record(record_from_curve(_curve(), "d", "c", "a", "m")))
