"""What a role will train on, said before it trains: rows, optimizer steps, epochs and the tokens they see.

A budget (`max_tokens_budget`) or a step cap (`max_steps`) turns epochs into a fraction; with neither, a config's
`num_train_epochs` is what trains, and the plan shows it.
"""

from __future__ import annotations

import math

from train.config import TrainConfig


def training_plan(cfg: TrainConfig, counts: dict, world_size: int, max_steps: int) -> dict:
    """What a role will train on, before it trains: rows, optimizer steps, epochs (a fraction under a budget or
    a step cap) and the tokens those steps see."""
    per_batch = cfg.sft.per_device_train_batch_size * cfg.sft.gradient_accumulation_steps * world_size
    epoch_steps = max(1, math.ceil(counts["examples"] / per_batch))
    steps = max_steps if max_steps > 0 else math.ceil(epoch_steps * cfg.sft.num_train_epochs)
    epochs = steps / epoch_steps
    return {
        "rows": counts["examples"],
        "steps": steps,
        "epochs": round(epochs, 2),
        "tokens": round(epochs * counts["tokens"]),
    }


def plan_line(plan: dict) -> str:
    return f"{plan['rows']:,} rows, {plan['steps']:,} steps, {plan['epochs']:g} epochs, ~{plan['tokens']:,} tokens"
