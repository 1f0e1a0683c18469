"""Per-role LoRA training with TRL's SFTTrainer and PEFT (`python -m train`, `accelerate launch -m train`).

`TOKENS_BUDGET` is the default training tokens per role of the quickstart and the learning curve (a 2-core CPU
trains it in a few minutes). `train` itself has no budget unless one is set: a config's epochs are its epochs.
"""

TOKENS_BUDGET = 6000
