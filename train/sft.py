"""Per-role LoRA SFT: load the base once, then train, save and detach one adapter per role.

The recipe is short on purpose (torchtune style): `train_roles` loads the base model and tokenizer,
and for each role `train_role` wraps the base in a fresh LoRA adapter, runs TRL's `SFTTrainer` on the
role's prompt-completion dataset (loss on completion tokens only), saves the adapter to
`<output_dir>/<role>/` with its metadata and model card (`distill.adapters` owns that folder), and
unloads the LoRA layers so the next role starts from the untouched base weights.

Speed on CPU comes from padding-free batches (no compute spent on pad tokens), compact student
prompts and no gradient checkpointing; see benchmarks/train_throughput.py for the measurements.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Optional

import torch
from datasets import DatasetDict, load_from_disk
from datasets import config as datasets_config
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint

from data_prep.models import hub_id, resolve_model
from distill.adapters import point_config_at_hub, push_adapter, role_repo, write_metadata
from distill.roles import STUDENT_PROMPT_VERSION
from train.config import ConfigError, TrainConfig

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
        data = load_from_disk(str(path))
    elif (Path(datasets_dir) / "README.md").is_file() or not Path(datasets_dir).exists():
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


def _load_hub_role(repo: str, role: str) -> DatasetDict:
    from distill.hub_dataset import load_role

    try:
        return load_role(repo, role)
    except Exception as err:  # offline, unknown repo or config: datasets raises many types, all end the same way
        first_line = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"{repo}: no dataset for role '{role}' there, as a folder or a hub dataset ({type(err).__name__}: "
            f"{first_line})"
        ) from None


def load_base(cfg: TrainConfig):
    """The base model (fp32, or NF4 with bf16 compute for QLoRA) and its tokenizer."""
    path = resolve_model(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    kwargs: dict = {"dtype": torch.float32}
    if cfg.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        if cfg.device() == "cpu":
            kwargs["device_map"] = {"": "cpu"}
        else:  # bitsandbytes quantises on the GPU this process trains on (its local rank under accelerate)
            kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", 0))}
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if cfg.load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, path


def lora_config(cfg: TrainConfig):
    from peft import LoraConfig

    # No modules_to_save: an adapter made only of LoRA A/B matrices is what vLLM's multi-LoRA serves.
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.lora_targets(),
        bias="none",
    )


def steps_for_budget(cfg: TrainConfig, n_train: int, mean_tokens: float, world_size: int) -> int:
    """max_steps that keeps one role's training near `max_tokens_budget` tokens (or -1: no cap)."""
    if cfg.max_tokens_budget <= 0:
        return cfg.max_steps
    per_step = max(1.0, mean_tokens * cfg.batch_size * cfg.grad_accum * world_size)
    steps = max(1, int(cfg.max_tokens_budget // per_step))
    epoch_steps = math.ceil(n_train / (cfg.batch_size * cfg.grad_accum * world_size)) * max(cfg.epochs, 1)
    steps = min(steps, int(epoch_steps))
    return steps if cfg.max_steps <= 0 else min(steps, cfg.max_steps)


def checkpoint_every(cfg: TrainConfig, max_steps: int, n_train: int, world_size: int) -> int:
    """`save_steps`, or (0) a quarter of the role's steps: a crash never costs more than a quarter of a role."""
    if cfg.save_steps > 0:
        return cfg.save_steps
    per_step = cfg.batch_size * cfg.grad_accum * world_size
    total = max_steps if max_steps > 0 else math.ceil(math.ceil(n_train / per_step) * cfg.epochs)
    return max(1, math.ceil(total / 4))


def sft_args(cfg: TrainConfig, role: str, checkpoints: Path, max_steps: int, has_eval: bool):
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(checkpoints),
        num_train_epochs=cfg.epochs,
        max_steps=max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_ratio,
        weight_decay=cfg.weight_decay,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        # padding-free without packing cannot enforce max_length in TRL; we truncate ourselves instead.
        max_length=None if (cfg.padding_free and not cfg.packing) else cfg.max_length,
        padding_free=cfg.padding_free,
        packing=cfg.packing,
        bf16=cfg.use_bf16(),
        fp16=False,
        gradient_checkpointing=cfg.gradient_checkpointing,
        use_cpu=cfg.use_cpu,
        seed=cfg.seed,
        data_seed=cfg.seed,
        save_strategy="steps",  # save_steps is set once the role's step count is known (`checkpoint_every`)
        save_steps=max(cfg.save_steps, 1),
        save_total_limit=cfg.save_total_limit,
        eval_strategy="no",
        do_eval=has_eval,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        report_to=cfg.report_to,
        run_name=f"{cfg.run_name or Path(cfg.output_dir).resolve().name}-{role}",
        dataloader_num_workers=cfg.dataloader_num_workers,
        ddp_find_unused_parameters=False,
        remove_unused_columns=True,
        disable_tqdm=False,
    )


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
        "base_model": cfg.model,
        "base_model_hub_id": hub_id(cfg.model),
        "base_model_path": base_path,
        "prompt_version": STUDENT_PROMPT_VERSION,
        "dataset_dir": str(Path(cfg.datasets) / role),
        "dataset_fingerprint": data["train"]._fingerprint,
        "train_config": cfg.to_dict(),
        "lora": {"r": cfg.r, "alpha": cfg.alpha, "dropout": cfg.dropout, "target_modules": cfg.target_modules},
        "world_size": trainer.args.world_size,
        "global_step": trainer.state.global_step,
        "resumed_from": Path(resume_from).name if resume_from else None,
        "train_seconds": round(seconds, 2),
        "train_loss": metrics.get("train_loss"),
        "eval_loss": metrics.get("eval_loss"),
        "tokens": counts,
        "tokens_seen": int(getattr(trainer, "_total_train_tokens", 0)),
        "quantized_4bit": cfg.load_in_4bit,
    }


