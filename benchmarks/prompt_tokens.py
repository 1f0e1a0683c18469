"""Where a teacher run's prompt tokens go: per stage, each block of the prompt, and the shared prefix.

Reads a trace run (the prompts every step recorded), tokenizes them with the run's model tokenizer and
splits each prompt into its blocks: the role's instructions (system message), the "Earlier agents"
preamble, the dialogue, the upstream outputs, the retrieved exemplars, the gold reference and the answer
line; what the chat template adds is the rest. Then, per stage, the prefix that every prompt of one
pipeline chunk shares, which the local backend prefills once (`distill.backends.continuous`):

    python benchmarks/prompt_tokens.py runs/quickstart/teacher-train --chunk-size 32 \
        --out benchmarks/prompt_tokens.json

Only the tokenizer loads; nothing is generated.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from transformers import AutoTokenizer

from data_prep.models import resolve_model
from distill.backends.continuous import _common_prefix
from distill.pipeline.store import TraceStore

# A user-message block is named by how its first line starts (distill.roles.roles renders them).
BLOCKS = {
    "Earlier agents": "preamble",
    "Dialogue:": "dialogue",
    "From the ": "upstream",
    "Retrieved cases": "exemplars",
    "Reference:": "reference",
    "Answer with": "answer_line",
}


def block_name(block: str) -> str:
    return next((name for start, name in BLOCKS.items() if block.startswith(start)), "other")


def prompt_blocks(tokenizer, messages: list[dict], total: int) -> dict[str, int]:
    """Tokens of each block of one prompt of `total` tokens; `template` is what the chat template adds."""
    counts: dict[str, int] = defaultdict(int)
    for message in messages:
        if message["role"] == "system":
            counts["instructions"] += len(tokenizer(message["content"], add_special_tokens=False)["input_ids"])
            continue
        for block in message["content"].split("\n\n"):
            counts[block_name(block)] += len(tokenizer(block, add_special_tokens=False)["input_ids"])
    counts["template"] = total - sum(counts.values())
    counts["total"] = total
    return dict(counts)


def prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def stage_prompts(run: Path) -> dict[str, list[list[dict]]]:
    """Each stage's first-pass prompts, in the run's order."""
    traces, _ = TraceStore(run).read()
    prompts: dict[str, list[list[dict]]] = defaultdict(list)
    for trace in traces:
        for step in trace.steps:
            if step.iteration == 0 and step.messages:
                prompts[step.role].append(step.messages)
    return prompts


def shared_prefix(ids: list[list[int]], chunk_size: int) -> float:
    """Mean tokens per prompt of the prefix its pipeline chunk shares (one backend call per stage and chunk)."""
    shared = 0
    for start in range(0, len(ids), chunk_size):
        chunk = ids[start : start + chunk_size]
        if len(chunk) > 1:
            shared += _common_prefix(chunk) * len(chunk)
    return shared / len(ids)


def summarise(tokenizer, prompts: dict[str, list[list[dict]]], chunk_size: int) -> dict:
    stages = {}
    for role, messages in prompts.items():
        ids = [prompt_ids(tokenizer, m) for m in messages]
        rows = [prompt_blocks(tokenizer, m, len(i)) for m, i in zip(messages, ids)]
        names = sorted({k for row in rows for k in row})
        mean = {k: round(sum(row.get(k, 0) for row in rows) / len(rows), 1) for k in names}
        mean["shared_prefix"] = round(shared_prefix(ids, chunk_size), 1)
        stages[role] = {"prompts": len(rows), "mean_tokens": mean}
    return stages


def print_table(stages: dict) -> None:
    columns = ["total", "shared_prefix", "instructions", "preamble", "dialogue", "upstream", "exemplars"]
    columns += ["reference", "answer_line", "template"]
    print("| stage | prompts | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    for role, row in stages.items():
        cells = [str(row["mean_tokens"].get(c, 0)) for c in columns]
        print(f"| {role} | {row['prompts']} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a trace run folder (distill generate --out)")
    parser.add_argument("--chunk-size", type=int, default=32, help="distill generate's --chunk-size for the run")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    info = json.loads((args.run / "run.json").read_text(encoding="utf-8"))
    model = info["model"]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(model))
    prompts = stage_prompts(args.run)
    if not prompts:
        raise SystemExit(f"{args.run}: no traces with recorded prompts")
    stages = summarise(tokenizer, prompts, args.chunk_size)
    print_table(stages)
    if args.out:
        report = {"run": str(args.run), "model": model, "chunk_size": args.chunk_size, "stages": stages}
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
