"""Training throughput of `python -m train` against a plain TRL SFT script, in one run, on the same data.

    python benchmarks/train_throughput.py --examples 64 --batch-size 8 --threads 1 --out train_bench.json

The data are `asi` student prompts (the compact prompt the adapter is trained on) built from the real
ED dev file (``../shared/data/ed_ekman_dev.csv``; the shipped sample is used when it is absent), with
the gold emotion as the JSON completion. Every variant trains the same LoRA (r16, all-linear) on the
same rows for one epoch with the same batch size and LoRA dropout 0 (PEFT's default), from a freshly
loaded model, and is timed around
``trainer.train()`` only:

- ``trl_defaults``: a minimal hand-written TRL script with TRL's defaults (fp32 on CPU, padded
  batches, gradient checkpointing on), the baseline;
- ``train_padded``: our recipe with padded batches (isolates gradient checkpointing);
- ``train``: our default recipe (padding-free batches, no gradient checkpointing, `bf16: auto`);
- ``train_fp32``: our default recipe with bf16 forced off (isolates `bf16: auto`, which is on for
  CPUs with AMX/AVX512-BF16);
- ``train_trl_head``: our default recipe with TRL's own loss (fp32 LM head over every position)
  instead of the completion-only LM head (isolates `completion_head`);
- ``train_packing``: BFD packing into one 1024-token block per step (padding-free as well); fewer,
  fuller optimizer steps than the others;
- ``train_bs16``, ``train_bs32``: our default recipe at twice and four times the batch size (fewer,
  larger steps: the loss after one epoch is not comparable at the same learning rate);
- ``train_compile``: our default recipe with ``torch_compile: true`` (inductor); its compile time is
  inside the timed region, as a user pays it;
- ``train_sdpa``: our default recipe on transformers' sdpa attention instead of distill's per-example CPU
  attention (isolates it: sdpa attends over the whole flattened batch and masks across examples).

``--datasets DIR --role ROLE`` trains on an existing ``python -m distill datasets`` folder instead (the
quickstart's ``runs/quickstart/datasets``, whose cae, srp and ers rows are about three times as long as
the built asi rows).

``--peak`` also times a bf16 and an fp32 matmul of the model's shape on the same threads, and reports
each variant's model FLOP/s (4 x the base's parameters per token: a forward pass and the backward pass
through the frozen weights, the LoRA weights' share being under 4%) as a fraction of that peak.
``--profile`` adds the top operators of one training step of the default recipe (torch.profiler).

Reported per variant: seconds, steps, samples/s and non-pad tokens/s, the tokens being those the timed
steps trained on (TRL's own count), plus speed-ups relative to the baseline. Every variant trains one
whole epoch (no token budget); a variant whose trained tokens differ from the dataset's stops the run.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from machine import cpu_flags  # the script directory is on sys.path

from data_prep.loaders import SAMPLE_PATH, read_csv  # noqa: E402
from distill.roles.roles import ROLES, RoleInput  # noqa: E402
from train.config_load import config_from_dict  # noqa: E402
from train.sft import lora_config, train_role  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ed_ekman_dev.csv"
VARIANTS = ("trl_defaults", "train_padded", "train_fp32", "train_trl_head", "train", "train_packing")
EXTRA_VARIANTS = ("train_bs16", "train_bs32", "train_compile", "train_sdpa")  # --variants names them
FLOPS_PER_TOKEN = 4 * 134.5e6  # a LoRA step on SmolLM2-135M: forward + backward through the frozen weights


def build_dataset(csv: Path, n: int, root: Path) -> Path:
    """`n` asi rows in the form `python -m distill datasets` writes, saved under root/asi."""
    from datasets import Dataset, DatasetDict

    pool = read_csv(csv)
    dialogues = [pool[i % len(pool)] for i in range(n)]  # cycles a file shorter than n (the shipped sample)
    rows = []
    for d in dialogues:
        prompt = ROLES["asi"].render(RoleInput(dialogue=d), "student")
        target = json.dumps(
            {"reasoning": f"The seeker describes: {d.situation[:80]}", "emotion": d.emotion}, separators=(",", ":")
        )
        rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": target}]})
    DatasetDict(train=Dataset.from_list(rows)).save_to_disk(str(root / "asi"))
    return root


def run_trl_defaults(model, tokenizer, datasets: Path, role: str, batch_size: int, out: Path) -> dict:
    """The baseline: what a user gets from TRL's docs with only the batch size, CPU and fp32 set."""
    from datasets import load_from_disk
    from peft import get_peft_model
    from trl import SFTConfig, SFTTrainer

    cfg = config_from_dict({"lora_r": 16, "lora_alpha": 32}, source="benchmark")
    peft_model = get_peft_model(model, lora_config(cfg))
    args = SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=batch_size,
        num_train_epochs=1,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    trainer = SFTTrainer(
        model=peft_model,
        args=args,
        train_dataset=load_from_disk(str(datasets / role))["train"],
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens": trainer._total_train_tokens,  # non-pad tokens of the timed steps, counted as run_ours counts
        "dataset_tokens": sum(len(ids) for ids in trainer.train_dataset["input_ids"]),
        "steps": trainer.state.global_step,
        "examples": len(trainer.train_dataset),
        "gradient_checkpointing": bool(args.gradient_checkpointing),
        "padding_free": False,
        "loss": trainer.state.log_history[-1].get("train_loss"),
    }


