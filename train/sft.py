"""Per-role LoRA SFT: load the base once, then train, save and detach one adapter per role.

The recipe is short on purpose (torchtune style): `train_roles` loads the base model and tokenizer,
and for each role `train_role` wraps the base in a fresh LoRA adapter, runs TRL's `SFTTrainer` on the
role's prompt-completion dataset (loss on completion tokens only), saves the adapter to
`<output_dir>/<role>/` with its metadata and model card (`distill.adapters.adapters` owns that folder), and
unloads the LoRA layers so the next role starts from the untouched base weights.

Speed on CPU comes from padding-free batches (no compute spent on pad tokens), compact student
prompts and no gradient checkpointing; see benchmarks/train_throughput.py for the measurements.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Optional

import torch
from datasets import DatasetDict, load_from_disk
from datasets import config as datasets_config
from transformers import AutoModelForCausalLM, AutoTokenizer

from data_prep.models import hub_id, resolve_model
from distill.adapters.adapters import point_config_at_hub, push_adapter, role_repo, write_metadata
from distill.backends.attention import use_cpu_attention
from distill.roles.roles import STUDENT_PROMPT_VERSION
from distill.version import __version__
from train import convergence
from train.adapter_card import card_example
from train.adapter_save import save_adapter
from train.completion_head import completion_head_trainer
from train.config import ConfigError, DistillArguments, TrainConfig
from train.plan import plan_line, training_plan
from train.precision import base_dtype, check_attention
from train.preflight import check_base_model, check_launch
from train.resume import RecordCheckpoint, last_checkpoint, tokens_at

REQUIRED_COLUMNS = ("prompt", "completion")


def log(message: str) -> None:
    """Console line on the main process only, so DDP runs do not print everything twice."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[train] {message}", flush=True)


def load_role_dataset(datasets_dir: str | Path, role: str) -> DatasetDict:
    """One role's DatasetDict, checked for the splits and columns training needs.

    `datasets_dir` is a folder of saved role datasets (`distill datasets --out`), or one hub dataset
    with a config per role (`--push-to-hub`): its repo id, or the staged `<out>/hub/` folder.
    """
    path = Path(datasets_dir) / role
    if (path / datasets_config.DATASETDICT_JSON_FILENAME).is_file():
        data = _load_saved(path)
    elif (Path(datasets_dir) / "README.md").is_file() or _maybe_hub_id(str(datasets_dir)):
        data = _load_hub_role(str(datasets_dir), role)
    else:
        raise ConfigError(f"{path}: no dataset for role '{role}' (build it with `python -m distill datasets`)")
    if not isinstance(data, DatasetDict) or "train" not in data:
        raise ConfigError(f"{path}: expected a DatasetDict with a 'train' split")
    missing = [c for c in REQUIRED_COLUMNS if c not in data["train"].column_names]
    if missing:
        raise ConfigError(f"{path}: split 'train' lacks column(s) {missing}; expected TRL prompt-completion rows")
    if len(data["train"]) == 0:
        raise ConfigError(f"{path}: split 'train' is empty")
    return data


def _load_saved(path: Path) -> DatasetDict:
    # In memory: `map` would otherwise write its cache-*.arrow files into the input folder.
    try:
        return load_from_disk(str(path), keep_in_memory=True)
    except (OSError, ValueError, KeyError, TypeError) as err:  # a damaged dataset_dict.json or arrow file
        first_line = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(f"{path}: cannot load the role dataset ({type(err).__name__}: {first_line})") from None


def _maybe_hub_id(name: str) -> bool:
    """A missing folder that could be a hub dataset 'owner/name'; the default folder is never looked up
    there (a lookup that fails costs half a minute before the error)."""
    if Path(name).exists() or name == DistillArguments.dataset_name:
        return False
    return name.count("/") == 1 and not name.startswith((".", "/", "~"))


