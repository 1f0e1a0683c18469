"""Per-example CPU attention against transformers' sdpa on padding-free LoRA training steps, A B A B.

    python benchmarks/padding_free_attention.py --bf16 --pairs 2 --steps 4 --out runs/bench/pf_attention.json

The training step `python -m train` runs on a CPU with `padding_free: true`: one row of flattened examples
whose positions restart at 0, LoRA r16 on every linear layer of a random-initialised base with
`--model`'s shape, forward and backward, under bf16 autocast with `--bf16` (what `bf16: auto` picks on a
CPU with native bf16) and fp32 without. `sdpa` gets the block-diagonal mask transformers builds from the
positions; `by_example` is distill's CPU attention (`distill/backends/attention.py`), which `train_role`
switches on. It needs torch, transformers and peft only (no TRL, datasets or weights), so it also runs on
a machine that cannot install the toolkit: `--model` may be any folder holding a `config.json`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
from machine import cpu_flags  # the script directory is on sys.path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from distill.backends.attention import use_cpu_attention  # noqa: E402

VARIANTS = ("sdpa", "by_example")


def base_model(model: str, variant: str):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    if Path(model).is_dir():
        path = model
    else:  # an alias needs the toolkit's model cache; a config folder does not
        from data_prep.models import resolve_model

        path = resolve_model(model)
    config = AutoConfig.from_pretrained(path)
    torch.manual_seed(0)  # both variants start from the same random weights
    base = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    if variant == "by_example" and not use_cpu_attention(base):
        raise SystemExit("padding_free_attention: distill's CPU attention did not switch on")
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(base, lora)


def flattened_row(lengths: list[int], vocab: int) -> dict:
    """One padding-free batch: the examples end to end, positions restarting at 0 for each."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (1, sum(lengths)), generator=generator)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    # no cache: transformers looks for packed rows only without one (a training forward)
    return {"input_ids": ids, "position_ids": positions, "labels": ids.clone(), "use_cache": False}


def timed_steps(model, batch: dict, steps: int, bf16: bool) -> tuple[float, float]:
    """Seconds for `steps` forward+backward passes (after one untimed), and the last loss."""

    def one() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.item()

    one()
    started = time.perf_counter()
    for _ in range(steps):
        loss = one()
    return time.perf_counter() - started, loss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="alias, or a folder with the base's config.json")
    parser.add_argument("--lengths", default="120,150,170,190,210,160,140,180", help="the row's example lengths")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per variant and pair")
    parser.add_argument("--pairs", type=int, default=2, help="A B rounds")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (else fp32)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/pf_attention.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = [int(n) for n in args.lengths.split(",")]
    models = {v: base_model(args.model, v) for v in VARIANTS}
    batch = flattened_row(lengths, models["sdpa"].config.vocab_size)
    rounds = []
    for pair in range(args.pairs):
        row = {}
        for variant in VARIANTS:
            seconds, loss = timed_steps(models[variant], batch, args.steps, args.bf16)
            row[variant] = {"tokens_per_s": round(sum(lengths) * args.steps / seconds, 1), "loss": round(loss, 5)}
        row["by_example_over_sdpa"] = round(row["by_example"]["tokens_per_s"] / row["sdpa"]["tokens_per_s"], 3)
        print(f"pair {pair + 1}: {json.dumps(row)}", flush=True)
        rounds.append(row)
    report = {
        "settings": {**vars(args), "out": str(args.out), "lengths": lengths},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": {"processor": platform.machine(), "cpu_flags": cpu_flags()},
        "pairs": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