def run_ours(model, tokenizer, datasets: Path, role: str, batch_size: int, out: Path, overrides: dict) -> dict:
    values = {
        "dataset_name": str(datasets),
        "output_dir": str(out),
        "roles": role,
        "per_device_train_batch_size": batch_size,
        "num_train_epochs": 1,  # TRL's default is 3; every variant sees each row once
        "use_cpu": True,
        "num_threads": torch.get_num_threads(),
        "lora_r": 16,
        "lora_alpha": 32,
        "logging_steps": 1,
        "learning_rate": 2e-5,
        "warmup_steps": 0.0,
        # No token budget: every variant trains exactly one epoch, as the baseline does. The figure
        # must not depend on `max_tokens_budget`'s default, which would stop a run part-way.
        "max_tokens_budget": 0,
        **overrides,
    }
    cfg = config_from_dict(values, source="benchmark")
    base, meta = train_role(model, tokenizer, "", cfg, role)
    return {
        "seconds": meta["train_seconds"],
        "tokens": meta["tokens_seen"],  # what the timed steps trained on (TRL's count), not the dataset's size
        "dataset_tokens": meta["tokens"]["tokens"],
        "steps": meta["global_step"],
        "examples": meta["tokens"]["examples"],
        "gradient_checkpointing": cfg.sft.gradient_checkpointing,
        "padding_free": cfg.sft.padding_free or cfg.sft.packing,
        "attention": base.config._attn_implementation,
        "loss": meta["train_loss"],
    }


def matmul_peak(dtype: torch.dtype, seconds: float = 3.0) -> float:
    """GFLOP/s of a matmul shaped like the model's MLP (576 -> 1536) over a batch of 2,048 token rows."""
    a, b = torch.randn(2048, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    for _ in range(3):
        a @ b  # warm-up: the first calls pick kernels
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        calls += 1
    return 2 * 2048 * 576 * 1536 * calls / (time.perf_counter() - start) / 1e9


def profile_step(path: str, tokenizer, datasets: Path, batch_size: int, rows: int = 20) -> list[dict]:
    """The top operators (self CPU time) of one forward + backward of the default recipe's LoRA model."""
    from datasets import load_from_disk
    from peft import get_peft_model
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    cfg = config_from_dict({"lora_r": 16, "lora_alpha": 32}, source="benchmark")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), lora_config(cfg))
    data = load_from_disk(str(datasets / "asi"))["train"].select(range(batch_size))
    texts = [tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=False) for r in data]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch, labels=batch["input_ids"]).loss.backward()  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(**batch, labels=batch["input_ids"]).loss.backward()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    return [
        {
            "op": e.key,
            "self_ms": round(e.self_cpu_time_total / 1e3, 1),
            "share": round(e.self_cpu_time_total / total, 3),
        }
        for e in events
    ]