def publish(out: Path, meta: dict, cfg: TrainConfig) -> None:
    """Make the saved adapter hub-ready (hub id as its base, a model card), and push it if asked."""
    from distill.adapter_card import write_adapter_card

    point_config_at_hub(out, meta)
    write_adapter_card(out, cfg.hub_model_id or None)
    if cfg.push_to_hub:
        url = push_adapter(out, role_repo(cfg.hub_model_id, meta["role"]), private=cfg.hub_private_repo)
        log(f"{meta['role']}: pushed to {url}")


def completion_head_trainer():
    """`SFTTrainer` whose loss runs the LM head only where a token is trained (the completion).

    TRL 1.16 computes log-probs for *every* position through a chunked fp32 LM head; on a CPU that was
    a third of a step here (SmolLM2: 49k-word vocabulary, prompts ~2/3 of the tokens). This loss runs
    the decoder, keeps the hidden states whose next token has a label, and applies the LM head (under
    the same autocast, so bf16 where enabled) and the cross-entropy to those rows only: the same
    token-summed NLL over `num_items_in_batch`, and the same `entropy` / `mean_token_accuracy`
    metrics. Anything it does not cover (DDP, label smoothing, DFT loss, custom loss functions, MoE
    aux loss, `return_outputs`) goes to TRL's own `compute_loss`. On an H100 TRL's Triton head was
    faster (benchmarks/gpu_train.py), hence `completion_head: auto` = CPU only.
    """
    import torch.nn.functional as F
    from trl import SFTTrainer

    class CompletionHeadSFTTrainer(SFTTrainer):
        def _own_loss_applies(self, return_outputs: bool) -> bool:
            return not (
                return_outputs
                or self.args.loss_type != "nll"
                or self.aux_loss_enabled
                or self.label_smoother is not None
                or self.compute_loss_func is not None
                or self.accelerator.num_processes > 1
            )

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not self._own_loss_applies(return_outputs):
                return super().compute_loss(
                    model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
                )
            mode = "train" if self.model.training else "eval"
            lm = model.get_base_model() if hasattr(model, "get_base_model") else model
            body = {k: v for k, v in inputs.items() if k != "labels"}
            targets = inputs["labels"][:, 1:]
            keep = targets != -100
            gold = targets[keep]
            # Bypassing model.forward also bypasses accelerate's autocast wrapper on it: re-enter it here.
            with self.accelerator.autocast():
                hidden = lm.get_decoder()(**body, use_cache=False).last_hidden_state
                logits = lm.get_output_embeddings()(hidden[:, :-1][keep]).float()
            nll = F.cross_entropy(logits, gold, reduction="sum")
            denom = keep.sum() if num_items_in_batch is None else num_items_in_batch
            loss = nll / torch.as_tensor(denom, device=nll.device).clamp(min=1)
            with torch.no_grad():
                n = keep.sum()
                logp = torch.log_softmax(logits, dim=-1)
                entropy = -(logp.exp() * logp).sum(-1).sum()
                correct = (logits.argmax(-1) == gold).sum()
                self._metrics[mode]["entropy"].append((entropy / n).item() if n > 0 else 0.0)
                self._metrics[mode]["mean_token_accuracy"].append((correct / n).item() if n > 0 else 0.0)
            if mode == "train":
                # Counted as TRL counts them: attended tokens, or the flattened length when padding-free.
                mask = inputs.get("attention_mask")
                self._total_train_tokens += int(mask.sum()) if mask is not None else inputs["position_ids"].size(1)
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return loss

    return CompletionHeadSFTTrainer


