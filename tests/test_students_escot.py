"""ESCoT's students (`eval students`, configs/eval/escot-students.yaml): the direct and joint pipelines, their
mappings, and the answers they are scored on, on a tiny fixture in ESD-CoT's formats that the tests write (never
ESD's text). The command itself: tests/test_students.py.

- `direct` (configs/pipelines/escot-direct.yaml: the dialogue to the reply) and `joint` (escot-joint.yaml: the whole
  chain as one answer) import from the instruction format, build their datasets, train a step and run;
- each student's validation mapping (the full-chain format of val.json) gives the rows its train mapping gives
  (the same prompts and targets), and `distill datasets --validation-traces` makes them the validation split;
- a compare reads its test dialogues, with their gold strategy, from an imported test run, and scores a strategy
  that one system answers in `sr` and another in `chain` (`answers.label` as a list of paths).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_import import (
    CHAINS,
    ESCOT,
    FULL_CHAIN,
    INSTRUCTION,
    REPO,
    one_step_argv,
    run_import,
    write_full_chain,
    write_instruction,
)

from distill.__main__ import main as distill
from distill.pipeline.store import TraceStore
from eval.__main__ import main as evaluate

PIPELINES = REPO / "configs" / "pipelines"
MAPPINGS = REPO / "configs" / "import"
STRATEGIES = [c[4] for c in CHAINS]


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the shipped mappings name their pipelines relative to the repository


def test_the_joint_pipeline_declares_escots_strategies():
    joint = yaml.safe_load((PIPELINES / "escot-joint.yaml").read_text())
    assert joint["labels"] == yaml.safe_load(ESCOT.read_text())["labels"]


def test_direct_and_joint_import_from_the_instruction_format(tmp_path, capsys):
    data = write_instruction(tmp_path / "train.json")
    assert run_import(data, MAPPINGS / "esdcot-direct.yaml", tmp_path / "direct", "--split", "train") == 0
    assert run_import(data, MAPPINGS / "esdcot-joint.yaml", tmp_path / "joint", "--split", "train") == 0
    direct, _ = TraceStore(tmp_path / "direct").read()
    joint, _ = TraceStore(tmp_path / "joint").read()
    assert [s.role for s in direct[0].steps] == ["reply"] and direct[0].outputs["reply"] == {"response": CHAINS[0][5]}
    assert [s.role for s in joint[0].steps] == ["chain"]
    assert joint[1].outputs["chain"] == {"emotion": CHAINS[1][1], "reason": f'Use "{CHAINS[1][4]}" now.',
                                         "strategy": CHAINS[1][4], "response": CHAINS[1][5]}  # fmt: skip
    assert joint[1].response == direct[1].response == CHAINS[1][5]  # `response` is the pipeline's reply in both
    for name, role in (("direct", "reply"), ("joint", "chain")):
        out = tmp_path / f"ds-{name}"
        assert distill(["datasets", "--traces", str(tmp_path / name), "--out", str(out), "--eval-fraction", "0"]) == 0
        from datasets import load_from_disk

        rows = load_from_disk(str(out / role))["train"]
        assert rows.num_rows == 4 and rows[0]["prompt"][0]["content"] == f"[{role}]"
    chain = json.loads(load_from_disk(str(tmp_path / "ds-joint" / "chain"))["train"][0]["completion"][0]["content"])
    assert list(chain) == ["emotion", "reason", "strategy", "response"]  # ESCoT's order: the reply comes last


@pytest.mark.parametrize(
    "train, validation",
    [
        (INSTRUCTION, "esdcot-full-chain-em-sr-re.yaml"),
        (MAPPINGS / "esdcot-direct.yaml", "esdcot-full-chain-direct.yaml"),
        (MAPPINGS / "esdcot-joint.yaml", "esdcot-full-chain-joint.yaml"),
    ],
)
def test_a_validation_mapping_gives_the_rows_its_train_mapping_gives(tmp_path, capsys, train, validation):
    """val.json comes in the full-chain format: the same chains imported through a student's validation mapping
    must render the prompts and targets its train mapping renders, or early stopping reads another task's loss.
    `distill datasets --validation-traces` makes that run every role's validation split."""
    from datasets import load_from_disk

    assert run_import(write_instruction(tmp_path / "train.json"), train, tmp_path / "train", "--split", "train") == 0
    held = write_full_chain(tmp_path / "val.json")
    assert run_import(held, MAPPINGS / validation, tmp_path / "val", "--split", "validation") == 0
    for run in ("train", "val"):
        argv = [
            "datasets",
            "--traces",
            str(tmp_path / run),
            "--out",
            str(tmp_path / f"ds-{run}"),
            "--eval-fraction",
            "0",
        ]
        assert distill(argv) == 0
    out = tmp_path / "ds"
    argv = ["datasets", "--traces", str(tmp_path / "train"), "--validation-traces", str(tmp_path / "val"), "--out",
            str(out)]  # fmt: skip
    assert distill(argv) == 0
    roles = sorted(p.name for p in (tmp_path / "ds-train").iterdir() if p.is_dir())
    assert roles == sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "hub") and roles
    for role in roles:
        trained = load_from_disk(str(tmp_path / "ds-train" / role))["train"]
        validated = load_from_disk(str(tmp_path / "ds-val" / role))["train"]
        assert [(r["prompt"], r["completion"]) for r in trained] == [(r["prompt"], r["completion"]) for r in validated]
        both = load_from_disk(str(out / role))
        assert both["train"].num_rows == both["validation"].num_rows == 4
        assert set(both["validation"]["dialogue_id"]) == set(validated["dialogue_id"])


