"""The local backend's model in fp32 and with `quantize: int8`, on the same work: one prefill and a fixed
number of decode steps over the same token ids, A B A B in one process.

The pipeline's own A/B (a `distill generate` per setting) also changes what is generated: greedy answers
of an int8 model differ, and so do their lengths. This one times equal work, so its ratio is the speed of
the arithmetic alone:

    python benchmarks/int8_forward.py --rows 16 --prompt-tokens 700 --decode-steps 64 --pairs 3 \
        --out runs/bench/int8_forward.json

Token ids are random (speed does not depend on them). The report records the CPU's bf16/AVX flags.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from machine import cpu_flags  # the script directory is on sys.path

from distill.backends.local import LocalBackend


@torch.inference_mode()
def forward_seconds(model: torch.nn.Module, ids: torch.Tensor, decode_steps: int) -> tuple[float, float]:
    """(prefill seconds, decode seconds): the prompt at once, then one token a step over its cache."""
    started = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    prefill = time.perf_counter() - started
    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    started = time.perf_counter()
    for _ in range(decode_steps):
        out = model(input_ids=token, past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return prefill, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, default=16, help="prompts in the batch (the shipped batch_size)")
    parser.add_argument("--prompt-tokens", type=int, default=700, help="tokens of each prompt")
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=3, help="A B pairs timed, after one untimed pair")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    models = {
        "fp32": LocalBackend(args.model, dtype="float32").hf_model,
        "int8": LocalBackend(args.model, dtype="float32", quantize="int8").hf_model,
    }
    ids = torch.randint(
        0, models["fp32"].config.vocab_size, (args.rows, args.prompt_tokens), generator=torch.Generator().manual_seed(0)
    )
    for model in models.values():  # warm-up
        forward_seconds(model, ids, 2)
    pairs = []
    for _ in range(args.pairs):
        times = {name: forward_seconds(model, ids, args.decode_steps) for name, model in models.items()}
        pairs.append({name: {"prefill_s": round(p, 3), "decode_s": round(d, 3)} for name, (p, d) in times.items()})
        ratio = {part: times["fp32"][i] / times["int8"][i] for i, part in enumerate(("prefill", "decode"))}
        pairs[-1]["int8_speedup"] = {k: round(v, 3) for k, v in ratio.items()}
        print(f"prefill {ratio['prefill']:.2f}x, decode {ratio['decode']:.2f}x (fp32 time / int8 time)")
    report = {
        "settings": vars(args) | {"out": str(args.out), "torch": torch.__version__, "threads": torch.get_num_threads()},
        "machine": {"processor": platform.processor() or platform.machine(), "cpu_flags": cpu_flags()},
        "pairs": pairs,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
