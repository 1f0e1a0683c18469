"""Per-role LoRA training on the real embedded model: tiny datasets, a few steps each.

What is checked is behaviour: LoRA weights move while base weights do not, every role starts from a
fresh adapter, saved adapters load back (PEFT, the local backend, merged export) and change the
output, QLoRA trains on CPU, two-rank DDP really runs two processes, and --resume continues from the
last checkpoint with its weights.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from distill import __version__
from distill.adapters.adapters import METADATA_FILE, read_metadata
from distill.roles.roles import ROLES, STUDENT_PROMPT_VERSION, RoleInput
from train.adapter_save import check_loaded_adapter
from train.config import ConfigError
from train.config_load import config_from_dict
from train.sft import train_roles

REPO = Path(__file__).resolve().parents[1]
TARGETS = {
    "asi": lambda d: {"emotion": d.emotion},
    "cae": lambda d: {"triggers": [d.turns[-1].text[:30]], "cause": d.situation, "category": "Loss & Failure"},
}


def build_role_datasets(root: Path, dialogues, roles=("asi", "cae"), copies: int = 2) -> Path:
    """What `python -m distill datasets` writes: one DatasetDict per role in TRL prompt-completion form."""
    from datasets import Dataset, DatasetDict

    for role in roles:
        rows = []
        for d in dialogues * copies:
            prompt = ROLES[role].render(RoleInput(dialogue=d), "student")
            completion = [{"role": "assistant", "content": json.dumps(TARGETS[role](d), separators=(",", ":"))}]
            rows.append(
                {
                    "prompt": prompt,
                    "completion": completion,
                    "messages": prompt + completion,
                    "dialogue_id": d.id,
                    "conv_id": d.conv_id,
                }
            )
        DatasetDict(train=Dataset.from_list(rows), validation=Dataset.from_list(rows[:2])).save_to_disk(
            str(root / role)
        )
    return root


@pytest.fixture(scope="module")
def role_datasets(tmp_path_factory, tiny_dialogues):
    return build_role_datasets(tmp_path_factory.mktemp("datasets"), tiny_dialogues)


def tiny_config(datasets: Path, out: Path, **overrides):
    values = dict(
        dataset_name=str(datasets),
        output_dir=str(out),
        roles="asi",
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=5e-3,
        warmup_steps=0.0,
        logging_steps=1,
        use_cpu=True,
        lora_r=8,
        lora_alpha=16,
        num_threads=1,
        card_example=False,
    )  # one thread: the CI CPU is shared, and oversubscribed torch threads crawl; the card's example answer
    # (greedy to the role's token cap on a barely trained adapter) only where a test reads it: `two_roles`
    values.update(overrides)
    return config_from_dict(values, source="test")


def _split_params(model):
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    base = {n.replace(".base_layer", ""): p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    return lora, base


class WeightWatch(TrainerCallback):
    """Records LoRA and base weights at the start and end of every role's training."""

    def __init__(self):
        self.snapshots = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.snapshots.append(("begin", *_split_params(model)))

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.snapshots.append(("end", *_split_params(model)))


@pytest.fixture(scope="module")
def two_roles(role_datasets, tmp_path_factory):
    """asi and cae trained in turn from one base-model load."""
    out = tmp_path_factory.mktemp("adapters")
    watch = WeightWatch()
    metas = train_roles(tiny_config(role_datasets, out, roles="asi,cae", card_example=True), callbacks=[watch])
    return out, metas, watch


@pytest.mark.slow
def test_two_roles_from_one_load_train_lora_only(two_roles, smollm_path):
    out, metas, watch = two_roles
    assert [m["role"] for m in metas] == ["asi", "cae"]
    assert [s[0] for s in watch.snapshots] == ["begin", "end", "begin", "end"]
    from transformers import AutoModelForCausalLM

    pristine = AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32).state_dict()
    for kind, lora, base in watch.snapshots:
        b_mats = [t for n, t in lora.items() if "lora_B" in n]
        # LoRA B starts at zero: a non-zero B at 'begin' would mean cae inherited asi's adapter.
        assert all(t.abs().sum() == 0 for t in b_mats) == (kind == "begin")
        for name, tensor in base.items():
            key = name.removeprefix("base_model.model.")
            assert torch.equal(tensor, pristine[key]), f"base weight {key} changed during {kind}"
    for meta in metas:
        saved = out / meta["role"]
        assert (saved / "adapter_config.json").is_file() and (saved / "adapter_model.safetensors").is_file()
        stored = json.loads((saved / METADATA_FILE).read_text())
        assert stored["prompt_version"] == STUDENT_PROMPT_VERSION and stored["base_model"] == "smollm2-135m"
        assert stored["global_step"] == 3 and stored["world_size"] == 1 and stored["dataset_fingerprint"]
        assert stored["tokens"]["completion_tokens"] > 0 and stored["train_seconds"] > 0
        assert stored["trace_distill_version"] == __version__
        assert "modules_to_save" not in json.dumps(
            json.loads((saved / "adapter_config.json").read_text()).get("modules_to_save") or ""
        )


