"""A CPU attention for decode steps and padding-free training, registered with transformers as `trace_distill_cpu`.

Two shapes are faster on a CPU than transformers' sdpa path, and everything else goes to that path
unchanged (fewer rows, prefill, dropout, sinks, soft-capping, a mask that is not the one expected):

- **A one-token query over at least `MIN_ROWS` rows** (a decode step). sdpa first copies the keys and
  values once per query head (grouped-query attention with a mask), then runs torch's kernel; two
  batched matmuls with the grouped heads as a view and fp32 scores compute the same softmax(q k^T *
  scale + mask) v faster per layer from 8 rows up (docs/performance.md lists it among the decoder's
  speed-ups).
- **Rows flattened into one sequence** (padding-free training: one row of concatenated examples whose
  `position_ids` restart at 0 for each). transformers gives sdpa a block-diagonal causal mask over the
  whole flattened length, so the kernel computes every example against every other and masks the result
  away; attention by example, causal within each, computes the same outputs and gradients on the blocks
  alone (docs/performance.md: the fp32 training A/B).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

NAME = "trace_distill_cpu"
# Below this many rows sdpa was as fast or faster.
MIN_ROWS = 8


def cpu_attention(
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
    plain = not special and heads % kv_heads == 0 and key.shape[-1] == value.shape[-1]
    if plain and q_len == 1 and batch >= MIN_ROWS:
        return _one_token(query, key, value, attention_mask, scaling), None
    starts = _example_starts(attention_mask, kwargs.get("position_ids"), key.shape[2]) if plain else None
    if starts is not None and getattr(module, "is_causal", True):
        return _by_example(query, key, value, starts, scaling), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def _one_token(query, key, value, attention_mask, scaling) -> torch.Tensor:
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # query head h reads kv head h // group
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * (scaling if scaling is not None else dim**-0.5)
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, -scores.shape[-1] :]  # [batch or 1, 1, 1, kv]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [batch, kv_heads, group, dim]
    return out.reshape(batch, 1, heads, dim)


def _example_starts(
    attention_mask: Optional[torch.Tensor], position_ids: Optional[torch.Tensor], kv_len: int
) -> Optional[list[int]]:
    """Where each example of one flattened row starts, when the mask is exactly their block-causal mask.

    None for anything else: several rows, a KV cache (keys longer than the queries), positions that are
    not 0, 1, 2, ... per example, or a mask other than the boolean block-diagonal one transformers builds
    from those positions (a padded row, say), since the blocks are computed from the positions alone.
    """
    if (
        attention_mask is None
        or attention_mask.dtype != torch.bool
        or attention_mask.shape != (1, 1, kv_len, kv_len)
        or position_ids is None
        or position_ids.shape != (1, kv_len)
    ):
        return None
    pos = position_ids[0]
    restart = pos == 0
    if kv_len < 2 or not bool(restart[0]) or not bool(restart[1:].any()):
        return None
    if not bool(((pos[1:] == pos[:-1] + 1) | restart[1:]).all()):
        return None
    starts = torch.nonzero(restart).flatten().tolist()
    lengths = torch.diff(torch.tensor([*starts, kv_len]))
    if int(attention_mask.sum()) != int((lengths * (lengths + 1) // 2).sum()):  # the mask holds more than the blocks
        return None
    return starts


def _by_example(query, key, value, starts: list[int], scaling) -> torch.Tensor:
    """Causal attention within each example of one flattened row: [1, q_len, heads, dim]."""
    from torch.nn.functional import scaled_dot_product_attention

    ends = [*starts[1:], query.shape[2]]
    grouped = key.shape[1] != query.shape[1]
    outs = [
        scaled_dot_product_attention(
            query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=scaling, enable_gqa=grouped
        )
        for a, b in zip(starts, ends)
    ]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()


def use_cpu_attention(model: Any) -> bool:
    """Switch `model` (sdpa on a CPU) to `cpu_attention`; returns whether it did."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa" or next(model.parameters()).device.type != "cpu":
        return False
    AttentionInterface.register(NAME, cpu_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