def key_of(name: str, results: dict) -> str:
    """A variant's name, or name#k for its k-th repeat."""
    return name if name not in results else f"{name}#{sum(k.split('#')[0] == name for k in results) + 1}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--datasets", type=Path, help="an existing `distill datasets` folder instead of built asi rows")
    parser.add_argument("--role", default="asi", help="the role of --datasets to train (the built rows are asi)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default); 1 on a shared CPU")
    parser.add_argument("--out", type=Path, default=Path("train_bench.json"))
    parser.add_argument("--peak", action="store_true", help="time bf16/fp32 matmuls: each variant's share of peak")
    parser.add_argument("--profile", action="store_true", help="the top operators of one training step")
    args = parser.parse_args(argv)
    if args.role != "asi" and not args.datasets:
        parser.error("--role picks a role of --datasets; the built rows are asi rows")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_prep.models import resolve_model

    data = args.data if args.data.is_file() else SAMPLE_PATH
    path = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        datasets = args.datasets or build_dataset(data, args.examples, Path(tmp) / "datasets")
        from datasets import load_from_disk

        n_rows = len(load_from_disk(str(datasets / args.role))["train"])
        # A variant may be listed twice (e.g. trl_defaults,train,trl_defaults,train) to interleave
        # repeats on a noisy shared CPU; repeats are reported as name#2.
        for i, name in enumerate(args.variants.split(",")):
            out = Path(tmp) / f"{i}-{name}"
            # A fresh model per variant: TRL's gradient checkpointing and input-grad hooks outlive the adapter.
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            if name == "trl_defaults":
                row = run_trl_defaults(model, tokenizer, datasets, args.role, args.batch_size, out)
            else:
                extra = {
                    "train_padded": {"padding_free": False},
                    "train": {},
                    "train_fp32": {"bf16": False},
                    "train_trl_head": {"completion_head": "false"},
                    # One 1024-token block per step holds about as many tokens as a padding-free batch
                    # of 8; more blocks per step make one flattened sequence whose masked attention is
                    # quadratic in its length on CPU (no varlen kernel).
                    "train_packing": {
                        "packing": True,
                        "padding_free": False,
                        "max_length": 1024,
                        "per_device_train_batch_size": 1,
                    },
                    "train_bs16": {"per_device_train_batch_size": 16},
                    "train_bs32": {"per_device_train_batch_size": 32},
                    "train_compile": {"torch_compile": True},
                    "train_sdpa": {"attn_implementation": "sdpa"},
                }[name]
                row = run_ours(model, tokenizer, datasets, args.role, args.batch_size, out, extra)
            if row["tokens"] != row["dataset_tokens"]:  # a variant that stopped early would overstate tokens/s
                raise SystemExit(f"{key_of(name, results)}: trained {row['tokens']} of {row['dataset_tokens']} tokens")
            row["examples"] = n_rows  # packing reports blocks, not rows; every variant sees every row once
            row["samples_per_s"] = round(row["examples"] / row["seconds"], 3)
            row["tokens_per_s"] = round(row["tokens"] / row["seconds"], 1)
            key = key_of(name, results)
            results[key] = row
            print(
                f"{key}: {row['seconds']:.1f} s, {row['samples_per_s']} samples/s, {row['tokens_per_s']} tokens/s",
                flush=True,
            )
    base = results.get("trl_defaults")
    extras = {}
    if args.peak:
        peak = {"bf16": matmul_peak(torch.bfloat16), "fp32": matmul_peak(torch.float32)}
        extras["matmul_gflops"] = {k: round(v, 1) for k, v in peak.items()}
        for row in results.values():
            row["model_gflops"] = round(row["tokens_per_s"] * FLOPS_PER_TOKEN / 1e9, 1)
            row["share_of_bf16_peak"] = round(row["model_gflops"] / peak["bf16"], 3)
    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            extras["profile_top_ops"] = profile_step(
                path, tokenizer, build_dataset(data, args.batch_size, Path(tmp)), args.batch_size
            )
    report = {
        "data": str(args.datasets / args.role) if args.datasets else str(data),
        "role": args.role,
        "examples": n_rows,
        "batch_size": args.batch_size,
        "model": "smollm2-135m",
        "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "cpu_flags": cpu_flags(),
        "variants": results,
        "speedup_vs_trl_defaults": {k: round(v["tokens_per_s"] / base["tokens_per_s"], 2) for k, v in results.items()}
        if base
        else {},
        **extras,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["speedup_vs_trl_defaults"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
