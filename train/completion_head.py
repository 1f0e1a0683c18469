"""A TRL `SFTTrainer` whose loss runs the LM head on completion tokens only (`completion_head`)."""

from __future__ import annotations

import torch


def completion_head_trainer():
    """`SFTTrainer` whose loss runs the LM head only where a token is trained (the completion).

    TRL 1.16 computes log-probs for *every* position through a chunked fp32 LM head; on a CPU that was
    a third of a step here (SmolLM2: 49k-word vocabulary, prompts ~2/3 of the tokens). This loss runs
    the decoder, keeps the hidden states whose next token has a label, and applies the LM head (under
    the same autocast, so bf16 where enabled) and the cross-entropy to those rows only: the same
    token-summed NLL over `num_items_in_batch`, and the same `entropy` / `mean_token_accuracy`
    metrics. Anything it does not cover (DDP, label smoothing, DFT loss, custom loss functions, MoE
    aux loss, `return_outputs`) goes to TRL's own `compute_loss`. On an H100 TRL's Triton head was
    faster (benchmarks/gpu_train.py), hence `completion_head: auto` = CPU only.
    """
    import torch.nn.functional as F
    from trl import SFTTrainer

    class CompletionHeadSFTTrainer(SFTTrainer):
        def _own_loss_applies(self, return_outputs: bool) -> bool:
            return not (
                return_outputs
                or self.args.loss_type != "nll"
                or self.aux_loss_enabled
                or self.label_smoother is not None
                or self.compute_loss_func is not None
                or self.accelerator.num_processes > 1
            )

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not self._own_loss_applies(return_outputs):
                return super().compute_loss(
                    model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
                )
            mode = "train" if self.model.training else "eval"
            lm = model.get_base_model() if hasattr(model, "get_base_model") else model
            body = {k: v for k, v in inputs.items() if k != "labels"}
            targets = inputs["labels"][:, 1:]
            keep = targets != -100
            gold = targets[keep]
            # Bypassing model.forward also bypasses accelerate's autocast wrapper on it: re-enter it here.
            with self.accelerator.autocast():
                hidden = lm.get_decoder()(**body, use_cache=False).last_hidden_state
                logits = lm.get_output_embeddings()(hidden[:, :-1][keep]).float()
            nll = F.cross_entropy(logits, gold, reduction="sum")
            denom = keep.sum() if num_items_in_batch is None else num_items_in_batch
            loss = nll / torch.as_tensor(denom, device=nll.device).clamp(min=1)
            with torch.no_grad():
                n = keep.sum()
                logp = torch.log_softmax(logits, dim=-1)
                entropy = -(logp.exp() * logp).sum(-1).sum()
                correct = (logits.argmax(-1) == gold).sum()
                self._metrics[mode]["entropy"].append((entropy / n).item() if n > 0 else 0.0)
                self._metrics[mode]["mean_token_accuracy"].append((correct / n).item() if n > 0 else 0.0)
            if mode == "train":
                # Counted as TRL counts them: attended tokens, or the flattened length when padding-free.
                mask = inputs.get("attention_mask")
                self._total_train_tokens += int(mask.sum()) if mask is not None else inputs["position_ids"].size(1)
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return loss

    return CompletionHeadSFTTrainer
