"""LoRA (fp32 / bf16) against QLoRA (NF4 through bitsandbytes) training on a CUDA GPU, in one run.

    python benchmarks/gpu_train.py --model smollm2-135m --examples 256 --batch-size 16 --out gpu_train.json

Every variant trains the same `asi` LoRA (r16, all-linear) through `train.sft.train_role` -- the code
`python -m train` runs -- on the same rows (the compact student prompt with the gold emotion as the
JSON completion, built as in `benchmarks/train_throughput.py`), from a freshly loaded base, and is
timed around `trainer.train()`. Reported per variant: seconds, non-pad tokens/s, peak CUDA memory,
final loss, and whether the saved adapter loads back onto the base for inference.

`--random-init` builds the base from `--model`'s config with random weights: on a machine that cannot
download or carry the real weights it still measures speed and memory exactly (they do not depend on
the weight values), but the losses then mean nothing.

Several GPUs: on one machine with 2, `bash benchmarks/multigpu_adapters.sh` trains `asi` under each
shipped multi-process config (multi-gpu-ddp, fsdp, deepspeed-zero2) with

    accelerate launch --config_file configs/accelerate/<config>.yaml --no_python trace-distill train \
        --config configs/train/qwen0.5b-gpu.yaml --dataset_name runs/datasets --roles asi --max_steps 20 \
        --output_dir runs/multigpu/<config>
    python benchmarks/check_adapter.py runs/multigpu/<config>/asi

and checks that plain PEFT loads each adapter with the weights rank 0 trained.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch
from train_throughput import DEFAULT_DATA, build_dataset  # the script directory is on sys.path

from data_prep.loaders import SAMPLE_PATH  # noqa: E402
from train.config_load import config_from_dict  # noqa: E402
from train.sft import load_base, train_role  # noqa: E402

VARIANTS = {
    "lora_fp32": {"bf16": False},
    "lora_bf16": {"bf16": True},  # bf16 weights since issue 80 (train.precision); before, float32 under autocast
    "lora_bf16_fp32_weights": {"bf16": True, "dtype": "float32"},  # what lora_bf16 measured until then
    "lora_bf16_completion_head": {"bf16": True, "completion_head": "true"},
    "qlora_nf4": {"bf16": True, "load_in_4bit": True},
}


def random_base(config_dir: str, out: Path) -> str:
    """A randomly initialised copy of the model in config_dir (config + tokenizer only), saved to out."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir), dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(out)
    return str(out)


def run_variant(name: str, model: str, datasets: Path, out: Path, batch_size: int) -> dict:
    cfg = config_from_dict(
        {
            "model_name_or_path": model,
            "dataset_name": str(datasets),
            "output_dir": str(out),
            "roles": "asi",
            "per_device_train_batch_size": batch_size,
            "logging_steps": 10,
            # one whole epoch, whatever max_tokens_budget's default: --examples 2048 at batch 16 is 128 steps
            "num_train_epochs": 1,
            "max_tokens_budget": 0,
            **VARIANTS[name],
        },
        source="gpu_train",
    )
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base, tokenizer, base_path = load_base(cfg)
    if not cfg.model.load_in_4bit:
        base = base.to("cuda")
    _, meta = train_role(base, tokenizer, base_path, cfg, "asi")
    peak = torch.cuda.max_memory_allocated() / 2**20
    del base
    # The adapter must load back onto a plain bf16 base, as the local backend and vLLM use it.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.bfloat16).to("cuda")
    loads = isinstance(PeftModel.from_pretrained(plain, str(out / "asi")), PeftModel)
    del plain
    return {
        "seconds": meta["train_seconds"],
        "tokens": meta["tokens_seen"],  # what the timed steps trained on
        "tokens_per_s": round(meta["tokens_seen"] / meta["train_seconds"], 1),
        "peak_cuda_mib": round(peak, 1),
        "loss": meta["train_loss"],
        "steps": meta["global_step"],
        "adapter_loads": loads,
        "quantized_4bit": meta["quantized_4bit"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="alias, local dir or hub id")
    parser.add_argument("--random-init", action="store_true", help="random weights from --model's config (see above)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("gpu_train.json"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_train: no CUDA device; this benchmark measures GPU training")
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"gpu_train: unknown variant(s) {unknown} (known: {', '.join(VARIANTS)})")
    data = args.data if args.data.is_file() else SAMPLE_PATH
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if args.random_init:
            from data_prep.models import resolve_model

            model = random_base(resolve_model(args.model), Path(tmp) / "random-base")
        datasets = build_dataset(data, args.examples, Path(tmp) / "datasets")
        for name in args.variants.split(","):
            results[name] = run_variant(name, model, datasets, Path(tmp) / name, args.batch_size)
            print(f"{name}: {json.dumps(results[name])}", flush=True)
    report = {
        "model": args.model,
        "random_init": args.random_init,
        "data": str(data),
        "examples": args.examples,
        "batch_size": args.batch_size,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "variants": results,
    }
    if "lora_fp32" in results:
        report["speedup_vs_lora_fp32"] = {
            k: round(v["tokens_per_s"] / results["lora_fp32"]["tokens_per_s"], 2) for k, v in results.items()
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
