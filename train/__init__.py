"""Per-role LoRA training with TRL's SFTTrainer and PEFT (`python -m train`, `accelerate launch -m train`).

`TOKENS_BUDGET` is the one default of `max_tokens_budget`, the training tokens per role: train, the
quickstart and the learning curve all start from it (a 2-core CPU trains it in a few minutes).
"""

TOKENS_BUDGET = 6000
