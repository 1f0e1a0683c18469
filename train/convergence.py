"""Training to convergence: epochs with early stopping on the validation split's loss, the best epoch kept.

With `early_stopping_patience: K` (K > 0) a role is evaluated and saved once an epoch; training stops when the
validation loss has not improved for K epochs in a row (transformers' `EarlyStoppingCallback`), and the adapter
saved is the best epoch's (`load_best_model_at_end`), not the last one's. `num_train_epochs` is then the most
epochs a role may train. The patience is a training option like any other, so it is part of every adapter's key
(`train_config` in its metadata). The adapter's metadata says where the role stopped and which epoch it kept.
"""

from __future__ import annotations

from typing import Any, Optional

from train.config import ConfigError, TrainConfig

VALIDATION = "validation"


def early_stopping(cfg: TrainConfig) -> bool:
    return cfg.distill.early_stopping_patience > 0


def check_validation(cfg: TrainConfig, role: str, data) -> None:
    """Early stopping reads the validation loss: a role without a validation split cannot converge by it."""
    if early_stopping(cfg) and (VALIDATION not in data or len(data[VALIDATION]) == 0):
        raise ConfigError(
            f"early_stopping_patience: role '{role}' has no validation split in {cfg.distill.dataset_name}; "
            "build the datasets with one (distill datasets --eval-fraction 0.1, or a validation split of the dialogues)"
        )


def argument_overrides(cfg: TrainConfig) -> dict[str, Any]:
    """The SFTConfig settings that early stopping needs: evaluation and a checkpoint every epoch, the best kept."""
    if not early_stopping(cfg):
        return {}
    return {
        "eval_strategy": "epoch",
        "save_strategy": "epoch",
        "do_eval": True,
        "load_best_model_at_end": True,
        "metric_for_best_model": "eval_loss",
        "greater_is_better": False,
    }


def callbacks(cfg: TrainConfig) -> list:
    if not early_stopping(cfg):
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=cfg.distill.early_stopping_patience)]


def record(cfg: TrainConfig, state) -> Optional[dict[str, Any]]:
    """Where the role stopped and what it kept, from the trainer's state: None without early stopping."""
    if not early_stopping(cfg):
        return None
    losses = [(log["epoch"], log["eval_loss"]) for log in state.log_history if "eval_loss" in log]
    best_epoch = next((epoch for epoch, loss in losses if loss == state.best_metric), None)
    return {
        "patience": cfg.distill.early_stopping_patience,
        "max_epochs": cfg.sft.num_train_epochs,
        "stopped_at_epoch": round(state.epoch or 0, 3),
        "stopped_at_step": state.global_step,
        "stopped_early": state.global_step < state.max_steps,
        "best_epoch": best_epoch,
        "best_eval_loss": state.best_metric,
        "eval_loss_by_epoch": [[round(epoch, 3), round(loss, 5)] for epoch, loss in losses],
    }
