"""A decode-step attention for CPUs, registered with transformers as `trace_distill_cpu`.

On a CPU, transformers' sdpa path for one query token over a masked cache first copies the keys and
values once per query head (grouped-query attention with a mask), then runs torch's kernel; the two
batched matmuls below were faster per layer from 8 rows up (docs/performance.md lists it among the
decoder's speed-ups). For a one-token query over at least `MIN_ROWS` rows this function computes the
same softmax(q k^T * scale + mask) v with the grouped heads as a view and fp32 scores; anything else
(fewer rows, prefill, training, dropout, sinks, soft-capping) goes to transformers' own sdpa function
unchanged.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

NAME = "trace_distill_cpu"
# Below this many rows sdpa was as fast or faster.
MIN_ROWS = 8


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    special = (
        dropout or kwargs.get("s_aux") is not None or kwargs.get("softcap") or kwargs.get("position_bias") is not None
    )
    if q_len != 1 or batch < MIN_ROWS or special or heads % kv_heads or key.shape[-1] != value.shape[-1]:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # query head h reads kv head h // group
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * (scaling if scaling is not None else dim**-0.5)
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, -scores.shape[-1] :]  # [batch or 1, 1, 1, kv]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [batch, kv_heads, group, dim]
    return out.reshape(batch, 1, heads, dim), None


def use_decode_attention(model: Any) -> bool:
    """Switch `model` (sdpa on a CPU) to `decode_attention`; returns whether it did."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa" or next(model.parameters()).device.type != "cpu":
        return False
    AttentionInterface.register(NAME, decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