def _load_hub_role(repo: str, role: str) -> DatasetDict:
    from distill.datasets.hub_dataset import load_role

    try:
        return load_role(repo, role)
    except Exception as err:  # offline, unknown repo or config: datasets raises many types, all end the same way
        first_line = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"{repo}: no dataset for role '{role}' there, as a folder or a hub dataset ({type(err).__name__}: "
            f"{first_line})"
        ) from None


def load_base(cfg: TrainConfig):
    """The base model (its weights in `base_dtype`, or 4-bit with bf16 compute for QLoRA) and its tokenizer."""
    path = resolve_model(cfg.model.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    kwargs: dict = {"dtype": base_dtype(cfg)}
    if cfg.model.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=cfg.model.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=cfg.model.use_bnb_nested_quant,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        if cfg.device() == "cpu":
            kwargs["device_map"] = {"": "cpu"}
        else:  # bitsandbytes quantises on the GPU this process trains on (its local rank under accelerate)
            kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", 0))}
    if cfg.model.attn_implementation:
        kwargs["attn_implementation"] = cfg.model.attn_implementation
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if cfg.model.load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.sft.gradient_checkpointing)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, path


def attend_by_example(base, cfg: TrainConfig) -> bool:
    """Padding-free CPU training on distill's CPU attention, unless the config names an attention.

    transformers' sdpa gets one flattened row and a block-diagonal mask: it attends every example to every
    other and masks the result away. This attends within each example (distill.backends.attention).
    """
    if cfg.device() != "cpu" or not cfg.sft.padding_free or cfg.model.attn_implementation:
        return False
    return use_cpu_attention(base)


def with_new_lora(base, cfg: TrainConfig):
    """`base` wrapped in a fresh LoRA whose initial weights depend on `seed` alone.

    The Trainer seeds only when it is built, after the LoRA exists: unseeded, a role's init came from whatever
    the process had drawn before, so a role trained alone (`--roles cae`) started from another init than the
    same role trained after others, and the first role's depended on what ran before it.
    """
    from peft import get_peft_model
    from transformers import set_seed

    set_seed(cfg.sft.seed)
    # The default adapter name keeps the files at <out>/ (a named adapter goes to a subfolder, which
    # breaks both vLLM paths and Trainer's resume: transformers#28531).
    model = get_peft_model(base, lora_config(cfg))
    if cfg.distill.init_adapter:
        start_from_adapter(model, cfg.distill.init_adapter)
    return model


def start_from_adapter(model, folder: str) -> None:
    """Copy the LoRA weights of the adapter in `folder` into `model`'s fresh (trainable) LoRA. Loaded into the LoRA
    this run's config built, not as the saved adapter's own (`PeftModel.from_pretrained(is_trainable=True)`), so the
    train config keeps saying what trains; an adapter of other modules is refused, not half copied."""
    from peft import get_peft_model_state_dict, load_peft_weights, set_peft_model_state_dict

    weights = load_peft_weights(folder, device="cpu")
    ours = get_peft_model_state_dict(model)
    if set(weights) != set(ours) or any(weights[k].shape != ours[k].shape for k in ours):
        other = sorted(set(weights) ^ set(ours)) or [k for k in ours if weights[k].shape != ours[k].shape]
        raise ConfigError(f"init_adapter: {folder} does not fit this run's LoRA (first differing weight: {other[0]})")
    set_peft_model_state_dict(model, weights)


def lora_config(cfg: TrainConfig):
    """TRL's own LoraConfig from ModelConfig (lora_r, lora_alpha, lora_dropout, lora_target_modules, ...)."""
    from trl import get_peft_config

    # Without lora_modules_to_save an adapter is LoRA A/B matrices only: what vLLM's multi-LoRA serves.
    return get_peft_config(cfg.model)