@pytest.mark.slow
def test_adapter_loads_back_and_changes_output(two_roles, smollm_path, tiny_dialogues):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _, _ = two_roles
    tok = AutoTokenizer.from_pretrained(smollm_path)
    prompt = ROLES["asi"].render(RoleInput(dialogue=tiny_dialogues[0]), "student")
    ids = tok.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    base = AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = base(**ids).logits
        tuned = PeftModel.from_pretrained(base, str(out / "asi")).eval()
        tuned_logits = tuned(**ids).logits
    assert not torch.allclose(base_logits, tuned_logits, atol=1e-3)


@pytest.mark.slow
def test_local_backend_uses_trained_adapter(two_roles, tiny_dialogues):
    local = pytest.importorskip("distill.backends.local")
    from distill.backends.base import GenerationRequest

    out, _, _ = two_roles
    backend = local.LocalBackend(adapters=str(out), dtype="float32", batch_size=2)
    assert set(backend.adapter_names) == {"asi", "cae"}
    prompt = ROLES["asi"].render(RoleInput(dialogue=tiny_dialogues[2]), "student")
    tuned, plain = backend.generate(
        [
            GenerationRequest(prompt, max_new_tokens=12, adapter="asi"),
            GenerationRequest(prompt, max_new_tokens=12, adapter=None),
        ]
    )
    assert tuned.text != plain.text


@pytest.mark.slow
def test_export_merged_matches_adapter_and_vllm_line(two_roles, smollm_path, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from train.__main__ import main

    out, _, _ = two_roles
    assert main(["export", "--adapters", str(out), "--format", "vllm", "--out", str(tmp_path / "vllm")]) == 0
    hub = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert capsys.readouterr().out.strip() == (
        f"exec vllm serve {hub} --served-model-name {hub} --enable-lora --max-lora-rank 8 --max-loras 2 "
        '--lora-modules asi="$here"/asi cae="$here"/cae "$@"'
    )
    # the export folder is self-contained: moved elsewhere, its script still names its own adapter copies
    moved = tmp_path / "elsewhere"
    (tmp_path / "vllm").rename(moved)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "vllm").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (fake / "vllm").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    argv = subprocess.run(
        ["sh", str(moved / "serve_vllm.sh"), "--port", "8001"], env=env, capture_output=True, text=True
    )
    args = argv.stdout.split()
    assert args[:2] == ["serve", hub] and args[-2:] == ["--port", "8001"]
    for role in ("asi", "cae"):
        path = Path(args[args.index("--lora-modules") + 1 + ["asi", "cae"].index(role)].split("=", 1)[1])
        assert path == moved.resolve() / role and (path / "adapter_config.json").is_file()
        assert not (path / "checkpoints").exists()

    from distill.adapters.adapters import find_adapters
    from train.export import export_merged

    export_merged({"asi": find_adapters(out)["asi"]}, tmp_path / "merged")
    ids = torch.tensor([[1, 520, 33, 4197, 28, 2]])
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged" / "asi", dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32)
    tuned = PeftModel.from_pretrained(base, str(out / "asi")).eval()
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, tuned(ids).logits, atol=1e-3)


class HubRecorder:
    """Stands in for `huggingface_hub.HfApi`: records the repos and the files an upload would send."""

    calls: list = []

    def create_repo(self, repo_id, repo_type=None, private=False, exist_ok=False):
        self.calls.append(("create_repo", repo_id, repo_type, private))

    def upload_folder(self, folder_path, repo_id, repo_type=None, ignore_patterns=None, commit_message=None):
        from huggingface_hub.utils import filter_repo_objects

        files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
        sent = sorted(filter_repo_objects(files, ignore_patterns=ignore_patterns))
        self.calls.append(("upload_folder", repo_id, repo_type, sent))


