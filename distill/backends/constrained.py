"""Grammar-constrained JSON decoding for in-process transformers models, built on llguidance.

Each role schema is compiled once per tokenizer into an llguidance matcher; every decoded row gets
its own copy (copying a matcher is far cheaper than compiling one). llguidance enforces
every constraint our schemas use (checked by the tests): `maxLength` on strings,
`minItems`/`maxItems` on lists, `Literal` enums, nullable fields (`anyOf` with null), optional keys
and `additionalProperties: false`. It also keeps raw control characters and special tokens
(`<|im_start|>`) out of JSON strings, which xgrammar 0.2.8 let in (benchmarks/constrained_decoders.py),
so a constrained answer parses on its first attempt.

The token mask is a bitmask, one bit per vocabulary entry, as llguidance fills it; `apply_bitmask`
unpacks it with numpy on CPU and tensor ops elsewhere (llguidance's own helper goes through
`torch.compile`, which on a CPU install means a C compiler and seconds of warm-up on the first call).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
from pydantic import BaseModel
from transformers import LogitsProcessor

# Whitespace is fixed rather than free: a small model left free to emit whitespace can spend its
# whole token budget on newlines. The layout is pydantic's compact `model_dump_json()`, the form
# distill.datasets.sft_data writes SFT targets in, so a student decodes exactly what it was trained on
# (and compact JSON is ~20% fewer tokens than `json.dumps`' spaced default).
JSON_SEPARATORS = (",", ":")
_COMPILE_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
_BITS = torch.arange(32, dtype=torch.int32)


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The llguidance grammar for a JSON schema in the compact layout; ValueError names what is wrong."""
    import llguidance

    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=_COMPILE_OPTIONS)
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise ValueError(error.strip().splitlines()[-1])
    return grammar


class CompiledSchema:
    """One schema's compiled matcher; `matcher()` hands out a fresh copy for one decoded row."""

    def __init__(self, template: Any, vocab_size: int):
        self._template, self.vocab_size = template, vocab_size

    def matcher(self) -> Any:
        return self._template.deep_copy()


class SchemaGrammars:
    """Compiled JSON grammars for one tokenizer, cached per pydantic schema class."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Optional[Sequence[int]] = None):
        import llguidance.hf

        # vocab_size is the model's (the logits' width), which may exceed the tokenizer's own
        # size because of padding rows; the bitmask must cover every logit. The stop ids are the
        # ones the decoder stops on, so a completed answer may end with any of them.
        eos = list(stop_ids) if stop_ids else None
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos)
        self.vocab_size = vocab_size
        self._compiled: dict[type[BaseModel], CompiledSchema] = {}

    def compiled(self, schema: type[BaseModel]) -> CompiledSchema:
        if schema not in self._compiled:
            import llguidance

            template = llguidance.LLMatcher(self._tokenizer, json_schema_grammar(schema.model_json_schema()))
            if template.is_error():
                raise ValueError(f"schema {schema.__name__}: {template.get_error()}")
            self._compiled[schema] = CompiledSchema(template, self.vocab_size)
        return self._compiled[schema]

    def logits_processor(self, schema: type[BaseModel]) -> Any:
        """A new processor for exactly one `generate` call (it is stateful)."""
        return GrammarLogitsProcessor(self.compiled(schema))


def allocate_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    return torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def fill_bitmask(bitmask: torch.Tensor, matchers: Sequence[Any]) -> None:
    """Row j of `bitmask` gets matchers[j]'s allowed tokens (only the stop tokens once its answer is
    complete); a None matcher, a row that is over, allows every token."""
    # llguidance.numpy, not llguidance.torch: the same pointer call, but llguidance.torch imports torch._dynamo
    # for a torch.compile kernel this code never uses (about a second in every process that generates)
    import llguidance.numpy

    words = bitmask.numpy()  # shares the tensor's memory (CPU)
    for j, matcher in enumerate(matchers):
        if matcher is None:
            bitmask[j].fill_(-1)
        else:
            llguidance.numpy.fill_next_token_bitmask(matcher, words, j)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set to -inf, in place, every logit of `logits` [rows, vocab] whose bit in `bitmask` is clear."""
    rows, vocab = logits.shape
    if logits.device.type == "cpu":
        # numpy unpacks bits in one C pass (a third of the time of tensor shifts); the words are
        # inverted first so the unpacked bits are the refused tokens, ready for masked_fill.
        refused = np.unpackbits((~bitmask[:rows]).numpy().view(np.uint8), axis=1, count=vocab, bitorder="little")
        logits.masked_fill_(torch.from_numpy(refused.view(np.bool_)), float("-inf"))
        return
    words = bitmask[:rows].to(logits.device, non_blocking=True)
    allowed = ((words[:, :, None] >> _BITS.to(logits.device)) & 1).view(rows, -1)[:, :vocab]
    logits.masked_fill_(allowed == 0, float("-inf"))


class GrammarLogitsProcessor(LogitsProcessor):
    """A transformers logits processor that masks every row of one `generate` call by its own matcher.

    Each call first feeds every live row the token it sampled last, then masks the next step. A row
    whose answer is over (its stop token consumed) is left unmasked: `generate` pads it whatever its
    logits say, and an all-masked row would make sampling fail.
    """

    def __init__(self, compiled: CompiledSchema):
        self.compiled = compiled
        self.matchers: list[Any] = []
        self.bitmask: Optional[torch.Tensor] = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self.matchers:
            self.matchers = [self.compiled.matcher() for _ in range(input_ids.shape[0])]
            self.bitmask = allocate_bitmask(len(self.matchers), self.compiled.vocab_size)
        else:
            for j, last in enumerate(input_ids[:, -1].tolist()):
                matcher = self.matchers[j]
                # A stopped matcher allows only a stop token, so the token it takes now ends the row.
                if matcher is not None and (matcher.is_stopped() or not matcher.consume_token(last)):
                    self.matchers[j] = None
        fill_bitmask(self.bitmask, self.matchers)
        apply_bitmask(scores, self.bitmask)
        return scores
