"""The adapter folder: per-role LoRA adapters, their metadata and their model card."""