@pytest.mark.slow
def test_adapter_folder_is_hub_ready_and_loads_with_plain_peft(two_roles, smollm_path):
    """The saved folder names the hub base, carries a real card, and plain PEFT gets the pipeline's logits."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from data_prep.models import SMOLLM2_HUB_ID
    from distill.backends.local import LocalBackend

    out, metas, _ = two_roles
    folder = out / "asi"
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == SMOLLM2_HUB_ID
    card = (folder / "README.md").read_text()
    assert "More Information Needed" not in card and f"base_model: {SMOLLM2_HUB_ID}" in card
    assert "library_name: peft" in card and "Q4_1 GGUF" in card and "`emotion`: anger, fear, disgust" in card
    assert f"tokens seen: {metas[0]['tokens_seen']:,}" in card and f"--lora-modules asi={folder}" in card
    assert f'"HuggingFaceTB/SmolLM2-135M-Instruct"), "{folder}")' in card
    assert f"validation {round(metas[0]['eval_loss'], 4)}" in card and metas[0]["eval_loss"] > 0
    # The card's own code, as printed, on the embedded base (the hub is out of reach): its answer is the
    # card's example answer and validates against the role's student schema.
    python = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    scope: dict = {}
    exec("\n".join(python).replace(SMOLLM2_HUB_ID, smollm_path), scope)
    example = re.search(r"```json\n(.*?)\n```", card, flags=re.S).group(1)
    assert scope["answer"] == example == metas[0]["example"]["answer"]
    ROLES["asi"].schema_for("student").model_validate_json(scope["answer"])

    backend = LocalBackend("smollm2-135m", adapters=str(out), dtype="float32")
    ids = torch.tensor([backend.encode([{"role": "user", "content": "I lost my keys again."}])[0]])
    with torch.no_grad(), backend.activate("asi"):
        pipeline_logits = backend.hf_model(ids).logits
    base = AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32)
    plain = PeftModel.from_pretrained(base, str(folder)).eval()
    with torch.no_grad():
        plain_logits = plain(ids).logits
    assert torch.allclose(pipeline_logits, plain_logits, atol=1e-3)
    with torch.no_grad(), plain.disable_adapter():  # and the adapter matters: the bare base differs
        assert not torch.allclose(plain(ids).logits, plain_logits, atol=1e-3)


@pytest.mark.slow
def test_push_to_hub_uploads_each_role_as_its_own_repo(role_datasets, tmp_path, monkeypatch):
    import huggingface_hub

    HubRecorder.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", HubRecorder)
    cfg = tiny_config(role_datasets, tmp_path, max_steps=1, push_to_hub=True, hub_model_id="me/td", save_steps=1)
    train_roles(cfg)
    assert HubRecorder.calls[0] == ("create_repo", "me/td-asi", "model", False)
    kind, repo, repo_type, sent = HubRecorder.calls[1]
    assert (kind, repo, repo_type) == ("upload_folder", "me/td-asi", "model")
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", METADATA_FILE} <= set(sent)
    assert "tokenizer.json" in sent and (tmp_path / "asi" / "checkpoints").is_dir()
    assert not [f for f in sent if f.startswith("checkpoints")]  # training state stays home
    assert "me/td-asi" in (tmp_path / "asi" / "README.md").read_text()


@pytest.mark.slow
def test_trl_style_yaml_trains_a_role(role_datasets, tmp_path):
    """A YAML written for `trl sft` (TRL's names only) trains a role through the CLI, as it is."""
    from train.__main__ import main

    trl_yaml = tmp_path / "sft.yaml"
    trl_yaml.write_text(
        "model_name_or_path: smollm2-135m\nper_device_train_batch_size: 4\nlearning_rate: 1.0e-3\n"
        "num_train_epochs: 1\nmax_steps: 2\nlora_r: 4\nlora_alpha: 8\nlogging_steps: 1\n"
        f"output_dir: {tmp_path / 'out'}\nuse_cpu: true\nbf16: false\n"
    )
    argv = [
        "--config",
        str(trl_yaml),
        "--dataset_name",
        str(role_datasets),
        "--roles",
        "asi",
        "--card_example",
        "false",
    ]
    assert main(argv) == 0
    meta = read_metadata(tmp_path / "out" / "asi")
    assert meta["global_step"] == 2 and meta["lora"]["r"] == 4
    assert meta["train_config"]["per_device_train_batch_size"] == 4 and meta["train_config"]["learning_rate"] == 1e-3
    # training reads its datasets and writes nothing beside them (TRL's `map` used to leave cache-*.arrow there)
    assert not list(role_datasets.rglob("cache-*"))


@pytest.mark.slow
def test_trains_from_a_hub_dataset_payload(role_datasets, tmp_path):
    """`--datasets` may be one hub dataset with a config per role: here the staged payload `--push-to-hub` sends."""
    from datasets import load_from_disk

    from distill.datasets import hub_dataset

    staged = hub_dataset.stage({"asi": load_from_disk(str(role_datasets / "asi"))}, {"asi": None}, tmp_path / "hub")
    (meta,) = train_roles(tiny_config(staged, tmp_path / "out", max_steps=1))
    assert (
        meta["global_step"] == 1
        and meta["tokens"]["examples"] == load_from_disk(str(role_datasets / "asi"))["train"].num_rows
    )


def test_unknown_hub_dataset_is_one_line(tmp_path, monkeypatch):
    from train.sft import load_role_dataset

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"^nobody/nothing: no dataset for role 'asi' there"):
        load_role_dataset("nobody/nothing", "asi")


