"""benchmarks/label_decoding.py on a tiny fixture: ESD-CoT-shaped files the tests write (test_import's invented
chains, never ESD's text), identity LoRA adapters on conftest's random 2-layer llama, and a compact escot pipeline.

The record's figures are checked against what they are computed from: the one pass's stored traces (each
decoding's labels read from their scores lines, and equal to separate runs of each decoding), the train
split's majority class, the val split's choice; the label-only oracle's re prompt carries no reason. The
`--emotion` mode runs on eight ED-shaped dialogues. Missing inputs are refused in one line.
"""

from __future__ import annotations

import csv
import json
import sys

import pytest
import yaml
from test_import import CHAINS, ESCOT, REPO, write_full_chain, write_instruction

from data_prep.taxonomy import EKMAN
from distill.backends.label_rank import decodings_from_scores, parse_scores_events
from distill.pipeline.store import TraceStore

sys.path.insert(0, str(REPO))
from benchmarks.label_decoding import DECODINGS, decode, main  # noqa: E402

# train: Question three times of six, so the majority class is Question; val and test: the four chains, one each
TRAIN = list(CHAINS) + [(*c[:4], "Question", c[5]) for c in CHAINS[:2]]


@pytest.fixture(scope="module")
def bench(tmp_path_factory, tiny_model_dir):
    """The fixture data, adapters and pipeline, and the record of one run over them."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("label-decoding")
    data = root / "data"
    data.mkdir()
    write_instruction(data / "train_em_sr_re.json", TRAIN)
    write_full_chain(data / "val.json")
    write_full_chain(data / "test.json")
    torch.manual_seed(0)
    for role in ("em", "sr", "re"):  # LoRA's B starts at zero: each adapter is the base, loaded as a student's
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(
            root / "adapters" / role
        )
    pipeline = yaml.safe_load(ESCOT.read_text())
    for role in pipeline["roles"]:  # text answers capped so a random model's JSON closes in time
        role["max_new_tokens"] = 96
        for answer in role["answer"].values():
            if "text" in answer:
                answer["text"] = 40
    (root / "escot.yaml").write_text(yaml.safe_dump(pipeline))
    argv = ["--adapters", str(root / "adapters"), "--data", str(data), "--pipeline", str(root / "escot.yaml"),
            "--model", tiny_model_dir, "--dtype", "float32", "--batch-size", "4", "--chunk", "3",
            "--work", str(root / "work"), "--out", str(root / "record.json")]  # fmt: skip
    assert main(argv) == 0
    return root, argv, json.loads((root / "record.json").read_text())


def gold_share(label: str) -> float:
    return sum(c[4] == label for c in CHAINS) / len(CHAINS)


def pass_traces(root, tag: str) -> list:
    return TraceStore(root / "work" / "decodings" / f"{tag}-pass").read()[0]


def derived(traces: list, role: str = "sr") -> dict[str, list]:
    """Each decoding's labels read back from the pass's traces, by label_rank's own parser."""
    lines = [parse_scores_events([e for s in t.steps if s.role == role for e in s.events])[-1] for t in traces]
    return {mode: [decodings_from_scores(line)[mode] for line in lines] for mode in DECODINGS}


def test_the_record_holds_every_setting_and_each_decodings_figures(bench):
    from eval.metrics.accuracy import classification_report

    root, argv, record = bench
    assert record["command"].startswith("python benchmarks/label_decoding.py --adapters")
    for key in ("machine", "commit", "seconds", "model", "dtype", "batch_size", "limit", "max_attempts", "seed"):
        assert key in record
    assert record["dtype"] == "float32" and record["batch_size"] == 4 and record["oracle"] == {"em": "teacher"}
    assert record["dialogues"] == {"val": 4, "test": 4} and record["train_dialogues"] == len(TRAIN)
    assert set(record["decodings"]) == {"val", "test"} and "two passes" in record["decodings_derived"]
    keys = [label.lower() for label in record["labels"]]
    for split, by_mode in record["decodings"].items():
        assert list(by_mode) == list(DECODINGS)
        traces = pass_traces(root, split)  # the ranked pass: its answers are the calibrated ranking's
        greedy = TraceStore(root / "work" / "decodings" / f"{split}-greedy").read()[0]  # greedy's own pass
        labels = derived(traces)
        assert labels["rank-calibrated"] == [t.outputs["sr"]["strategy"] for t in traces]
        drafted, labels["greedy"] = labels["greedy"], [t.outputs["sr"]["strategy"] for t in greedy]
        assert drafted == labels["greedy"] and by_mode["greedy"]["drafted_label_differs"] == 0  # the same decoding
        assert [s.role for s in traces[0].steps] == ["em", "sr"]  # em from the teacher's run, sr decoded
        assert traces[0].steps[0].events == ["oracle: teacher answer"]
        assert any(e.startswith("label ranked (rank-calibrated)") for e in traces[0].steps[1].events)
        gold = [t.dialogue.labels["strategy"] for t in traces]
        for mode, figures in by_mode.items():
            # the figures are those of the decoding's labels against the gold strategies, CIs included
            assert figures["accuracy"] == classification_report(labels[mode], gold, keys)["accuracy"]
            hits = [p == g for p, g in zip(labels[mode], gold)]
            assert figures["accuracy"]["value"] == pytest.approx(sum(hits) / len(hits))
            assert figures["accuracy"]["n"] == figures["macro_f1"]["n"] == 4 and figures["failed"] == 0
            if mode != "greedy":
                changed = sum(a != b for a, b in zip(labels[mode], labels["greedy"]))
                assert figures["versus_greedy"] == {"label_changed": changed}
        check_seconds(by_mode, greedy, traces)


