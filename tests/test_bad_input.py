"""Every CLI against malformed input: a non-zero exit and one message naming the input, never a
traceback, and earlier outputs left as they were.

Each case runs in-process through the package's `main(argv)`, so an uncaught exception fails the test
with its own traceback. Cases fail before any model loads, so the whole table runs in seconds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import data_prep.__main__ as data_prep_cli
import distill.__main__ as distill_cli
import eval.__main__ as eval_cli
import train.__main__ as train_cli

CLIS = {"data_prep": data_prep_cli.main, "distill": distill_cli.main, "eval": eval_cli.main, "train": train_cli.main}
TRACE_HEADER = "utterances,prompt,emotion_id,gold_response\n"
GOOD_ROW = '"seeker: I lost my keys again.",I lost my keys.,0,That is so annoying.\n'


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
]


@pytest.mark.parametrize("cli, argv, needle", CASES, ids=[f"{c[0]} {c[1].split()[0]} {i}" for i, c in enumerate(CASES)])
def test_bad_input_exits_nonzero_with_one_line(tmp_path, capsys, monkeypatch, dialogues_dir, cli, argv, needle):
    monkeypatch.chdir(tmp_path)  # relative defaults (runs/...) land here, never in the checkout
    files = _files(tmp_path)
    names = {**{k: str(v) for k, v in files.items()}, "out": str(tmp_path / "out")}
    names.update({"missing.csv": str(tmp_path / "missing.csv"), "missing.yaml": str(tmp_path / "missing.yaml")})
    names.update({"missing_dir": str(tmp_path / "missing_dir"), "traces": str(tmp_path / "traces")})
    names["dialogues"] = dialogues_dir
    args = [re.sub(r"\{([^}]+)\}", lambda m: names[m.group(1)], part) for part in argv.split()]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    try:
        code = CLIS[cli](args)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    captured = capsys.readouterr()
    output = captured.err + captured.out
    assert code not in (0, None), output
    assert "Traceback" not in output
    assert needle in output, output
    assert {p: p.read_bytes() for p in before} == before  # nothing that existed was changed


def test_a_quoted_header_after_a_bom_reads_and_an_all_bad_file_still_gets_its_skip_report(tmp_path, capsys):
    files = _files(tmp_path)
    assert eval_cli.main(["score", "--responses", str(files["bom_quoted.csv"]), "--column", "response"]) == 0
    assert '"n": 1' in capsys.readouterr().out
    out = tmp_path / "out"
    code = data_prep_cli.main(
        ["dialogues", "--source", str(files["badlabel.csv"]), "--skip-invalid", "--out", str(out)]
    )
    assert code == 2 and "joyous" in (out / "skipped.jsonl").read_text()
