"""What a teacher run costs: a price table, per-call cost estimates and a spending cap.

Prices are USD per 1M tokens, looked up by model id. The defaults cover OpenAI's gpt-4o family;
anything else counts as free in reports (self-hosted: vLLM, Ollama, `distill serve`), but `--max-cost`
refuses a model with no known price, because the cap could never trip. A YAML `prices:` block
overrides or extends the table. `CostGuard` is the `--max-cost` check: the OpenAI backend asks it
before every request, and once the next call could pass the cap it stops sending and the generate
CLI ends the run cleanly with every finished trace kept. eval imports `estimate_cost` for its
cost-per-dialogue column. `worst_case_cost` is the up-front estimate `distill generate` prints and
the check `distill batch` makes before it submits a round.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Price:
    input_per_m: float  # USD per 1M prompt tokens
    output_per_m: float  # USD per 1M completion tokens


# Public list prices (USD / 1M tokens) at the time of writing; override in YAML when they change.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-2024-08-06": Price(2.50, 10.00),
    "gpt-4o-2024-11-20": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4o-mini-2024-07-18": Price(0.15, 0.60),
    "gpt-3.5-turbo": Price(0.50, 1.50),  # ChatGPT's API (gpt-3.5-turbo-0125), as ESD-CoT's chains were written
}
# OpenAI's Batch API bills half the synchronous price.
BATCH_DISCOUNT = 0.5
FREE = Price(0.0, 0.0)


class CostLimitReached(RuntimeError):
    """Raised by a backend when the next request could push the run past `--max-cost`."""


def price_table(overrides: Optional[Mapping[str, object]] = None) -> dict[str, Price]:
    """The default table with YAML overrides applied: `{model: {input: 2.5, output: 10}}` or `[2.5, 10]`."""
    table = dict(DEFAULT_PRICES)
    for model, value in (overrides or {}).items():
        if isinstance(value, Mapping):
            table[model] = Price(float(value.get("input", 0.0)), float(value.get("output", 0.0)))
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            table[model] = Price(float(value[0]), float(value[1]))
        else:
            raise ValueError(
                f"prices: entry '{model}' must be {{input: X, output: Y}} or [X, Y] (USD per 1M tokens), got {value!r}"
            )
    return table


def known_price(model: str, table: Optional[Mapping[str, Price]] = None) -> Optional[Price]:
    """Exact id first, then the longest known prefix (dated snapshots); None when the table has neither."""
    table = DEFAULT_PRICES if table is None else table
    if model in table:
        return table[model]
    prefixes = [m for m in table if model.startswith(m)]
    return table[max(prefixes, key=len)] if prefixes else None


def lookup_price(model: str, table: Optional[Mapping[str, Price]] = None) -> Price:
    """`known_price`, or free: the cost column of a report for self-hosted models."""
    return known_price(model, table) or FREE


def estimate_cost(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    table: Optional[Mapping[str, Price]] = None,
    batch: bool = False,
) -> float:
    """USD for one call (or a sum of calls) of `model`."""
    price = lookup_price(model, table)
    usd = (prompt_tokens * price.input_per_m + completion_tokens * price.output_per_m) / 1_000_000
    return usd * (BATCH_DISCOUNT if batch else 1.0)


def estimate_prompt_tokens(messages: list[dict[str, str]]) -> int:
    """~4 characters a token for English, plus a few per message; for reservations and estimates only."""
    return sum(len(m.get("content", "")) for m in messages) // 4 + 4 * len(messages)


def worst_case_cost(
    model: str,
    calls: list[tuple[int, int]],
    table: Optional[Mapping[str, Price]] = None,
    batch: bool = False,
) -> float:
    """USD if every (prompt tokens, max completion tokens) call used its whole completion budget."""
    return estimate_cost(model, sum(c[0] for c in calls), sum(c[1] for c in calls), table, batch)


@dataclass
class CostGuard:
    """A running USD total with a cap, shared by every request of a run (thread-safe)."""

    max_cost: Optional[float] = None  # None = no cap; the total is still tracked
    table: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    spent: float = 0.0
    tripped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def require_price(self, model: str) -> None:
        """With a cap, an unpriced model would count as free and the cap would never trip: refuse it."""
        if self.max_cost is not None and known_price(model, self.table) is None:
            raise ValueError(
                f"--max-cost: no price is known for model '{model}', so the cap could never trip; give its "
                f"prices in the backend config (prices: {{{model}: {{input: X, output: Y}}}}, USD per 1M tokens)"
            )

    def reserve(self, model: str, prompt_tokens: int, max_completion_tokens: int) -> bool:
        """True if a call of this size still fits under the cap; False trips the guard for good."""
        with self._lock:
            if self.max_cost is None:
                return True
            worst = estimate_cost(model, prompt_tokens, max_completion_tokens, self.table)
            if self.tripped or self.spent + worst > self.max_cost:
                self.tripped = True
                return False
            self.spent += worst  # held until `settle` replaces it with the real usage
            return True

    def settle(self, model: str, reserved: tuple[int, int], used: tuple[int, int]) -> None:
        """Swap a reservation for the tokens the server actually billed."""
        with self._lock:
            if self.max_cost is not None:
                self.spent -= estimate_cost(model, *reserved, self.table)
            self.spent += estimate_cost(model, *used, self.table)

    def message(self) -> str:
        return (
            f"stopped: the next requests could pass --max-cost ${self.max_cost:.4f} "
            f"(spent about ${self.spent:.4f}); finished traces are kept, rerun with a higher cap to resume"
        )
