"""bf16 training over float32 weights (autocast) against bf16 weights, on a CPU: tokens/s and memory, A B A B.

    python benchmarks/bf16_weights.py --shape tiny --examples 256 --pairs 2 --out benchmarks/bf16_weights.json

What a GPU run now does by default (`bf16: true` loads the base's weights in bf16; train.precision) against what
every run did before (float32 weights under bf16 autocast), measured where this project can measure now: a CPU.
Both variants train the same `asi` LoRA (r16, all-linear) through `train.sft.train_role` -- the code `python -m
train` runs -- on the same rows (built as `benchmarks/train_throughput.py` builds them), one epoch, from a freshly
loaded base, each in its own process so that its peak RSS is its own. `--shape tiny` is a random 2-layer llama with
SmolLM2's vocabulary (tests/conftest.py's tiny model); `--shape smollm2-135m` random-initialises the embedded
model's shape. Reported per run: non-pad tokens/s around `trainer.train()`, the base's weight bytes, RSS before
training and the process's peak RSS, and the machine's 1-minute load before the run (other work on a shared CPU
moves tokens/s, not memory); the machine's CPU (`lscpu`'s model name) and whether it has avx512_bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from machine import cpu_flags, cpu_model  # the script directory is on sys.path
from train_throughput import DEFAULT_DATA, build_dataset

from data_prep.loaders import SAMPLE_PATH  # noqa: E402

VARIANTS = {
    "fp32_weights_autocast": {"bf16": True, "dtype": "float32"},  # what every run did before
    "bf16_weights": {"bf16": True, "dtype": "bfloat16"},  # what a GPU's bf16 run does now
}
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}  # fmt: skip


def random_base(shape: str, out: Path) -> str:
    """The embedded model's config (and tokenizer), shrunk to `TINY` for --shape tiny, with random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from data_prep.models import resolve_model

    source = resolve_model("smollm2-135m")
    config = AutoConfig.from_pretrained(source)
    for key, value in (TINY if shape == "tiny" else {}).items():
        setattr(config, key, value)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return str(out)


def rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def run_one(name: str, model: str, datasets: Path, out: Path, batch_size: int, threads: int) -> dict:
    """One variant in this process: load, train one epoch, measure."""
    from train.config_load import config_from_dict
    from train.sft import load_base, train_role

    values = {"model_name_or_path": model, "dataset_name": str(datasets), "output_dir": str(out), "roles": "asi",
              "per_device_train_batch_size": batch_size, "num_train_epochs": 1, "max_tokens_budget": 0,
              "use_cpu": True, "num_threads": threads, "card_example": False, "save_steps": 0, "logging_steps": 1000,
              **VARIANTS[name]}  # fmt: skip
    cfg = config_from_dict(values, source="bf16_weights")
    torch.set_num_threads(threads)
    base, tokenizer, path = load_base(cfg)
    weights = sum(p.numel() * p.element_size() for p in base.parameters()) / 2**20
    before = rss_mib()
    _, meta = train_role(base, tokenizer, path, cfg, "asi")
    return {
        "tokens_per_s": round(meta["tokens_seen"] / meta["train_seconds"], 1),
        "seconds": meta["train_seconds"],
        "tokens": meta["tokens_seen"],
        "steps": meta["global_step"],
        "loss": meta["train_loss"],
        "base_dtype": meta["base_dtype"],
        "base_weights_mib": round(weights, 1),
        "rss_before_train_mib": round(before, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def lscpu_model() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return cpu_model()
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("tiny", "smollm2-135m"), default="tiny")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--pairs", type=int, default=2, help="A B rounds, alternating which variant goes first")
    parser.add_argument("--out", type=Path, default=Path("bf16_weights.json"))
    parser.add_argument("--one", choices=tuple(VARIANTS), help=argparse.SUPPRESS)  # a child: one variant, JSON out
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--datasets", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        result = run_one(
            args.one, args.model, args.datasets, args.out.parent / "adapters", args.batch_size, args.threads
        )
        args.out.write_text(json.dumps(result))
        return 0
    data = args.data if args.data.is_file() else SAMPLE_PATH
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        model = random_base(args.shape, Path(tmp) / "base")
        datasets = build_dataset(data, args.examples, Path(tmp) / "datasets")
        for pair in range(args.pairs):
            order = list(VARIANTS) if pair % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                child = Path(tmp) / f"{name}-{pair}"
                child.mkdir()
                command = [sys.executable, __file__, "--one", name, "--model", model, "--datasets", str(datasets),
                           "--batch-size", str(args.batch_size), "--threads", str(args.threads),
                           "--out", str(child / "result.json")]  # fmt: skip
                load = os.getloadavg()[0]  # other work on the machine: the figures mean less the higher it is
                subprocess.run(command, check=True, capture_output=True)
                result = json.loads((child / "result.json").read_text())
                runs[name].append({**result, "order": order.index(name) + 1, "load_1min_before": round(load, 2)})
                print(f"{name} (pair {pair + 1}): {json.dumps(runs[name][-1])}", flush=True)
    report = {
        "command": "python benchmarks/bf16_weights.py " + " ".join(sys.argv[1:]),
        "cpu": lscpu_model(),
        "cpu_flags": cpu_flags(),
        "avx512_bf16": "avx512_bf16" in cpu_flags(),
        "torch": torch.__version__,
        "shape": args.shape,
        "data": "ED dev (../shared/data)" if data == DEFAULT_DATA else "shipped sample",
        "examples": args.examples,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