def train_role(
    base, tokenizer, base_path: str, cfg: TrainConfig, role: str, callbacks: Optional[list] = None
) -> tuple[object, dict]:
    """Train one role's adapter on `base`; returns (the base with LoRA removed, the metadata)."""
    from peft import get_peft_model
    from trl import SFTTrainer

    data = load_role_dataset(cfg.datasets, role)
    out = Path(cfg.output_dir) / role
    checkpoints = out / "checkpoints"
    resume_from = get_last_checkpoint(str(checkpoints)) if cfg.resume and checkpoints.is_dir() else None
    if cfg.resume and resume_from is None:
        log(f"{role}: --resume given but no checkpoint in {checkpoints}; starting fresh")
    has_eval = cfg.eval and "validation" in data and len(data["validation"]) > 0
    # The default adapter name keeps the files at <out>/ (a named adapter goes to a subfolder, which
    # breaks both vLLM paths and Trainer's resume: transformers#28531).
    model = get_peft_model(base, lora_config(cfg))
    args = sft_args(cfg, role, checkpoints, cfg.max_steps, has_eval)
    trainer_cls = completion_head_trainer() if cfg.use_completion_head() else SFTTrainer
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["validation"] if has_eval else None,
        processing_class=tokenizer,
        callbacks=list(callbacks or []),
    )
    if cfg.padding_free and not cfg.packing:
        trainer.train_dataset = truncate_dataset(trainer.train_dataset, cfg.max_length)
    counts = token_counts(trainer.train_dataset)
    budget_steps = steps_for_budget(cfg, counts["examples"], counts["mean_tokens"], trainer.args.world_size)
    if budget_steps != cfg.max_steps:
        trainer.args.max_steps = budget_steps
        log(f"{role}: max_tokens_budget {cfg.max_tokens_budget} -> max_steps {budget_steps}")
    trainer.args.save_steps = checkpoint_every(cfg, budget_steps, counts["examples"], trainer.args.world_size)
    trainable, total = model.get_nb_trainable_parameters()
    log(
        f"{role}: {counts['examples']} examples, {counts['tokens']} tokens, world_size {trainer.args.world_size}, "
        f"LoRA r={cfg.r} trainable {trainable:,}/{total:,}" + (f", resuming from {resume_from}" if resume_from else "")
    )
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume_from)
    seconds = time.perf_counter() - start
    metrics = dict(result.metrics)
    if has_eval:
        metrics.update(trainer.evaluate())
    meta = adapter_metadata(cfg, role, base_path, data, trainer, counts, seconds, metrics, resume_from)
    if trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
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
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    for role in roles:  # fail on a missing dataset before spending time on the model
        load_role_dataset(cfg.datasets, role)
    base, tokenizer, base_path = load_base(cfg)
    log(f"base {cfg.model} loaded from {base_path}; roles: {', '.join(roles)}")
    results = []
    for role in roles:
        base, meta = train_role(base, tokenizer, base_path, cfg, role, callbacks)
        results.append(meta)
    return results
