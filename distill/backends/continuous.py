"""Continuous batching for the local backend: a row that finishes is refilled at once.

`model.generate` runs a batch in lockstep until its longest answer ends, so rows that finished early
keep being computed: on the pipeline's JSON answers that was about three row-steps per useful token.
Here a fixed pool of `rows` slots decodes together, and a slot whose answer ends takes the next
queued request straight away:

- Every slot's keys and values live in one preallocated buffer per layer, `[rows, kv_heads, capacity,
  head_dim]`. All slots write their next token in the same column, so one decode step is one batched
  forward. A slot's prompt sits right-aligned before that column, with the columns in front of it
  masked; each token gets its own position id, so a slot's positions do not depend on the column.
- Free slots are refilled in groups (once a quarter of them are free): their prompts are prefilled
  together, left-padded (a batched prefill ran about twice the tokens/s of one short prompt alone),
  and each row's cache is copied into its slot. The prefix all of a call's prompts share (a teacher
  role's instructions: 44-69% of its prompt) is computed once and only the suffixes are prefilled.
- When the write column reaches the buffer's end, columns no slot uses any more are dropped from the
  front; when the queue is empty and half the slots are idle, the pool shrinks to the busy ones.
- Each slot has its own xgrammar matcher and its own sampling step, so constrained JSON and
  temperature work per row as in `generate`.

Supported for models whose every layer is full attention (Llama, Qwen2, SmolLM, Mistral without a
sliding window, ...); `supports` says so and the backend falls back to `model.generate` otherwise.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


def supports(config: Any) -> bool:
    """True when every decoder layer is full attention with a standard KV cache."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False
    return not getattr(text, "sliding_window", None) or not getattr(text, "use_sliding_window", True)


class _PoolLayer(DynamicLayer):
    """One layer's view of the pool: `update` writes the step's keys/values into the current column."""

    def __init__(self, pool: _Pool, index: int):
        super().__init__()
        self.pool, self.index = pool, index
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        pool, col = self.pool, self.pool.n
        keys, values = pool.keys[self.index], pool.values[self.index]
        keys[:, :, col : col + 1] = key_states
        values[:, :, col : col + 1] = value_states
        return keys[:, :, : col + 1], values[:, :, : col + 1]

    def get_seq_length(self) -> int:
        return self.pool.n

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.pool.n + query_length, 0


class _Pool:
    """The shared KV buffer of all slots, its attention mask and the write column `n`."""

    def __init__(self, prefill: DynamicCache, rows: int, capacity: int, start: int):
        shapes = [(layer.keys.shape[1], layer.keys.shape[3], layer.values.shape[3]) for layer in prefill.layers]
        dtype, device = prefill.layers[0].keys.dtype, prefill.layers[0].keys.device
        self.keys = [torch.zeros(rows, h, capacity, dk, dtype=dtype, device=device) for h, dk, _ in shapes]
        self.values = [torch.zeros(rows, h, capacity, dv, dtype=dtype, device=device) for h, _, dv in shapes]
        self.mask = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        self.capacity, self.n = capacity, start
        self.cache = Cache(layers=[_PoolLayer(self, i) for i in range(len(shapes))])

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    def place(self, slot: int, prefill: DynamicCache, row: int, shared: int, own: int) -> None:
        """Copy row `row` of a prefill into `slot`, ending just before the write column: its first
        `shared` columns (a common prefix) and its last `own` (the row's left-padded suffix)."""
        lo, mid = self.n - shared - own, self.n - own
        self.mask[slot].zero_()
        self.mask[slot, lo : self.n] = True
        for i, layer in enumerate(prefill.layers):
            for buf, src in ((self.keys[i], layer.keys), (self.values[i], layer.values)):
                buf[slot, :, lo:mid] = src[row, :, :shared]
                buf[slot, :, mid : self.n] = src[row, :, src.shape[2] - own :]

    def shift_left(self, by: int) -> None:
        """Drop the first `by` columns (no busy slot uses them)."""
        keep = self.n - by
        for buf in (*self.keys, *self.values):
            buf[:, :, :keep] = buf[:, :, by : self.n].clone()
        self.mask[:, :keep] = self.mask[:, by : self.n].clone()
        self.mask[:, keep:] = False
        self.n = keep

    def select(self, slots: list[int]) -> None:
        """Keep only `slots`, in that order."""
        index = torch.tensor(slots, device=self.mask.device)
        self.keys = [buf.index_select(0, index) for buf in self.keys]
        self.values = [buf.index_select(0, index) for buf in self.values]
        self.mask = self.mask.index_select(0, index)


