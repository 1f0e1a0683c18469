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
  together, left-padded (a batched prefill runs more tokens/s than one short prompt alone),
  and each row's cache is copied into its slot. The prefix all of a call's prompts share (a teacher
  role's instructions: 44-69% of its prompt) is computed once and only the suffixes are prefilled.
- When the write column reaches the buffer's end, columns no slot uses any more are dropped from the
  front; when the queue is empty and half the slots are idle, the pool shrinks to the busy ones.
- Each slot has its own llguidance matcher and its own sampling step, so constrained JSON,
  temperature, top-p and min-p work per row as in `generate`.

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

from distill.backends.constrained import CompiledSchema
from distill.backends.sampler import Sampler


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
    generator: Optional[torch.Generator]  # the request's own random stream (None when greedy)
    tokens: list[int] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Finished:
    request: int
    tokens: list[int]  # generated ids, the stop token included when one was produced
    seconds: float  # its share of the wall time: its prefill plus an even share of each step it was in
    gave_up: Optional[str] = None  # why `Limits.give_up` ended the answer early, else None


@dataclass
class Limits:
    """How a decode runs: slots, answer length, where answers stop, and the prefill grouping."""

    rows: int
    max_new_tokens: int
    stop_ids: Sequence[int]
    device: str = "cpu"
    prefill_tokens: int = 2048  # tokens per grouped prefill forward
    min_shared_prefix: int = 32  # a shorter common prefix is not worth its own forward
    on_finish: Optional[Callable[[Finished], None]] = None
    # Asked every `give_up_every` tokens with the answer so far: a reason ends the answer there (a loop
    # would otherwise run to max_new_tokens and only then be rejected).
    give_up: Optional[Callable[[list[int]], Optional[str]]] = None
    give_up_every: int = 8


class ContinuousDecoder:
    """Decoding state in named parts: the request queue, the slots (`_Row` or None), the KV pool.

    `fill` prefills queued prompts into free slots, `step` decodes one token for every busy slot,
    `accept` records a token and frees a slot whose answer is over; `run` loops until the queue and
    the slots are empty.
    """

    def __init__(self, model: Any, prompts: Sequence[list[int]], sampler: Sampler, limits: Limits):
        # The decoder stack and the LM head are called apart so the head runs on one position per row
        # as a plain 2-D matmul: through `logits_to_keep` a single row's last position reached the head
        # as a strided 3-D tensor and torch copied the whole transposed head on every prefill.
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.config = model.config
        self.decoder, self.head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
        self.prompts, self.sampler, self.limits = prompts, sampler, limits
        self.queue = deque(range(len(prompts)))
        self.results: list[Optional[Finished]] = [None] * len(prompts)
        self.slots: list[Optional[_Row]] = [None] * min(limits.rows, len(prompts))
        self.longest = max(len(p) for p in prompts)
        self.pool: Optional[_Pool] = None
        shared = _common_prefix(prompts) if len(prompts) > 1 else 0
        self.shared = shared if shared >= limits.min_shared_prefix else 0
        self.prefix_cache: Optional[DynamicCache] = None

    def run(self) -> list[Finished]:
        refill_at = max(1, self.limits.rows // 4)
        with torch.inference_mode():
            self.fill(list(range(len(self.slots))))
            while True:
                free = [s for s, row in enumerate(self.slots) if row is None]
                # Refill in groups: a batched prefill runs more tokens/s than one prompt alone,
                # and a few idle slots cost little in a decode step.
                if (
                    self.queue
                    and free
                    and (len(free) >= min(refill_at, len(self.queue)) or len(free) == len(self.slots))
                ):
                    self.fill(free)
                busy = [s for s, row in enumerate(self.slots) if row is not None]
                if not busy:
                    if not self.queue:
                        break
                    continue
                if not self.queue and len(busy) <= len(self.slots) // 2:
                    busy = self.shrink(busy)
                if self.pool.n >= self.pool.capacity:
                    self.make_room()
                self.step(busy)
        return self.results  # type: ignore[return-value]

    def accept(self, slot: int, token: int, seconds: float) -> None:
        """Record `token` for `slot`; free the slot when the answer is over."""
        row = self.slots[slot]
        row.tokens.append(token)
        row.seconds += seconds
        done = token in self.limits.stop_ids or len(row.tokens) >= self.limits.max_new_tokens
        if not done and row.matcher is not None and not row.matcher.consume_token(token):
            done = True  # cannot happen with the bitmask applied; stop rather than emit invalid JSON
        gave_up = None
        if not done and self.limits.give_up is not None and len(row.tokens) % self.limits.give_up_every == 0:
            gave_up = self.limits.give_up(row.tokens)
            done = gave_up is not None
        if done:
            finished = Finished(row.request, row.tokens, row.seconds, gave_up)
            self.results[row.request] = finished
            self.slots[slot] = None
            self.pool.mask[slot].zero_()
            if self.limits.on_finish is not None:
                self.limits.on_finish(finished)

    def fill(self, free: list[int]) -> None:
        """Prefill queued prompts into the `free` slots, several per forward, and take their first tokens."""
        carried = self._prefill_shared_prefix()  # counted into the first rows' time
        while free and self.queue:
            take = self._next_group(len(free))
            targets, free = free[: len(take)], free[len(take) :]
            self._prefill(take, targets, carried)
            carried = 0.0

    def _prefill_shared_prefix(self) -> float:
        """The prompts' common prefix (a teacher role's instructions), computed once; returns its seconds."""
        if not self.shared or self.prefix_cache is not None:
            return 0.0
        started = time.perf_counter()
        self.prefix_cache = DynamicCache(config=self.config)
        first = self.prompts[self.queue[0]][: self.shared]
        ids = torch.tensor([first], device=self.limits.device)
        self.decoder(input_ids=ids, past_key_values=self.prefix_cache, use_cache=True)
        return time.perf_counter() - started

    def _next_group(self, room: int) -> list[int]:
        # Prompts are length-sorted, so a group pads little; its size is bounded in tokens.
        take = [self.queue.popleft()]
        while (
            self.queue
            and len(take) < room
            and (len(take) + 1) * (len(self.prompts[self.queue[0]]) - self.shared) <= self.limits.prefill_tokens
        ):
            take.append(self.queue.popleft())
        return take

    def _prefill(self, take: list[int], targets: list[int], carried: float) -> None:
        """Prefill the requests `take` into the slots `targets` (the suffixes only, over the shared prefix)."""
        shared, device = self.shared, self.limits.device
        suffixes = [self.prompts[r][shared:] for r in take]
        width = max(map(len, suffixes))
        pad_id = self.limits.stop_ids[0]  # any id: padded columns are masked
        ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in suffixes], device=device)
        own = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in suffixes], device=device)
        started = time.perf_counter()
        cache = DynamicCache(config=self.config)
        if shared:
            for i, layer in enumerate(self.prefix_cache.layers):
                keys, values = (t.expand(len(take), -1, -1, -1).contiguous() for t in (layer.keys, layer.values))
                cache.update(keys, values, i)
        attention = torch.cat([torch.ones(len(take), shared, dtype=own.dtype, device=device), own], dim=1)
        hidden = self.decoder(
            input_ids=ids,
            attention_mask=attention,
            position_ids=shared + (own.cumsum(-1) - 1).clamp(min=0),
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        if self.pool is None:
            capacity = self.longest + 2 * self.limits.max_new_tokens + 1
            self.pool = _Pool(cache, len(self.slots), capacity, start=self.longest)
        for j, (slot, request) in enumerate(zip(targets, take)):
            self.pool.place(slot, cache, j, shared, len(suffixes[j]))
            self.slots[slot] = _Row(
                request,
                len(self.prompts[request]),
                self.sampler.matcher(),
                self.sampler.generator(self.prompts[request], request),
            )
        rows = [self.slots[s] for s in targets]
        tokens = self.sampler.choose(
            self.head(hidden[:, -1].contiguous()), [r.matcher for r in rows], [r.generator for r in rows]
        )
        share = (time.perf_counter() - started + carried) / len(take)
        for slot, token in zip(targets, tokens):
            self.accept(slot, token, share)

    def shrink(self, busy: list[int]) -> list[int]:
        """The tail: keep only the busy slots, so idle ones are no longer computed."""
        self.pool.select(busy)
        self.slots = [self.slots[s] for s in busy]
        return list(range(len(self.slots)))

    def make_room(self) -> None:
        """The write column reached the buffer's end: drop the columns no busy slot uses any more."""
        pool = self.pool
        # No busy row uses a column before `lo` (idle rows' masks are clear); keep the write column at
        # or past the longest prompt so any queued request still fits in front of it.
        lo = int(pool.mask.any(dim=0).nonzero()[0])
        by = min(lo, pool.n - self.longest)
        if by <= 0:  # cannot happen: a busy row spans at most longest + max_new_tokens columns
            raise RuntimeError(f"continuous batching: no free column (n={pool.n}, lo={lo}, longest={self.longest})")
        pool.shift_left(by)

    def step(self, busy: list[int]) -> None:
        """One decode step: every slot writes its next token in the pool's current column."""
        pool, slots, col = self.pool, self.slots, self.pool.n
        started = time.perf_counter()
        pool.mask[busy, col] = True
        idle = [s for s in range(len(slots)) if slots[s] is None]
        if idle:
            pool.mask[idle, col] = True  # an idle row attends to its own dummy token (no all-masked row)
        last = [[row.tokens[-1] if row is not None else self.limits.stop_ids[0]] for row in slots]
        positions = [[row.prompt_len + len(row.tokens) - 1 if row is not None else 0] for row in slots]
        hidden = self.decoder(
            input_ids=torch.tensor(last, device=self.limits.device),
            attention_mask=pool.mask[:, None, None, : col + 1],
            position_ids=torch.tensor(positions, device=self.limits.device),
            past_key_values=pool.cache,
            use_cache=True,
        ).last_hidden_state
        pool.n += 1
        if idle:
            pool.mask[idle, col] = False
        rows = [slots[s] for s in busy]
        tokens = self.sampler.choose(
            self.head(hidden[busy, -1].contiguous()), [r.matcher for r in rows], [r.generator for r in rows]
        )
        share = (time.perf_counter() - started) / len(busy)
        for slot, token in zip(busy, tokens):
            self.accept(slot, token, share)


def decode(
    model: Any,
    prompts: Sequence[list[int]],
    *,
    rows: int,
    max_new_tokens: int,
    temperature: float,
    stop_ids: Sequence[int],
    grammar: Optional[CompiledSchema] = None,
    top_p: float = 1.0,
    min_p: float = 0.0,
    typical_p: float = 1.0,
    vocab_size: int,
    seed: Optional[int] = None,
    seeds: Sequence[Optional[int]] = (),
    device: str = "cpu",
    prefill_tokens: int = 2048,
    min_shared_prefix: int = 32,
    on_finish: Optional[Callable[[Finished], None]] = None,
    give_up: Optional[Callable[[list[int]], Optional[str]]] = None,
) -> list[Finished]:
    """Decode every prompt with continuous batching over `rows` slots; results in prompt order.

    `prompts` are served in the order given (sort them by length for the least masking). `grammar` is
    a compiled schema (distill.backends.constrained) whose matcher masks every row, or None. `top_p`, `min_p`
    and `typical_p` cut the sampled distribution (`Sampler.probabilities`); greedy decoding ignores them. `seeds`: each
    prompt's own seed (None, or none given: `seed`).
    """
    rows_used = min(rows, len(prompts))
    sampler = Sampler.make(
        temperature, grammar, vocab_size, seed, device, rows_used, top_p, min_p, typical_p, request_seeds=seeds
    )
    limits = Limits(rows, max_new_tokens, stop_ids, device, prefill_tokens, min_shared_prefix, on_finish, give_up)
    return ContinuousDecoder(model, prompts, sampler, limits).run()
