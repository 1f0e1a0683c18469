"""Every CLI against malformed input: a non-zero exit and one message naming the input, never a
traceback, and earlier outputs left as they were.

Each case runs in-process through the package's `main(argv)`, so an uncaught exception fails the test
with its own traceback. Cases fail before any model loads, so the whole table runs in seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

import data_prep.__main__ as data_prep_cli
import distill.__main__ as distill_cli
import eval.__main__ as eval_cli
import eval.quickstart as quickstart_cli
import train.__main__ as train_cli

CLIS = {
    "data_prep": data_prep_cli.main,
    "distill": distill_cli.main,
    "eval": eval_cli.main,
    "train": train_cli.main,
    "quickstart": quickstart_cli.main,
}
TRACE_HEADER = "utterances,prompt,emotion_id,gold_response\n"
GOOD_ROW = '"seeker: I lost my keys again.",I lost my keys.,0,That is so annoying.\n'
ED_HEADER = "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n"
ED_ROWS = (
    '"hit:0_conv:1",1,sad,My dog died.,1,My dog died last week.,,\n"hit:0_conv:1",2,sad,My dog died.,2,I am sorry.,,\n'
)
MANY_TURNS = "\n".join("seeker: hi" if i % 2 == 0 else "responder: oh?" for i in range(5001))


def _files(root: Path) -> dict[str, Path]:
    """The inputs the cases point at, written fresh for each case."""
    made = {
        "empty.csv": b"",
        "binary.csv": os.urandom(512),
        "truncated.csv": b"utterances,prom",
        "latin1.csv": (TRACE_HEADER + GOOD_ROW.replace("annoying", "\xe9nervant")).encode("latin-1"),
        "badlabel.csv": (TRACE_HEADER + GOOD_ROW.replace(",0,", ",joyous,")).encode(),
        "header_only.csv": TRACE_HEADER.encode(),
        "bom_quoted.csv": ("\ufeff" + '"response","gold"\n"hi there","hello"\n').encode(),
        "resp.txt": b"hello\n",
        "bad.yaml": b"backend: [unclosed\n  : :",
        "list.yaml": b"- 1\n- 2\n",
        "binary.yaml": os.urandom(256),
        "wrong_types.yaml": b"backend: {type: local, model: smollm2-135m, batch_size: many}\n",
        "unknown_key.yaml": b"backend: {type: local, model: smollm2-135m}\npipeline: {use_everything: true}\n",
        "bad_backend.yaml": b"backend: {type: carrier-pigeon}\n",
        # nothing listens on port 9: a request that got out would fail there, not at the price check
        "gpt5.yaml": b"backend: {type: openai, model: gpt-5, base_url: 'http://127.0.0.1:9/v1', api_key_env: NO_KEY}\n",
        "train_r0.yaml": b"lora_r: 0\n",
        "train_rlist.yaml": b"lora_r: [1, 2]\n",
        "train_bs0.yaml": b"per_device_train_batch_size: 0\n",
        "train_epochs.yaml": b"num_train_epochs: -1\n",
        "train_unknown.yaml": b"model_name_or_pathh: x\n",
        "train_model_null.yaml": b"model_name_or_path: null\n",
        "train_sched.yaml": b"lr_scheduler_type: warp-speed\n",
        "eval_unknown.yaml": b"dialogues: x\nsystems: [{name: a, colour: red}]\n",
        "eval_missing.yaml": b"systems: []\n",
        "existing_file": b"keep me\n",
        "good.csv": (TRACE_HEADER + GOOD_ROW).encode(),
        "traces/traces.jsonl": b'{"key": "x", "dialogue": {"id": 1\n',
        "latin1.jsonl": '{"response": "\xe9nervant"}\n'.encode("latin-1"),
        "number.jsonl": b'{"response": "fine"}\n{"response": 5}\n',
        "nan.jsonl": b'{"response": NaN}\n',
        "list.jsonl": b'{"response": ["a", "b"]}\n',
        "bool.jsonl": b'{"response": true}\n',
        "long.csv": (TRACE_HEADER + GOOD_ROW + GOOD_ROW.replace("again.", "again. " * 40_000)).encode(),
        "many_turns.csv": (TRACE_HEADER + f'"{MANY_TURNS}",s,0,r\n').encode(),
        "zero_width.csv": (TRACE_HEADER + GOOD_ROW.replace("I lost my keys again.", "\u200b\u200c\u200d")).encode(),
        "zero_width_situation.csv": (TRACE_HEADER + GOOD_ROW.replace("I lost my keys.", "\u200b")).encode(),
        "nul.csv": (TRACE_HEADER + GOOD_ROW.replace("keys again", "keys\x00again")).encode(),
        "tab_id.csv": (ED_HEADER + ED_ROWS.replace("conv:1", "conv\t1")).encode(),
        "zero_width.txt": "\u200b\u200c\u200d\n".encode(),
        "latin1.txt": "seeker: \xe9nervant\n".encode("latin-1"),
        "local.yaml": b"backend: {type: local, model: smollm2-135m}\npipeline: {rag: false}\n",
        "bad_model.yaml": b"backend: {type: local, model: /no/such/model}\n",
        # issue 50: a folder that holds no model (relative to the case's working directory)
        "no_model.yaml": b"backend: {type: local, model: empty_dir}\n",
        "eval_no_ppl_model.yaml": b"dialogues: x\nsystems: [{name: a, traces: r}]\nppl: {model: /etc}\n",
        # issue 78: an encoder as the reference LM (a random LM head: another PPL every run)
        "eval_encoder_ppl.yaml": b"dialogues: x\nsystems: [{name: a, traces: r}]\nppl: {model: minilm}\n",
        "eval_encoder_guard.yaml": b"dialogues: x\nsystems: [{name: a, traces: r}]\ndialogue_ppl: {model: minilm}\n",
        "train_report.yaml": b"report_to: bogus\n",
        "train_empty.yaml": b"",
    }
    for name, content in made.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (root / "empty_dir").mkdir()
    return {name: root / name for name in [*made, "empty_dir"]}


@pytest.fixture(scope="module")
def dialogues_dir(tmp_path_factory) -> str:
    """A valid dialogues directory, so config errors are the only thing wrong in those cases."""
    root = tmp_path_factory.mktemp("good")
    source = root / "good.csv"
    source.write_text(TRACE_HEADER + GOOD_ROW + GOOD_ROW.replace("keys", "phone"), encoding="utf-8")
    assert data_prep_cli.main(["dialogues", "--source", str(source), "--out", str(root / "ds")]) == 0
    return str(root / "ds")


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_dialogues, dialogues_dir) -> dict[str, str]:
    """Valid inputs that are not single files: a role dataset folder (and a corrupt copy), a tiny random model
    folder (the checks that run before weights load use its config), the same config without weights, a trace
    run, and a compare config whose one generated system names a folder that holds no model."""
    import yaml
    from datasets import Dataset, DatasetDict
    from test_datasets import make_trace, write_run
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("built")
    row = {"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "{}"}]}
    DatasetDict(train=Dataset.from_list([row] * 4)).save_to_disk(str(root / "roles" / "asi"))
    shutil.copytree(root / "roles", root / "roles_corrupt")
    (root / "roles_corrupt" / "asi" / "dataset_dict.json").write_text('{"splits": ["train"')
    config = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=32
    )
    LlamaForCausalLM(config).save_pretrained(root / "tiny_model")
    config.save_pretrained(root / "config_only_model")
    write_run(root / "trace_run", [make_trace(d) for d in tiny_dialogues[:2]], split="train")
    system = {"name": "s", "backend": {"type": "local", "model": "/etc"}, "pipeline": {"rag": False}}
    compare = {"dialogues": dialogues_dir, "split": "train", "systems": [system], "ppl": None, "bertscore": None}
    (root / "compare_no_model.yaml").write_text(yaml.safe_dump(compare))
    from data_prep.loaders import save_dialogues

    save_dialogues({"test": [tiny_dialogues[0].model_copy(update={"id": "d\n1"})]}, root / "newline_ids")
    names = ("roles", "roles_corrupt", "tiny_model", "config_only_model", "trace_run", "compare_no_model.yaml",
             "newline_ids")  # fmt: skip
    return {name: str(root / name) for name in names}


_NO_MODEL = "'{}' is a directory but holds no model (no config.json): give a model folder, a hub id or an alias"
_ENCODER = "'minilm' is a BertModel (its config.json's architectures), not a causal LM: perplexity needs a causal LM"
# (cli, argv with {name} placeholders for the files above, a piece of the message)
CASES = [
    ("data_prep", "dialogues --source {missing.csv} --out {out}", "missing.csv"),
    ("data_prep", "dialogues --source {empty.csv} --out {out}", "empty.csv"),
    ("data_prep", "dialogues --source {binary.csv} --out {out}", "binary.csv"),
    ("data_prep", "dialogues --source {truncated.csv} --out {out}", "truncated.csv"),
    ("data_prep", "dialogues --source {latin1.csv} --out {out}", "latin1.csv"),
    ("data_prep", "dialogues --source {badlabel.csv} --out {out}", "joyous"),
    ("data_prep", "dialogues --source {header_only.csv} --out {out}", "header_only.csv"),
    ("data_prep", "dialogues --source {empty_dir} --out {out}", "empty_dir"),
    ("data_prep", "dialogues --source {badlabel.csv} --skip-invalid --out {out}", "no valid"),
    ("data_prep", "dialogues --source {header_only.csv} --split-ratios 0,0,0 --out {out}", "split-ratios"),
    ("data_prep", "dialogues --source {header_only.csv} --split-ratios a,b --out {out}", "split-ratios"),
    ("data_prep", "dialogues --source {good.csv} --out {existing_file}", "existing_file"),
    ("data_prep", "index --dialogues {missing_dir} --out {out}", "missing_dir"),
    ("data_prep", "index --dialogues {empty_dir} --out {out}", "empty_dir"),
    ("distill", "generate --config {missing.yaml} --dialogues {empty_dir} --out {out}", "missing.yaml"),
    ("distill", "generate --config {bad.yaml} --dialogues {empty_dir} --out {out}", "bad.yaml"),
    ("distill", "generate --config {list.yaml} --dialogues {empty_dir} --out {out}", "list.yaml"),
    ("distill", "generate --config {binary.yaml} --dialogues {empty_dir} --out {out}", "binary.yaml"),
    ("distill", "generate --config {wrong_types.yaml} --dialogues {dialogues} --out {out}", "batch_size"),
    ("distill", "generate --config {unknown_key.yaml} --dialogues {dialogues} --out {out}", "use_everything"),
    ("distill", "generate --config {bad_backend.yaml} --dialogues {dialogues} --out {out}", "carrier-pigeon"),
    ("distill", "generate --config {gpt5.yaml} --dialogues {dialogues} --max-cost 5 --out {out}", "no price is known"),
    ("distill", "datasets --traces {missing_dir} --out {out}", "missing_dir"),
    ("distill", "datasets --traces {empty_dir} --out {out}", "empty_dir"),
    ("distill", "datasets --traces {traces} --out {out}", "traces"),
    ("distill", "datasets --traces {traces} --roles wizard --out {out}", "wizard"),
    ("distill", "datasets --traces {missing_dir} --out {existing_file}", "missing_dir"),
    ("distill", "serve --model smollm2-135n", "smollm2-135n"),
    ("distill", "serve --model smollm2-135m --adapters {missing_dir}", "missing_dir"),
    ("distill", "batch submit --config {missing.yaml} --dialogues {empty_dir} --out {out}", "missing.yaml"),
    ("distill", "batch poll --out {missing_dir}", "missing_dir"),
    ("train", "--config {missing.yaml}", "missing.yaml"),
    ("train", "--config {train_r0.yaml}", "lora_r"),
    ("train", "--config {train_rlist.yaml}", "lora_r"),
    ("train", "--config {train_bs0.yaml}", "per_device_train_batch_size"),
    ("train", "--config {train_epochs.yaml}", "num_train_epochs"),
    ("train", "--config {train_unknown.yaml}", "model_name_or_pathh"),
    ("train", "--config {train_model_null.yaml}", "model_name_or_path"),
    ("train", "--config {train_sched.yaml}", "warp-speed"),
    ("train", "--dataset_name {missing_dir}", "missing_dir"),
    ("train", "--roles wizard", "wizard"),
    ("eval", "score --responses {missing.csv} --column response", "missing.csv"),
    ("eval", "score --responses {empty.csv} --column response", "empty.csv"),
    ("eval", "score --responses {header_only.csv} --column utterances", "header_only.csv"),
    ("eval", "score --responses {latin1.csv} --column gold_response", "latin1.csv"),
    ("eval", "score --responses {binary.csv} --column response", "binary.csv"),
    ("eval", "score --responses {resp.txt} --column response", "resp.txt"),
    ("eval", "score --responses {bom_quoted.csv} --column nope", "nope"),
    ("eval", "score --responses {bom_quoted.csv} --column response --ppl-model smollm2-135n", "smollm2-135n"),
    ("eval", "score --responses {bom_quoted.csv} --column response --out {empty_dir}", "empty_dir"),
    ("eval", "score --responses {bom_quoted.csv} --column response --out {existing_file}/m.json", "existing_file"),
    ("eval", "compare --config {missing.yaml} --out {out}", "missing.yaml"),
    ("eval", "compare --config {bad.yaml} --out {out}", "bad.yaml"),
    ("eval", "compare --config {eval_unknown.yaml} --out {out}", "colour"),
    ("eval", "compare --config {eval_missing.yaml} --out {out}", "systems"),
    # issue 28: 1. a non-UTF-8 JSONL
    ("eval", "score --responses {latin1.jsonl} --column response", "latin1.jsonl line 1: non-UTF-8"),
    # 2. an --out that is a file, found before the model loads
    ("distill", "generate --config {local.yaml} --dialogues {dialogues} --out {existing_file}", "existing_file"),
    ("distill", "generate --config {local.yaml} --dialogues {dialogues} --out {existing_file}/run", "existing_file"),
    # 3. options TRL or PEFT would only check after the model loads
    ("train", "--config {train_report.yaml}", "train_report.yaml (or its command-line overrides): field 'report_to'"),
    ("train", "--output_dir {existing_file}", "field 'output_dir'"),
    (
        "train",
        "--model_name_or_path {tiny_model} --lora_target_modules nonexistent_proj --dataset_name {roles} --roles asi",
        "field 'lora_target_modules': 'nonexistent_proj' matches no layer",
    ),
    (
        "train",
        "--model_name_or_path {tiny_model} --lora_target_modules q_proj nonexistent_proj "
        "--dataset_name {roles} --roles asi",
        "'nonexistent_proj' matches no layer",
    ),
    # 4. a corrupt dataset_dict.json
    ("train", "--dataset_name {roles_corrupt} --roles asi", "roles_corrupt/asi: cannot load the role dataset"),
    # 5. replies that are not text
    ("eval", "score --responses {number.jsonl} --column response", "number.jsonl line 2: field 'response'"),
    ("eval", "score --responses {nan.jsonl} --column response", "got float NaN"),
    ("eval", "score --responses {list.jsonl} --column response", "got list"),
    ("eval", "score --responses {bool.jsonl} --column response", "got bool"),
    # 6. dialogues over the length limits
    ("data_prep", "dialogues --source {long.csv} --out {out}", "long.csv row 3, column 'utterances'"),
    ("data_prep", "dialogues --source {many_turns.csv} --out {out}", "5001 turns, over the limit"),
    ("data_prep", "dialogues --source {good.csv} --max-chars 0 --out {out}", "--max-chars"),
    # 7. invisible text and control characters
    ("data_prep", "dialogues --source {zero_width.csv} --out {out}", "zero_width.csv row 2"),
    ("data_prep", "dialogues --source {zero_width_situation.csv} --out {out}", "no visible text"),
    ("data_prep", "dialogues --source {nul.csv} --out {out}", "control character U+0000"),
    ("distill", "respond --dialogue-file {zero_width.txt}", "the dialogue is empty"),
    # issue 78: an id is printable
    (
        "data_prep",
        "dialogues --source {tab_id.csv} --out {out}",
        "tab_id.csv row 2, column 'conv_id': control character U+0009 in the id",
    ),
    (
        "data_prep",
        "dialogues --source {newline_ids} --out {out}",
        "newline_ids[test] row 1, column 'id': control character U+000A",
    ),
    (
        "distill",
        "generate --config {local.yaml} --dialogues {newline_ids} --split test --out {out}",
        "row 1, column 'id': control character U+000A",
    ),
    # 9. sizes checked up front
    ("quickstart", "--train-limit -5 --out {out}", "--train-limit"),
    ("quickstart", "--test-limit 0 --out {out}", "--test-limit"),
    ("distill", "generate --config {local.yaml} --dialogues {dialogues} --limit 0 --out {out}", "--limit"),
    # 12. messages that name the file and field
    ("distill", "respond --dialogue-file {latin1.txt}", "latin1.txt: not UTF-8"),
    ("distill", "generate --config {wrong_types.yaml} --dialogues {dialogues} --out {out}", "'backend.batch_size'"),
    ("distill", "generate --config {bad_model.yaml} --dialogues {dialogues} --out {out}", "field 'backend.model'"),
    ("distill", "datasets --traces {trace_run} --split nosuch --out {out}", "--split nosuch: no trace"),
    ("train", "--model_name_or_path {missing_dir} --dataset_name {roles} --roles asi", "field 'model_name_or_path'"),
    # 13. the default datasets folder is not looked up on the hub
    ("train", "--config {train_empty.yaml}", "runs/datasets/asi: no dataset for role 'asi' (build it"),
    # issue 50: a model path that holds no model, refused before anything loads
    ("train", "--model_name_or_path /etc --dataset_name {roles} --roles asi", _NO_MODEL.format("/etc")),
    ("train", "--model_name_or_path {config_only_model} --dataset_name {roles} --roles asi", "but no weights"),
    ("distill", "generate --config {no_model.yaml} --dialogues {dialogues} --out {out}", _NO_MODEL.format("empty_dir")),
    ("distill", "serve --model {empty_dir}", "empty_dir' is a directory but holds no model (no config.json)"),
    ("distill", "serve --model {roles}", "roles' is a directory but holds no model (no config.json)"),
    ("eval", "compare --config {compare_no_model.yaml} --out {out}", _NO_MODEL.format("/etc")),
    ("eval", "compare --config {eval_no_ppl_model.yaml} --out {out}", "field 'ppl.model': " + _NO_MODEL.format("/etc")),
    ("eval", "score --responses {bom_quoted.csv} --column response --ppl-model /etc", _NO_MODEL.format("/etc")),
    # issue 78: a model that cannot score perplexity, refused from its config.json before anything loads
    ("eval", "compare --config {eval_encoder_ppl.yaml} --out {out}", "field 'ppl.model': " + _ENCODER),
    ("eval", "compare --config {eval_encoder_guard.yaml} --out {out}", "field 'dialogue_ppl.model': " + _ENCODER),
    ("eval", "score --responses {bom_quoted.csv} --column response --ppl-model minilm", _ENCODER),
]


@pytest.mark.parametrize("cli, argv, needle", CASES, ids=[f"{c[0]} {c[1].split()[0]} {i}" for i, c in enumerate(CASES)])
def test_bad_input_exits_nonzero_with_one_line(tmp_path, capsys, monkeypatch, dialogues_dir, built, cli, argv, needle):
    monkeypatch.chdir(tmp_path)  # relative defaults (runs/...) land here, never in the checkout
    files = _files(tmp_path)
    names = {**{k: str(v) for k, v in files.items()}, **built, "out": str(tmp_path / "out")}
    names.update({"missing.csv": str(tmp_path / "missing.csv"), "missing.yaml": str(tmp_path / "missing.yaml")})
    names.update({"missing_dir": str(tmp_path / "missing_dir"), "traces": str(tmp_path / "traces")})
    names["dialogues"] = dialogues_dir
    args = [re.sub(r"\{([^}]+)\}", lambda m: names[m.group(1)], part) for part in argv.split()]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    usage = False
    try:
        code = CLIS[cli](args)
    except SystemExit as exc:  # argparse's own usage errors
        code, usage = exc.code, True
    captured = capsys.readouterr()
    output = captured.err + captured.out
    assert code not in (0, None), output
    assert "Traceback" not in output and "\x1b" not in output  # no raw bytes of the input echoed either
    assert needle in output, output
    if not usage:  # one error line (argparse prints its usage above it; a skip or problem report may come first)
        lines = [line for line in output.strip().splitlines() if not line.startswith(("skipped", "warning", "problem"))]
        assert len(lines) == 1, output
    assert {p: p.read_bytes() for p in before} == before  # nothing that existed was changed
    assert not (tmp_path / "out" / "run.json").exists()  # no run was started for nothing


def test_a_quoted_header_after_a_bom_reads_and_an_all_bad_file_still_gets_its_skip_report(tmp_path, capsys):
    files = _files(tmp_path)
    assert eval_cli.main(["score", "--responses", str(files["bom_quoted.csv"]), "--column", "response"]) == 0
    assert '"n": 1' in capsys.readouterr().out
    out = tmp_path / "out"
    code = data_prep_cli.main(
        ["dialogues", "--source", str(files["badlabel.csv"]), "--skip-invalid", "--out", str(out)]
    )
    assert code == 2 and "joyous" in (out / "skipped.jsonl").read_text()


def test_an_over_long_dialogue_is_skipped_and_reported_under_skip_invalid(tmp_path, capsys):
    files, out = _files(tmp_path), tmp_path / "out"
    argv = ["dialogues", "--source", str(files["long.csv"]), "--split-ratios", "1,0,0", "--skip-invalid"]
    assert data_prep_cli.main([*argv, "--out", str(out)]) == 0
    skipped = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    assert [(r["row"], r["column"]) for r in skipped] == [(3, "utterances")] and "--max-chars" in skipped[0]["reason"]
    assert "skipped 1 invalid" in capsys.readouterr().err
    # the limit is a flag: raised, the same row is taken
    assert data_prep_cli.main([*argv, "--max-chars", "400000", "--out", str(tmp_path / "out2")]) == 0
    assert not (tmp_path / "out2" / "skipped.jsonl").exists()


def test_a_failed_skip_invalid_run_leaves_an_existing_out_as_it_was(tmp_path, capsys, dialogues_dir):
    files, out = _files(tmp_path), tmp_path / "out"
    shutil.copytree(dialogues_dir, out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    argv = ["dialogues", "--source", str(files["badlabel.csv"]), "--skip-invalid", "--out", str(out)]
    code = data_prep_cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "badlabel.csv row 2: unknown emotion label 'joyous'" in err and "left as it was" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