def _common_prefix(prompts: Sequence[list[int]]) -> int:
    """Length of the token prefix every prompt shares, leaving each at least one token of its own."""
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return max(n, 0)


@dataclass
class _Row:
    request: int  # index into the caller's lists
    prompt_len: int
    matcher: Any
    tokens: list[int] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Finished:
    request: int
    tokens: list[int]  # generated ids, the stop token included when one was produced
    seconds: float  # its share of the wall time: its prefill plus an even share of each step it was in


def decode(
    model: Any,
    prompts: Sequence[list[int]],
    *,
    rows: int,
    max_new_tokens: int,
    temperature: float,
    stop_ids: Sequence[int],
    grammar: Any = None,
    vocab_size: int,
    seed: Optional[int] = None,
    device: str = "cpu",
    prefill_tokens: int = 2048,
    min_shared_prefix: int = 32,
    on_finish: Optional[Callable[[Finished], None]] = None,
) -> list[Finished]:
    """Decode every prompt with continuous batching over `rows` slots; results in prompt order.

    `prompts` are served in the order given (sort them by length for the least masking). `grammar` is
    an xgrammar compiled grammar applied to every row, or None.
    """
    import xgrammar

    # The decoder stack and the LM head are called apart so the head runs on one position per row
    # as a plain 2-D matmul: through `logits_to_keep` a single row's last position reached the head
    # as a strided 3-D tensor and torch copied the whole transposed head (~0.1 s per prefill).
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
    queue = deque(range(len(prompts)))
    results: list[Optional[Finished]] = [None] * len(prompts)
    generator = None
    if temperature > 0:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
    longest = max(len(p) for p in prompts)
    pad_id = stop_ids[0]  # any id: padded columns are masked
    refill_at = max(1, rows // 4)
    capacity = longest + 2 * max_new_tokens + 1
    pool: Optional[_Pool] = None
    slots: list[Optional[_Row]] = [None] * min(rows, len(prompts))
    bitmask = None

    def choose(logits: torch.Tensor, busy: list[int]) -> list[int]:
        """Mask (per row's grammar) and pick the next token of each busy slot; logits are [len(busy), vocab]."""
        logits = logits.float()
        if grammar is not None:
            for j, slot in enumerate(busy):
                slots[slot].matcher.fill_next_token_bitmask(bitmask, j)
            xgrammar.apply_token_bitmask_inplace(logits, bitmask[: len(busy)].to(logits.device), vocab_size=vocab_size)
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            return torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        return logits.argmax(dim=-1).tolist()

    def accept(slot: int, token: int, seconds: float) -> None:
        """Record `token` for `slot`; free the slot when the answer is over."""
        row = slots[slot]
        row.tokens.append(token)
        row.seconds += seconds
        done = token in stop_ids or len(row.tokens) >= max_new_tokens
        if not done and row.matcher is not None and not row.matcher.accept_token(token):
            done = True  # cannot happen with the bitmask applied; stop rather than emit invalid JSON
        if done:
            finished = Finished(row.request, row.tokens, row.seconds)
            results[row.request] = finished
            slots[slot] = None
            pool.mask[slot].zero_()
            if on_finish is not None:
                on_finish(finished)

    shared = _common_prefix(prompts) if len(prompts) > 1 else 0
    shared = shared if shared >= min_shared_prefix else 0
    prefix_cache: Optional[DynamicCache] = None

    def fill(free: list[int]) -> None:
        """Prefill queued prompts into the `free` slots, several per forward, and take their first tokens.

        The group's common prompt prefix (a teacher role's instructions) is computed once; each prefill
        then runs only the rows' own suffixes over it.
        """
        nonlocal pool, bitmask, prefix_cache
        if shared and prefix_cache is None:
            started = time.perf_counter()
            prefix_cache = DynamicCache(config=model.config)
            decoder(
                input_ids=torch.tensor([prompts[queue[0]][:shared]], device=device),
                past_key_values=prefix_cache,
                use_cache=True,
            )
            carried = time.perf_counter() - started  # counted into the first rows' time
        else:
            carried = 0.0
        while free and queue:
            # Prompts are length-sorted, so a group pads little; its size is bounded in tokens.
            take = [queue.popleft()]
            while (
                queue
                and len(take) < len(free)
                and (len(take) + 1) * (len(prompts[queue[0]]) - shared) <= prefill_tokens
            ):
                take.append(queue.popleft())
            suffixes = [prompts[r][shared:] for r in take]
            width = max(map(len, suffixes))
            ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in suffixes], device=device)
            own = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in suffixes], device=device)
            started = time.perf_counter()
            cache = DynamicCache(config=model.config)
            if shared:
                for i, layer in enumerate(prefix_cache.layers):
                    cache.update(
                        layer.keys.expand(len(take), -1, -1, -1).contiguous(),
                        layer.values.expand(len(take), -1, -1, -1).contiguous(),
                        i,
                    )
            attention = torch.cat([torch.ones(len(take), shared, dtype=own.dtype, device=device), own], dim=1)
            hidden = decoder(
                input_ids=ids,
                attention_mask=attention,
                position_ids=shared + (own.cumsum(-1) - 1).clamp(min=0),
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state
            if pool is None:
                pool = _Pool(cache, len(slots), capacity, start=longest)
                bitmask = xgrammar.allocate_token_bitmask(pool.rows, vocab_size) if grammar is not None else None
            targets, free[:] = free[: len(take)], free[len(take) :]
            for j, (slot, request) in enumerate(zip(targets, take)):
                pool.place(slot, cache, j, shared, len(suffixes[j]))
                matcher = xgrammar.GrammarMatcher(grammar) if grammar is not None else None
                length = len(prompts[request])
                slots[slot] = _Row(request, length, matcher)
            tokens = choose(head(hidden[:, -1].contiguous()), targets)
            share = (time.perf_counter() - started + carried) / len(take)
            carried = 0.0
            for slot, token in zip(targets, tokens):
                accept(slot, token, share)

    with torch.inference_mode():
        fill(list(range(len(slots))))
        while True:
            free = [s for s, row in enumerate(slots) if row is None]
            # Refill in groups: a batched prefill runs about twice the tokens/s of one prompt alone,
            # and a few idle slots cost little in a decode step.
            if queue and free and (len(free) >= min(refill_at, len(queue)) or len(free) == len(slots)):
                fill(free)
            busy = [s for s, row in enumerate(slots) if row is not None]
            if not busy:
                if not queue:
                    break
                continue
            if not queue and len(busy) <= len(slots) // 2:
                pool.select(busy)  # the tail: stop computing idle slots
                slots = [slots[s] for s in busy]
                busy = list(range(len(slots)))
            if pool.n >= pool.capacity:
                # No busy row uses a column before `lo` (idle rows' masks are clear); keep the write
                # column at or past the longest prompt so any queued request still fits in front of it.
                lo = int(pool.mask.any(dim=0).nonzero()[0])
                by = min(lo, pool.n - longest)
                if by <= 0:  # cannot happen: a busy row spans at most longest + max_new_tokens columns
                    raise RuntimeError(f"continuous batching: no free column (n={pool.n}, lo={lo}, longest={longest})")
                pool.shift_left(by)
            started = time.perf_counter()
            col = pool.n
            pool.mask[busy, col] = True
            idle = [s for s in range(len(slots)) if slots[s] is None]
            if idle:
                pool.mask[idle, col] = True  # an idle row attends to its own dummy token (no all-masked row)
            input_ids = torch.tensor(
                [[slots[s].tokens[-1] if slots[s] is not None else stop_ids[0]] for s in range(len(slots))],
                device=device,
            )
            positions = torch.tensor(
                [
                    [slots[s].prompt_len + len(slots[s].tokens) - 1 if slots[s] is not None else 0]
                    for s in range(len(slots))
                ],
                device=device,
            )
            mask = pool.mask[:, None, None, : col + 1]
            hidden = decoder(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=pool.cache,
                use_cache=True,
            ).last_hidden_state
            pool.n += 1
            if idle:
                pool.mask[idle, col] = False
            tokens = choose(head(hidden[busy, -1].contiguous()), busy)
            share = (time.perf_counter() - started) / len(busy)
            for slot, token in zip(busy, tokens):
                accept(slot, token, share)
    return results  # type: ignore[return-value]