def check_seconds(by_mode: dict, greedy: list, ranked: list) -> None:
    """Each decoding's seconds come off a stopwatch around the pass that decodes it, so they hold at least the
    generation and ranking the backend timed inside that pass (every step's latency); the ranking's own seconds are
    what the ranker timed in the ranked pass's scores lines, and rank's pass is the calibrated one less the
    content-free scoring."""
    lines = [x["seconds"] for t in ranked for s in t.steps for x in parse_scores_events(s.events)]
    rank, free = sum(x["rank"] for x in lines), sum(x["content_free"] for x in lines)
    assert len(lines) >= len(ranked) and free > 0  # one line per ranked answer; content-free scored once at least

    def stepped(traces: list) -> float:
        return sum(s.latency_s for t in traces for s in t.steps)

    timed = {mode: by_mode[mode]["seconds"] for mode in DECODINGS}
    assert by_mode["greedy"]["own_pass"] is True and timed["greedy"] + 0.01 >= stepped(greedy) > 0
    assert timed["rank-calibrated"] + 0.01 >= stepped(ranked) >= rank + free
    assert timed["rank"] == pytest.approx(timed["rank-calibrated"] - free, abs=0.011)
    assert by_mode["rank"]["ranking_seconds_per_dialogue"] == pytest.approx(rank / 4, abs=1e-4)
    assert by_mode["rank-calibrated"]["ranking_seconds_per_dialogue"] == pytest.approx((rank + free) / 4, abs=1e-4)
    for mode in DECODINGS:
        assert by_mode[mode]["seconds_per_dialogue"] == pytest.approx(timed[mode] / 4, abs=0.003)


def test_the_derived_decodings_are_what_separate_runs_decode(bench, tiny_model_dir):
    """Greedy, rank and rank-calibrated read from the one pass equal three runs of their own on val's dialogues:
    no label_decoding, `rank` and `rank-calibrated`, decoded as the benchmark decodes (chunk 3, batch 4)."""
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig

    root, _, _ = bench
    traces = pass_traces(root, "val")
    backend = LocalBackend(tiny_model_dir, adapters=str(root / "adapters"), dtype="float32", batch_size=4)
    settings = {"pipeline": str(root / "escot.yaml"), "skip": ["es", "ia", "re"], "prompt_style": "student",
                "use_adapters": True, "max_attempts": 2, "seed": 0, "oracle": {"em": "teacher"},
                "oracle_traces": str(root / "work" / "imports" / "val")}  # fmt: skip
    labels = derived(traces)
    for mode in DECODINGS:
        config = PipelineConfig(**settings, label_decoding={} if mode == "greedy" else {"sr": mode})
        alone, _ = decode(backend, config, [t.dialogue for t in traces], 3, mode)
        assert [t.outputs["sr"]["strategy"] for t in alone] == labels[mode], mode
        assert [t.outputs["sr"]["reason"] for t in alone] == [t.outputs["sr"]["reason"] for t in traces]


def test_majority_probe_and_the_choice_on_val(bench):
    _, _, record = bench
    majority = record["majority"]
    assert majority["label"] == "Question" and majority["from"] == "train labels"
    for split in ("val", "test"):
        assert majority[split]["accuracy"]["value"] == gold_share("Question") == 0.25
        assert majority[split]["macro_f1"]["value"] == pytest.approx(2 * 1 / (2 + 3) / 4)  # F1 0.4 on one of 4
    probe = record["probe"]
    assert probe["model"] == "logistic regression over minilm embeddings" and probe["train_dialogues"] == len(TRAIN)
    assert probe["test"]["accuracy"]["n"] == 4 and "last 12 turns" in probe["text"]
    val = record["decodings"]["val"]
    chosen = record["chosen"]
    assert val[chosen["decoding"]]["macro_f1"]["value"] == max(val[m]["macro_f1"]["value"] for m in DECODINGS)
    assert chosen["test"] == record["decodings"]["test"][chosen["decoding"]]