def steps_for_budget(cfg: TrainConfig, n_train: int, mean_tokens: float, world_size: int) -> int:
    """max_steps that trains one role on about `max_tokens_budget` tokens (no budget: max_steps as given).

    A budget overrides `num_train_epochs`: a small dataset is seen as many times as the budget needs, so
    students of one curve point see the same tokens whatever their row counts and lengths. `max_steps`,
    when set, still caps it.
    """
    sft, budget = cfg.sft, cfg.distill.max_tokens_budget
    if budget <= 0:
        return sft.max_steps
    per_batch = sft.per_device_train_batch_size * sft.gradient_accumulation_steps * world_size
    # An epoch is ceil(n / per_batch) steps over all n rows: its last step is short, so a step holds
    # n * mean / ceil(n / per_batch) tokens on average, not per_batch * mean (18 rows at 8 a step: 6, not 8).
    epoch_tokens = max(1.0, n_train * mean_tokens)
    steps = max(1, round(budget / epoch_tokens * math.ceil(max(n_train, 1) / per_batch)))
    return steps if sft.max_steps <= 0 else min(steps, sft.max_steps)


def trainer_class(cfg: TrainConfig):
    """TRL's SFTTrainer, or its subclass with the completion-only LM head where the config turns it on."""
    from trl import SFTTrainer

    return completion_head_trainer() if cfg.use_completion_head() else SFTTrainer


def role_args(cfg: TrainConfig, role: str, checkpoints: Path, has_eval: bool):
    """The run's SFTConfig, made specific to one role: its checkpoints, run name and eval split."""
    sft = cfg.sft
    settings = dict(
        output_dir=str(checkpoints),
        run_name=f"{sft.run_name or Path(sft.output_dir).resolve().name}-{role}",
        # padding-free without packing cannot enforce max_length in TRL; we truncate ourselves instead.
        max_length=None if (sft.padding_free and not sft.packing) else sft.max_length,
        # The adapter, with its card, is pushed by `publish`; the Trainer would push checkpoints instead.
        push_to_hub=False,
        hub_model_id=None,
        eval_strategy=sft.eval_strategy if has_eval else "no",
        do_eval=has_eval,
        ddp_find_unused_parameters=False if sft.ddp_find_unused_parameters is None else sft.ddp_find_unused_parameters,
    )
    return dataclasses.replace(sft, **{**settings, **convergence.argument_overrides(cfg)})


def truncate_dataset(dataset, max_length: int):
    """Keep the first max_length tokens (and their loss mask) of every tokenized row."""
    cols = [
        c
        for c in ("input_ids", "labels", "completion_mask", "assistant_masks", "attention_mask")
        if c in dataset.column_names
    ]
    too_long = sum(1 for n in (len(ids) for ids in dataset["input_ids"]) if n > max_length)
    if too_long == 0:
        return dataset
    log(f"truncating {too_long} example(s) longer than max_length={max_length}")
    return dataset.map(lambda row: {c: row[c][:max_length] for c in cols}, desc="truncate")


def token_counts(dataset) -> dict:
    """Prompt and completion token totals of the tokenized train split (what the loss sees)."""
    total = sum(len(ids) for ids in dataset["input_ids"])
    # TRL folds the completion mask into `labels` (-100 outside the completion).
    completion = (
        sum(sum(t != -100 for t in labels) for labels in dataset["labels"])
        if "labels" in dataset.column_names
        else None
    )
    return {
        "examples": len(dataset),
        "tokens": total,
        "completion_tokens": completion,
        "mean_tokens": round(total / max(len(dataset), 1), 1),
    }


def trained_from(cfg: TrainConfig, data: DatasetDict) -> dict:
    """What an adapter, or a checkpoint on the way to it, was trained from: a recipe retrains when one changes."""
    return {
        "prompt_version": STUDENT_PROMPT_VERSION,
        "dataset_fingerprint": data["train"]._fingerprint,
        "train_config": cfg.to_dict(),
    }