def test_push_to_hub_needs_a_repo_id(role_datasets, tmp_path):
    from train.config import ConfigError

    with pytest.raises(ConfigError, match="hub_model_id"):
        tiny_config(role_datasets, tmp_path, push_to_hub=True)


class StopAt(TrainerCallback):
    """Simulates an interrupted run: training halts right after `step` (its checkpoint is written)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


@pytest.mark.slow
def test_resume_continues_from_last_checkpoint(role_datasets, tmp_path):
    from safetensors.torch import load_file

    cfg = tiny_config(role_datasets, tmp_path, max_steps=4, save_steps=2, save_total_limit=3)
    train_roles(cfg, callbacks=[StopAt(2)])
    ckpt = tmp_path / "asi" / "checkpoints" / "checkpoint-2"
    assert (ckpt / "adapter_model.safetensors").is_file()
    saved = load_file(str(ckpt / "adapter_model.safetensors"))

    watch = WeightWatch()
    cfg.distill.resume = True
    (meta,) = train_roles(cfg, callbacks=[watch])
    assert meta["resumed_from"] == "checkpoint-2" and meta["global_step"] == 4
    # The resumed run must start from checkpoint-2's LoRA weights, not a fresh adapter (transformers#24252).
    _, lora_at_start, _ = watch.snapshots[0]
    for name, tensor in saved.items():
        match = [t for n, t in lora_at_start.items() if n.replace(".default", "") == name]
        assert match and torch.equal(match[0], tensor), name
    assert (tmp_path / "asi" / "checkpoints" / "checkpoint-4").is_dir()


class RunNames(TrainerCallback):
    def __init__(self):
        self.names = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.names.append(args.run_name)


@pytest.mark.slow
def test_shipped_cpu_config_resumes_and_names_each_role_run(role_datasets, tmp_path):
    """The shipped CPU config saves a quarter of each role's steps; --resume must find a checkpoint after a crash."""
    from train.config_load import read_yaml

    values = read_yaml(REPO / "configs" / "train" / "smollm2-cpu.yaml")
    assert values["save_steps"] < 1  # a ratio of the role's steps
    # 4 steps: the ratio saves at steps 1, 2, 3 and 4
    values.update(dataset_name=str(role_datasets), output_dir=str(tmp_path / "run7"), roles="asi,cae", max_steps=4)
    values.update(
        max_tokens_budget=0, per_device_train_batch_size=2, num_threads=1, logging_steps=1, card_example=False
    )
    cfg = config_from_dict(values, source="smollm2-cpu.yaml")
    names = RunNames()
    train_roles(cfg, callbacks=[StopAt(2), names])  # "crashes" after step 2 of each role
    assert names.names == ["run7-asi", "run7-cae"]  # one report_to run per role
    cfg.distill.resume = True
    metas = train_roles(cfg)
    assert [(m["resumed_from"], m["global_step"]) for m in metas] == [("checkpoint-2", 4), ("checkpoint-2", 4)]