def test_the_import_fills_the_gold_strategy_that_compare_reads(tmp_path, capsys):
    """`labels:` of the full-chain mapping fills `Dialogue.labels`; compare reads the imported run as its test split
    and scores the strategy wherever each system answers it: `sr.strategy` or `chain.strategy`."""
    test = write_full_chain(tmp_path / "test.json")
    assert run_import(test, FULL_CHAIN, tmp_path / "chatgpt", "--split", "test") == 0
    traces, _ = TraceStore(tmp_path / "chatgpt").read()
    assert [t.dialogue.labels for t in traces] == [{"strategy": s} for s in STRATEGIES]
    rows = json.loads(test.read_text())
    for row in rows[:2]:  # the joint system answers two of four strategies wrong
        row["cot_data"]["recognized_strategy"] = "Self-disclosure"
    (tmp_path / "joint.json").write_text(json.dumps(rows))
    joint = yaml.safe_load((MAPPINGS / "esdcot-joint.yaml").read_text())
    joint.update(dialogue=yaml.safe_load(FULL_CHAIN.read_text())["dialogue"], id="id", sections=None, labels={},
                 reference={"field": "original_data.response"})  # fmt: skip
    fields = {"emotion": "cot_data.emotion", "reason": "cot_data.strategy_reason",
              "strategy": "cot_data.recognized_strategy", "response": "original_data.response"}  # fmt: skip
    joint["answers"]["chain"] = {name: {"field": field} for name, field in fields.items()}
    (tmp_path / "joint.yaml").write_text(yaml.safe_dump(joint))
    assert run_import(tmp_path / "joint.json", tmp_path / "joint.yaml", tmp_path / "joint", "--split", "test") == 0
    config = {
        "dialogues": str(tmp_path / "chatgpt"),
        "systems": [{"name": "chatgpt", "traces": str(tmp_path / "chatgpt"), "priced_as": "gpt-3.5-turbo"},
                    {"name": "joint", "traces": str(tmp_path / "joint")}],
        "answers": {"label": ["sr.strategy", "chain.strategy"], "gold_label": "labels.strategy"},
        "ppl": None, "bertscore": None,
    }  # fmt: skip
    (tmp_path / "compare.yaml").write_text(yaml.safe_dump(config))
    assert evaluate(["compare", "--config", str(tmp_path / "compare.yaml"), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    chatgpt, joint_row = report["systems"]
    assert (
        chatgpt["label_accuracy"]["accuracy"]["value"] == 1.0
        and joint_row["label_accuracy"]["accuracy"]["value"] == 0.5
    )
    assert joint_row["label_accuracy"]["majority"]["rate"] == 0.25  # four strategies, one each
    assert report["test"]["ids"] == ["0", "1", "2", "3"]
    teacher = chatgpt["cost"]["teacher_estimate"]  # what ChatGPT's five links would cost: escot's teacher prompts
    assert (
        teacher["prompt_tokens_per_dialogue"] > 5 * 100 and 5 * 5 < teacher["completion_tokens_per_dialogue"] < 5 * 40
    )
    assert teacher["usd_per_1k"] == pytest.approx(
        (teacher["prompt_tokens_per_dialogue"] * 0.5 + teacher["completion_tokens_per_dialogue"] * 1.5) / 1000, rel=1e-3
    )
    assert "teacher_estimate" not in joint_row["cost"]
    # the reply checks, whichever role wrote the reply (chatgpt's `re`, joint's `chain`)
    assert (
        chatgpt["reply_checks"]
        == joint_row["reply_checks"]
        == {"checked": 4, "rates": {"loop": 0.0, "echo": 0.0, "non_reply": 0.0}}
    )
    paired = [p for p in report["paired"] if p["metric"] == "label_accuracy"]
    assert len(paired) == 1 and paired[0]["diff"] == 0.5
    config["split"] = "train"  # the run was imported as the test split: another split is one line
    (tmp_path / "compare.yaml").write_text(yaml.safe_dump(config))
    assert evaluate(["compare", "--config", str(tmp_path / "compare.yaml"), "--out", str(tmp_path / "o2")]) == 2
    assert "a trace run of split 'test', not 'train'" in capsys.readouterr().err


def compact(pipeline: Path, path: Path) -> Path:
    """A shipped pipeline with its text answers capped at 40 characters, so a random model's JSON closes in time."""
    data = yaml.safe_load(pipeline.read_text())
    for role in data["roles"]:
        role["max_new_tokens"] = 96
        for answer in role["answer"].values():
            answer["text"] = 40 if "text" in answer else None
            if answer["text"] is None:
                del answer["text"]
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name, role", [("direct", "reply"), ("joint", "chain")])
def test_a_one_adapter_student_trains_and_runs(tmp_path, tiny_model_dir, capsys, name, role):
    from distill.adapters.adapters import read_metadata
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline
    from train.__main__ import main as train

    pipeline = compact(PIPELINES / f"escot-{name}.yaml", tmp_path / f"escot-{name}.yaml")
    mapping = yaml.safe_load((MAPPINGS / f"esdcot-{name}.yaml").read_text())
    (tmp_path / "mapping.yaml").write_text(yaml.safe_dump({**mapping, "pipeline": str(pipeline)}))
    assert run_import(write_instruction(tmp_path / "train.json"), tmp_path / "mapping.yaml", tmp_path / "run") == 0
    datasets, adapters = tmp_path / "datasets", tmp_path / "adapters"
    assert distill(["datasets", "--traces", str(tmp_path / "run"), "--out", str(datasets)]) == 0
    assert (
        train(one_step_argv(tiny_model_dir, pipeline, datasets, adapters)) == 0
        and read_metadata(adapters / role)["global_step"] == 1
    )
    config = PipelineConfig(pipeline=str(pipeline), prompt_style="student", use_adapters=True, max_attempts=1)
    backend = LocalBackend(tiny_model_dir, adapters=str(adapters), batch_size=4, dtype="float32")
    traces = Pipeline(config, backend).run([t.dialogue for t in TraceStore(tmp_path / "run").read()[0]], progress=False)
    for trace in traces:  # one stage, its answer in the declared schema; the reply is the trace's response
        assert trace.status == "ok" and [s.role for s in trace.steps] == [role] and trace.response
        assert trace.steps[0].messages[0]["content"] == f"[{role}]"
    if name == "joint":
        assert all(t.outputs["chain"]["strategy"] in yaml.safe_load(ESCOT.read_text())["labels"]["strategy"]
                   for t in traces)  # fmt: skip