def adapter_metadata(
    cfg: TrainConfig,
    role: str,
    base_path: str,
    data: DatasetDict,
    trainer,
    counts: dict,
    seconds: float,
    metrics: dict,
    resume_from: Optional[str],
) -> dict:
    """What the adapter's metadata file records: enough to tell which data, prompts and base made an adapter."""
    return {
        "role": role,
        "base_model": cfg.model.model_name_or_path,
        "base_model_hub_id": hub_id(cfg.model.model_name_or_path),
        "base_model_path": base_path,
        "dataset_dir": str(Path(cfg.distill.dataset_name) / role),
        "init_adapter": cfg.distill.init_adapter or None,  # where it started (train_config: what that held)
        **trained_from(cfg, data),
        "lora": {
            "r": cfg.model.lora_r,
            "alpha": cfg.model.lora_alpha,
            "dropout": cfg.model.lora_dropout,
            "target_modules": cfg.model.lora_target_modules,
        },
        "world_size": trainer.args.world_size,
        "distributed_type": trainer.accelerator.distributed_type.value,  # NO, MULTI_CPU, FSDP, DEEPSPEED...
        "global_step": trainer.state.global_step,
        "resumed_from": Path(resume_from).name if resume_from else None,
        "train_seconds": round(seconds, 2),
        "train_loss": metrics.get("train_loss"),
        "eval_loss": metrics.get("eval_loss"),
        "tokens": counts,
        "tokens_seen": int(getattr(trainer, "_total_train_tokens", 0)),
        "quantized_4bit": cfg.model.load_in_4bit,
        "base_dtype": str(next(trainer.model.parameters()).dtype).removeprefix("torch."),
        "trace_distill_version": __version__,
    }


def publish(out: Path, meta: dict, cfg: TrainConfig) -> None:
    """Make the saved adapter hub-ready (hub id as its base, a model card), and push it if asked."""
    from train.adapter_card import write_adapter_card

    point_config_at_hub(out, meta)
    write_adapter_card(out, cfg.sft.hub_model_id or None)
    if cfg.sft.push_to_hub:
        url = push_adapter(out, role_repo(cfg.sft.hub_model_id, meta["role"]), private=bool(cfg.sft.hub_private_repo))
        log(f"{meta['role']}: pushed to {url}")


def _last_checkpoint(cfg: TrainConfig, role: str, checkpoints: Path) -> Optional[str]:
    if not cfg.distill.resume:
        return None
    found = last_checkpoint(checkpoints)
    if found is None:
        log(f"{role}: --resume given but no checkpoint in {checkpoints}; starting fresh")
    return found


def make_trainer(model, tokenizer, cfg: TrainConfig, role: str, data: DatasetDict, callbacks: Optional[list]):
    """The role's SFTTrainer (its dataset truncated, its steps capped by the token budget) and token counts."""
    has_validation = "validation" in data and len(data["validation"]) > 0
    # Evaluation during training only when asked; the validation split is always scored once at the
    # end (train_role), so the adapter's metadata and card carry its validation loss.
    has_eval = (cfg.sft.do_eval or cfg.sft.eval_strategy != "no") and has_validation
    args = role_args(cfg, role, Path(cfg.sft.output_dir) / role / "checkpoints", has_eval)
    trainer = trainer_class(cfg)(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["validation"] if has_validation else None,
        processing_class=tokenizer,
        callbacks=[*(callbacks or []), *convergence.callbacks(cfg)],
    )
    if cfg.sft.padding_free and not cfg.sft.packing:
        trainer.train_dataset = truncate_dataset(trainer.train_dataset, cfg.sft.max_length)
    counts = token_counts(trainer.train_dataset)
    budget_steps = steps_for_budget(cfg, counts["examples"], counts["mean_tokens"], trainer.args.world_size)
    if budget_steps != cfg.sft.max_steps:
        trainer.args.max_steps = budget_steps
        log(f"{role}: max_tokens_budget {cfg.distill.max_tokens_budget} -> max_steps {budget_steps}")
    log(f"{role}: plan: {plan_line(training_plan(cfg, counts, trainer.args.world_size, trainer.args.max_steps))}")
    return trainer, counts