def test_the_label_only_oracle_gives_re_the_strategy_name_alone(bench):
    root, _, record = bench
    oracle = record["label_only_oracle"]
    for name in ("full", "label_only"):
        assert oracle[name]["bertscore_f1"]["n"] == oracle[name]["rouge_l"]["n"] == 4
    assert oracle["label_only_minus_full_rouge_l"]["n"] == 4
    for name, has_reason in (("full", True), ("label_only", False)):
        traces, _ = TraceStore(root / "work" / "decodings" / f"test-re-{name}").read()
        prompt = next(s for s in traces[0].steps if s.role == "re").messages[1]["content"]
        assert f"strategy: {CHAINS[0][4]}" in prompt and ("reason: " in prompt) == has_reason


def test_missing_inputs_are_one_line(bench, tmp_path, capsys):
    root, argv, _ = bench

    def refused(*change: str) -> str:
        args = list(argv)
        for flag, value in zip(change[::2], change[1::2]):
            args[args.index(flag) + 1] = value
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        return err

    assert "no such adapters folder" in refused("--adapters", str(tmp_path / "none"))
    (tmp_path / "partial" / "em").mkdir(parents=True)
    assert "holds no sr/ adapter" in refused("--adapters", str(tmp_path / "partial"))
    assert "train_em_sr_re.json: no such file" in refused("--data", str(tmp_path))
    assert main(["--emotion", "--emotion-data", str(tmp_path / "ed.csv")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path / 'ed.csv'}: no such file (pass --emotion-data, an ED CSV)"
    )


def test_the_emotion_mode_ranks_asi_beside_majority_and_probe(tmp_path, tiny_model_dir, tiny_dialogues):
    path = tmp_path / "ed.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["utterances", "prompt", "emotion_id", "gold_response"])
        writer.writeheader()
        for d in tiny_dialogues:
            writer.writerow({"utterances": "\n".join(f"{t.speaker}: {t.text}" for t in d.turns),
                             "prompt": d.situation, "emotion_id": EKMAN.index(d.emotion),
                             "gold_response": d.gold_response})  # fmt: skip
    argv = ["--emotion", "--emotion-data", str(path), "--model", tiny_model_dir, "--dtype", "float32", "--batch-size",
            "4", "--folds", "2", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "e.json")]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((tmp_path / "e.json").read_text())
    assert record["task"] == "emotion" and record["dialogues"] == len(tiny_dialogues)
    assert list(record["decodings"]) == list(DECODINGS)
    traces, _ = TraceStore(tmp_path / "work" / "decodings" / "emotion-pass").read()
    assert [s.role for s in traces[0].steps] == ["asi", "ers"]  # ers is the gold reply: nothing generated
    labels = derived(traces, "asi")
    for mode, figures in record["decodings"].items():
        hits = [p == t.dialogue.emotion for p, t in zip(labels[mode], traces)]
        assert figures["i_acc"]["accuracy"]["value"] == pytest.approx(sum(hits) / len(hits))
    assert record["majority"]["i_acc"]["accuracy"]["n"] == record["probe"]["i_acc"]["accuracy"]["n"] == 8


def test_an_answer_that_is_its_label_alone_gets_its_greedy_decoding_from_a_pass_of_its_own(bench, tmp_path):
    """The strategy-only student: the ranker drafts nothing before the label, so greedy is decoded apart (own_pass)
    and every answer has a greedy label (derived from the ranked pass, none would)."""
    root, argv, _ = bench
    variant = root / "escot-strategy-only.yaml"
    variant.write_text(yaml.safe_dump({"extends": "escot.yaml", "name": "escot_strategy_only",
                                       "roles": [{"name": "sr", "student_answer": ["strategy"]}]}))  # fmt: skip
    args = [*argv[: argv.index("--pipeline")], "--pipeline", str(variant), *argv[argv.index("--pipeline") + 2 :]]
    args[args.index("--work") + 1], args[args.index("--out") + 1] = str(tmp_path / "work"), str(tmp_path / "r.json")
    assert main([*args, "--no-label-only"]) == 0
    record = json.loads((tmp_path / "r.json").read_text())
    for split in ("val", "test"):
        greedy = record["decodings"][split]["greedy"]
        assert greedy["own_pass"] is True and greedy["n_invalid"] == 0, greedy
        assert "drafted_label_differs" not in greedy  # the ranked pass drafted nothing to compare
        traces = TraceStore(tmp_path / "work" / "decodings" / f"{split}-greedy").read()[0]
        assert greedy["seconds"] + 0.01 >= sum(s.latency_s for t in traces for s in t.steps) > 0