@pytest.mark.slow
def test_qlora_4bit_trains_and_loads_on_full_precision_base(role_datasets, tmp_path, smollm_path):
    pytest.importorskip("bitsandbytes")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    # one step of one row: bitsandbytes' 4-bit matmul on a CPU is slow, and one step moves the weights
    config = tiny_config(role_datasets, tmp_path, max_steps=1, per_device_train_batch_size=1, load_in_4bit=True)
    (meta,) = train_roles(config)
    assert meta["quantized_4bit"] and meta["global_step"] == 1
    base = AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 520, 33, 4197, 28, 2]])
    with torch.no_grad():
        before = base(ids).logits
        after = PeftModel.from_pretrained(base, str(tmp_path / "asi")).eval()(ids).logits
    assert torch.isfinite(after).all() and not torch.allclose(before, after, atol=1e-4)


def _launch(
    accelerate_config: str, role_datasets: Path, tmp_path: Path, steps: tuple[str, ...] = ("--max_steps", "2")
) -> subprocess.CompletedProcess:
    """The README's launch form: accelerate runs the console entry, so a `train.py` in the cwd cannot shadow it."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "train.py").write_text("raise SystemExit('the cwd train.py ran instead of trace-distill')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO / "configs" / "accelerate" / accelerate_config),
        "--no_python",
        str(Path(sys.executable).parent / "trace-distill"),
        "train",
        "--dataset_name",
        str(role_datasets),
        "--roles",
        "asi",
        "--output_dir",
        str(tmp_path / "adapters"),
        *steps,
        "--per_device_train_batch_size",
        "2",
        "--logging_steps",
        "1",
        "--use_cpu",
        "true",
        "--lora_r",
        "4",
        "--num_threads",
        "1",
        "--card_example",
        "false",
    ]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


def assert_budget_trained(meta: dict, budget: int, rows_per_step: int) -> None:
    """The steps a budget gave, and the tokens they trained (gathered over ranks), are the budget's."""
    rows, tokens = meta["tokens"]["examples"], meta["tokens"]["tokens"]
    epoch_steps = -(-rows // rows_per_step)
    assert meta["global_step"] == max(1, round(budget / tokens * epoch_steps))
    assert meta["global_step"] > 1
    # Rows are drawn in shuffled order, so the tokens of the steps are the budget within about a step's worth.
    assert abs(meta["tokens_seen"] - budget) <= 1.5 * tokens / epoch_steps


@pytest.mark.slow
def test_budget_trains_past_the_epoch_cap_and_sees_its_tokens(role_datasets, tmp_path):
    """A small dataset under a budget is seen as often as the budget needs (num_train_epochs does not cap it)."""
    # 1,500 tokens: about two epochs of the 804-token dataset
    cfg = tiny_config(role_datasets, tmp_path, max_steps=-1, num_train_epochs=1, max_tokens_budget=1500)
    (meta,) = train_roles(cfg)
    epoch_steps = -(-meta["tokens"]["examples"] // 4)
    assert meta["global_step"] > epoch_steps  # more than the one epoch the config names
    assert_budget_trained(meta, budget=1500, rows_per_step=4)


@pytest.mark.slow
def test_a_config_that_names_epochs_and_no_budget_trains_exactly_those_epochs(role_datasets, tmp_path, capsys):
    """No budget unless one is set: `num_train_epochs: 1` trains one epoch, and the plan says so before training."""
    cfg = tiny_config(role_datasets, tmp_path, max_steps=-1, num_train_epochs=1)
    assert cfg.distill.max_tokens_budget == 0
    (meta,) = train_roles(cfg)
    rows = meta["tokens"]["examples"]
    assert meta["global_step"] == -(-rows // 4)  # ceil(rows / batch 4): one pass
    plan = f"asi: plan: {rows:,} rows, {-(-rows // 4)} steps, 1 epochs, ~{meta['tokens']['tokens']:,} tokens"
    assert plan in capsys.readouterr().out


def _validation_with_wrong_answers(root: Path, dialogues) -> Path:
    """asi rows whose validation answers are another emotion than the train rows': the more the role learns its
    train answers, the higher its validation loss climbs after the first epochs."""
    from datasets import load_from_disk

    build_role_datasets(root, dialogues, roles=("asi",))
    data = load_from_disk(str(root / "asi"))
    swap = {"sadness": "joy", "joy": "anger", "anger": "fear"}
    rows = [
        {
            **r,
            "completion": [
                {
                    "role": "assistant",
                    "content": json.dumps(
                        {"emotion": swap.get(json.loads(r["completion"][0]["content"])["emotion"], "sadness")},
                        separators=(",", ":"),
                    ),
                }
            ],
        }
        for r in data["train"]
    ]
    data["validation"] = type(data["train"]).from_list(rows)
    data.save_to_disk(str(root / "wrong" / "asi"))
    return root / "wrong"


@pytest.mark.slow
def test_early_stopping_stops_on_the_validation_loss_and_keeps_the_best_epoch(tmp_path, tiny_dialogues):
    """Patience 1, validation answers the train rows contradict: the role stops after the epoch that did not
    improve, and the adapter kept is the best epoch's, whose validation loss the final evaluation finds again."""
    datasets = _validation_with_wrong_answers(tmp_path / "datasets", tiny_dialogues)
    cfg = tiny_config(datasets, tmp_path / "out", max_steps=-1, num_train_epochs=8, early_stopping_patience=1)
    (meta,) = train_roles(cfg)
    run = meta["convergence"]
    losses = dict(run["eval_loss_by_epoch"])
    assert len(losses) == round(run["stopped_at_epoch"]) < 8 and run["stopped_early"], run
    assert run["best_epoch"] == min(losses, key=losses.get) < run["stopped_at_epoch"]
    assert meta["eval_loss"] == pytest.approx(run["best_eval_loss"], rel=1e-4)  # the best epoch's adapter was saved
    assert meta["train_config"]["early_stopping_patience"] == 1  # part of what the adapter's key reads


def test_early_stopping_without_a_validation_split_is_one_line(tmp_path, tiny_dialogues):
    from datasets import load_from_disk

    root = build_role_datasets(tmp_path / "datasets", tiny_dialogues, roles=("asi",))
    train_only = load_from_disk(str(root / "asi"))
    del train_only["validation"]
    train_only.save_to_disk(str(tmp_path / "train-only" / "asi"))
    cfg = tiny_config(tmp_path / "train-only", tmp_path / "out", early_stopping_patience=2)
    with pytest.raises(
        ConfigError, match=r"^early_stopping_patience: role 'asi' has no validation split in .*--eval-fraction"
    ):
        train_roles(cfg)


def assert_rank0_saved_what_it_trained(adapters: Path, base_path: str, distributed_type: str) -> None:
    """One whole adapter, written by rank 0 alone, that plain PEFT loads with rank 0's trained weights."""
    report = check_loaded_adapter(adapters / "asi")  # what benchmarks/check_adapter.py prints
    assert (report["world_size"], report["distributed_type"]) == (2, distributed_type)
    assert sorted(p.name for p in adapters.iterdir()) == ["asi"]  # written by rank 0 only
    n_layers = json.loads(Path(base_path, "config.json").read_text())["num_hidden_layers"]
    assert report["lora_b"] == report["lora_b_moved"] == 7 * n_layers  # every all-linear target, trained
    assert report["matches_trained_weights"] and report["ok"]  # the fingerprint taken before the save


@pytest.mark.slow
def test_accelerate_two_process_ddp_on_cpu(role_datasets, tmp_path, smollm_path):
    # Trained under a token budget, not max_steps: the steps must count both ranks' batches.
    run = _launch("cpu-ddp.yaml", role_datasets, tmp_path, ("--max_steps", "-1", "--max_tokens_budget", "900"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "world_size 2" in run.stdout
    assert_rank0_saved_what_it_trained(tmp_path / "adapters", smollm_path, "MULTI_CPU")
    assert_budget_trained(read_metadata(tmp_path / "adapters" / "asi"), budget=900, rows_per_step=2 * 2)


@pytest.mark.slow
def test_accelerate_deepspeed_zero2_on_cpu(role_datasets, tmp_path, smollm_path):
    # DeepSpeed is not a toolkit dependency (CI lacks it); with it installed, its CPU accelerator and
    # gloo run the shipped ZeRO-2 config as two processes
    pytest.importorskip("deepspeed")
    run = _launch("deepspeed-zero2.yaml", role_datasets, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert_rank0_saved_what_it_trained(tmp_path / "adapters", smollm_path, "DEEPSPEED")


@pytest.mark.slow
def test_accelerate_fsdp_on_cpu_is_refused_in_one_line(role_datasets, tmp_path):
    # accelerate would train an FSDP config on CPU as plain DDP and say nothing (train.preflight.check_launch)
    run = _launch("fsdp.yaml", role_datasets, tmp_path)
    assert run.returncode != 0
    assert "an FSDP launch needs GPUs" in run.stderr, run.stderr[-3000:]
    assert not (tmp_path / "adapters" / "asi").exists()


def test_fsdp_check_reads_accelerates_launch_variable(role_datasets, tmp_path):
    from train.config import ConfigError
    from train.preflight import check_launch

    cfg = tiny_config(role_datasets, tmp_path)
    check_launch(cfg, environ={})
    check_launch(cfg, environ={"ACCELERATE_USE_FSDP": "false"})
    with pytest.raises(ConfigError, match="an FSDP launch needs GPUs"):
        check_launch(cfg, environ={"ACCELERATE_USE_FSDP": "true"})


@pytest.mark.slow
def test_completion_head_loss_and_gradients_equal_trls(role_datasets, tmp_path):
    """The completion-only LM head is an optimisation, not a different objective: same loss, same grads."""
    from peft import get_peft_model
    from trl import SFTTrainer

    from train.completion_head import completion_head_trainer
    from train.sft import load_base, load_role_dataset, lora_config, role_args

    cfg = tiny_config(role_datasets, tmp_path, bf16=False, padding_free=True)  # as the shipped CPU config
    base, tokenizer, _ = load_base(cfg)
    model = get_peft_model(base, lora_config(cfg))
    data = load_role_dataset(cfg.distill.dataset_name, "asi")["train"]
    results = []
    for cls in (SFTTrainer, completion_head_trainer()):
        trainer = cls(
            model=model,
            args=role_args(cfg, "asi", tmp_path / cls.__name__, False),
            train_dataset=data,
            processing_class=tokenizer,
        )
        if cls is not SFTTrainer:
            assert trainer._own_loss_applies(return_outputs=False)  # this run takes the completion-head path
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        n_items = (batch["labels"][:, 1:] != -100).sum()
        model.zero_grad()
        loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=n_items)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss.item(), grads, trainer._metrics["train"]["mean_token_accuracy"][-1]))
    (trl_loss, trl_grads, trl_acc), (our_loss, our_grads, our_acc) = results
    assert "position_ids" in batch and batch["input_ids"].shape[0] == 1  # padding-free: one flattened row
    assert our_loss == pytest.approx(trl_loss, rel=1e-4)
    assert our_grads.keys() == trl_grads.keys() and len(our_grads) > 0
    for name, grad in trl_grads.items():  # fp32 sums in another order: compare each tensor as a whole
        err = ((our_grads[name] - grad).norm() / grad.norm().clamp(min=1e-12)).item()
        assert err < 1e-3, f"{name}: relative gradient error {err:.2e}"
    assert our_acc == pytest.approx(trl_acc)


@pytest.mark.slow  # loads the embedded model twice
def test_padding_free_training_attends_by_example_with_sdpas_loss_and_gradients(role_datasets, tmp_path, monkeypatch):
    """The shipped CPU recipe loads the base on distill's CPU attention: the same objective, computed by example."""
    from peft import get_peft_model

    from distill.backends import attention
    from train.sft import attend_by_example, load_base, load_role_dataset, lora_config, role_args, trainer_class

    calls = []
    real = attention._by_example
    monkeypatch.setattr(attention, "_by_example", lambda *a: calls.append(len(a[3])) or real(*a))
    results = []
    for implementation in (None, "sdpa"):  # None: the recipe's choice
        cfg = tiny_config(role_datasets, tmp_path, bf16=False, padding_free=True, attn_implementation=implementation)
        torch.manual_seed(0)
        base, tokenizer, _ = load_base(cfg)
        assert attend_by_example(base, cfg) is (implementation is None)  # as train_role does
        model = get_peft_model(base, lora_config(cfg))
        trainer = trainer_class(cfg)(
            model=model,
            args=role_args(cfg, "asi", tmp_path / str(implementation), False),
            train_dataset=load_role_dataset(cfg.distill.dataset_name, "asi")["train"],
            processing_class=tokenizer,
        )
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=(batch["labels"][:, 1:] != -100).sum())
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        results.append((base.config._attn_implementation, loss.item(), grads, len(calls)))
    (ours, our_loss, our_grads, our_calls), (theirs, their_loss, their_grads, their_calls) = results
    assert (ours, theirs) == (attention.NAME, "sdpa") and their_calls == our_calls > 0  # sdpa never called it
    assert set(calls) == {4}  # four examples in the flattened row, attended one by one in every layer
    assert our_loss == pytest.approx(their_loss, rel=1e-5)
    for name, grad in their_grads.items():
        err = ((our_grads[name] - grad).norm() / grad.norm().clamp(min=1e-12)).item()
        assert err < 1e-4, f"{name}: relative gradient error {err:.2e}"


def test_padding_free_attention_benchmark_times_both_attentions_on_the_same_objective(tmp_path, monkeypatch):
    """benchmarks/padding_free_attention.py (the bf16-machine A/B): its by_example variant really attends by
    example (a cache in its forward would hide the packed row from transformers), with sdpa's loss."""
    import importlib.util

    from transformers import LlamaConfig

    from distill.backends import attention

    script = Path(__file__).parents[1] / "benchmarks" / "padding_free_attention.py"
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/...` has it
    spec = importlib.util.spec_from_file_location("pf_bench", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    LlamaConfig(**shape, num_key_value_heads=2, vocab_size=128).save_pretrained(tmp_path / "tiny")
    calls = []
    real = attention._by_example
    monkeypatch.setattr(attention, "_by_example", lambda *a: calls.append(len(a[3])) or real(*a))
    out = tmp_path / "pf.json"
    argv = ["--model", str(tmp_path / "tiny"), "--lengths", "5,7,3", "--steps", "1", "--pairs", "1", "--out", str(out)]
    assert bench.main(argv) == 0
    (row,) = json.loads(out.read_text())["pairs"]
    assert row["sdpa"]["loss"] == pytest.approx(row["by_example"]["loss"], rel=1e-5)
    assert row["by_example_over_sdpa"] > 0
    assert calls and set(calls) == {3}  # three examples, in both layers of every by_example forward


@pytest.mark.slow  # loads the embedded model twice
def test_a_roles_lora_starts_from_the_seed_whatever_ran_before(role_datasets, tmp_path):
    """A role trained alone and the same role trained after others start from the same LoRA weights."""
    from train.sft import load_base, with_new_lora

    cfg = tiny_config(role_datasets, tmp_path)
    inits = []
    for earlier_draws in (1, 5):
        base, _, _ = load_base(cfg)
        torch.rand(earlier_draws)  # another role's training, say, moved the global generator
        model = with_new_lora(base, cfg)
        inits.append({n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n})
    assert inits[0] and inits[0].keys() == inits[1].keys()
    assert all(torch.equal(inits[0][n], inits[1][n]) for n in inits[0])


def test_load_base_loads_the_attention_the_config_names(role_datasets, tiny_model_dir, tmp_path):
    from train.sft import load_base

    for implementation in ("eager", "sdpa"):  # eager: not what transformers picks unasked
        cfg = tiny_config(
            role_datasets, tmp_path, model_name_or_path=tiny_model_dir, attn_implementation=implementation
        )
        base, _, _ = load_base(cfg)
        assert base.config._attn_implementation == implementation


@pytest.mark.slow  # trains a tiny model two steps, twice
def test_train_role_attends_by_example_and_seeds_each_roles_lora(role_datasets, tiny_model_dir, tmp_path, monkeypatch):
    """What the helpers' tests check, through `train_role` itself: the CPU recipe trains on distill's per-example
    attention, and a role's LoRA starts from the seed's init whatever the process drew before it."""
    from distill.backends import attention
    from train.sft import load_base, train_role

    calls = []
    real = attention._by_example
    monkeypatch.setattr(attention, "_by_example", lambda *a: calls.append(len(a[3])) or real(*a))
    cfg = tiny_config(role_datasets, tmp_path, model_name_or_path=tiny_model_dir, padding_free=True, bf16=False,
                      max_steps=2)  # fmt: skip
    base, tokenizer, path = load_base(cfg)
    inits = []
    for earlier_draws in (1, 5):
        torch.rand(earlier_draws)  # another role's training, say, moved the global generator
        watch = WeightWatch()
        base, meta = train_role(base, tokenizer, path, cfg, "asi", callbacks=[watch])
        inits.append(watch.snapshots[0][1])  # the LoRA weights as training began
        assert meta["global_step"] == 2
    assert base.config._attn_implementation == attention.NAME and 4 in calls  # a batch of four, one by one
    assert inits[0] and inits[0].keys() == inits[1].keys()
    assert all(torch.equal(inits[0][n], inits[1][n]) for n in inits[0])
