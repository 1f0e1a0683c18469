"""Next-token choice for the continuous decoder (`distill.backends.continuous`): each row's grammar mask
(one llguidance matcher per row), then argmax, or sampling at the request's temperature cut by its top-p
min-p and typical-p, in the order transformers' `generate` applies them, so both decode paths sample the same set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from distill.backends.constrained import CompiledSchema, allocate_bitmask, apply_bitmask, fill_bitmask


@dataclass
class Sampler:
    """Next-token choice per row: its grammar's mask (one llguidance matcher per row), then argmax or sampling
    from the temperature's distribution, cut to its top-p nucleus and min-p floor."""

    temperature: float
    grammar: Optional[CompiledSchema]
    vocab_size: int
    seed: int  # each request's random stream derives from it and the prompt (`generator`)
    device: str
    bitmask: Optional[torch.Tensor]
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    # a request's own seed where requests of one decode carry different ones (consensus samples of one prompt)
    request_seeds: tuple[Optional[int], ...] = ()

    @classmethod
    def make(
        cls,
        temperature: float,
        grammar: Optional[CompiledSchema],
        vocab_size: int,
        seed: Optional[int],
        device: str,
        rows: int,
        top_p: float = 1.0,
        min_p: float = 0.0,
        typical_p: float = 1.0,
        request_seeds: Sequence[Optional[int]] = (),
    ):
        seed = seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        bitmask = allocate_bitmask(rows, vocab_size) if grammar is not None else None
        return cls(
            temperature, grammar, vocab_size, seed, device, bitmask, top_p, min_p, typical_p, tuple(request_seeds)
        )

    def matcher(self) -> Any:
        return self.grammar.matcher() if self.grammar is not None else None

    def generator(self, prompt: Sequence[int], request: int = 0) -> Optional[torch.Generator]:
        """A request's own random stream (None when greedy), seeded by its seed (the request's own in
        `request_seeds`, else the decode's) and its prompt. One stream per request, not per decode, so what a
        request samples does not depend on which others share the call or its steps, or on when one of them
        ends (int tuples hash the same in every process); two requests of one prompt sample apart by seed."""
        if self.temperature <= 0:
            return None
        own = self.request_seeds[request] if request < len(self.request_seeds) else None
        generator = torch.Generator(device=self.device)
        generator.manual_seed(hash((self.seed if own is None else own, *prompt)) % 2**63)
        return generator

    def choose(
        self, logits: torch.Tensor, matchers: list[Any], generators: list[Optional[torch.Generator]]
    ) -> list[int]:
        """Pick each row's next token; `logits` are [len(matchers), vocab], row j masked by matchers[j] and
        sampled from generators[j]."""
        logits = logits.float()
        if self.grammar is not None:
            fill_bitmask(self.bitmask, matchers)
            apply_bitmask(logits, self.bitmask)
        if self.temperature > 0:
            probs = self.probabilities(logits)
            return [int(torch.multinomial(p, 1, generator=g)) for p, g in zip(probs, generators)]
        return logits.argmax(dim=-1).tolist()

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax(logits / temperature) cut by top-p, then min-p, then typical-p (transformers' order, so the
        `generate` fallback samples the same set); cut tokens get 0, the rest stay unnormalised, as `multinomial`
        allows. The most likely token survives top-p and min-p, one token survives typical-p, and the grammar
        masked the logits first."""
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1:
            ranked, order = probs.sort(dim=-1, descending=True)
            before = ranked.cumsum(dim=-1) - ranked  # the mass ranked above each token
            probs = probs.scatter(-1, order, ranked.masked_fill(before >= self.top_p, 0.0))
        if self.min_p > 0:
            probs = probs.masked_fill(probs < self.min_p * probs.amax(dim=-1, keepdim=True), 0.0)
        if self.typical_p < 1:
            probs = typical(probs, self.typical_p)
        return probs


def typical(probs: torch.Tensor, mass: float) -> torch.Tensor:
    """Locally typical sampling (Meister et al. 2023) as transformers' `TypicalLogitsWarper` cuts: rank tokens by how
    far their surprise lies from the distribution's entropy, keep the nearest up to `mass` of the probability (the
    one that crosses it too, and always the nearest); the others get 0. `probs` may be unnormalised, with 0 for
    tokens an earlier cut removed."""
    p = probs / probs.sum(dim=-1, keepdim=True)
    surprise = -torch.log(p)  # inf for removed tokens, which so rank last
    entropy = torch.nansum(p * surprise, dim=-1, keepdim=True)  # 0 x inf is nan: removed tokens add nothing
    distance, order = (surprise - entropy).abs().sort(dim=-1)
    reached = p.gather(-1, order).cumsum(dim=-1)
    last = (reached < mass).sum(dim=-1, keepdim=True).clamp(max=p.shape[-1] - 1)
    cut = distance > distance.gather(-1, last)
    cut[..., 0] = False
    return probs.masked_fill(cut.scatter(-1, order, cut), 0.0)