def train_role(
    base, tokenizer, base_path: str, cfg: TrainConfig, role: str, callbacks: Optional[list] = None
) -> tuple[object, dict]:
    """Train one role's adapter on `base`; returns (the base with LoRA removed, the metadata)."""
    data = load_role_dataset(cfg.distill.dataset_name, role)
    out = Path(cfg.sft.output_dir) / role
    resume_from = _last_checkpoint(cfg, role, out / "checkpoints")
    attend_by_example(base, cfg)
    model = with_new_lora(base, cfg)
    trainer, counts = make_trainer(model, tokenizer, cfg, role, data, callbacks)
    trainer.add_callback(RecordCheckpoint(trainer, trained_from(cfg, data)))
    if resume_from:  # TRL counts from 0 at each start; the adapter records the tokens of the whole run
        seen = tokens_at(resume_from)
        if seen is None:
            log(f"{role}: {Path(resume_from).name} records no token count; tokens_seen counts this run's tokens only")
        trainer._total_train_tokens = seen or 0
    trainable, total = model.get_nb_trainable_parameters()
    log(
        f"{role}: {counts['examples']} examples, {counts['tokens']} tokens, world_size {trainer.args.world_size}, "
        f"LoRA r={cfg.model.lora_r} trainable {trainable:,}/{total:,}"
        + (f", resuming from {resume_from}" if resume_from else "")
    )
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume_from)
    seconds = time.perf_counter() - start
    converged = convergence.record(cfg, trainer.state)  # before the final evaluate adds to the log
    metrics = dict(result.metrics)
    if trainer.eval_dataset is not None:
        metrics.update(trainer.evaluate())
    meta = adapter_metadata(cfg, role, base_path, data, trainer, counts, seconds, metrics, resume_from)
    if converged:
        meta["convergence"] = converged
        how = "stopped early at" if converged["stopped_early"] else "trained all"
        kept = "?" if converged["best_epoch"] is None else f"{converged['best_epoch']:g}"
        log(f"{role}: {how} {converged['stopped_at_epoch']:g} epochs, kept epoch {kept}")
    meta["lora_fingerprint"] = save_adapter(trainer, out)
    if trainer.is_world_process_zero():
        # sharded: rank 0 alone cannot decode; the joint adapter's card shows no single role's example
        sharded = trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled
        spec = cfg.roles().get(role)  # None for the joint adapter
        if spec is not None and cfg.distill.card_example and not sharded:
            meta["example"] = card_example(model, tokenizer, data, spec.max_new_tokens)
        write_metadata(out, meta)
        publish(out, meta, cfg)
        log(f"{role}: saved adapter to {out} ({seconds:.1f} s, loss {meta['train_loss']})")
    trainer.accelerator.wait_for_everyone()
    base = model.unload()  # drop the LoRA layers without merging: the next role starts from the pure base
    del trainer, model
    return base, meta


def train_roles(cfg: TrainConfig, callbacks: Optional[list] = None) -> list[dict]:
    """Train every configured role in turn from one base-model load; returns each role's metadata."""
    roles = cfg.role_list()
    if cfg.distill.num_threads > 0:
        torch.set_num_threads(cfg.distill.num_threads)
    for role in roles:  # fail on a missing dataset or a bad option before spending time on the model
        convergence.check_validation(cfg, role, load_role_dataset(cfg.distill.dataset_name, role))
    check_base_model(cfg)
    check_launch(cfg)
    check_attention(cfg, warn=log)
    base, tokenizer, base_path = load_base(cfg)
    log(f"base {cfg.model.model_name_or_path} loaded from {base_path}; roles: {', '.join(roles)}")
    results = []
    for role in roles:
        base, meta = train_role(base, tokenizer, base_path, cfg, role, callbacks)
        results.append(meta)
    return results
