"""Grammar-constrained JSON decoding for in-process transformers models, built on xgrammar.

Each role schema is compiled once per tokenizer into an xgrammar grammar; every `generate` call
then gets a fresh logits processor, because the processor keeps one matcher per batch row and
cannot be reused. xgrammar 0.2.8 enforces every constraint our schemas use (checked by the tests):
`maxLength` on strings, `minItems`/`maxItems` on lists, `Literal` enums, nullable fields
(`anyOf` with null), optional keys and `additionalProperties: false`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# Whitespace is fixed rather than free: a small model left free to emit whitespace can spend its
# whole token budget on newlines. The layout is pydantic's compact `model_dump_json()`, the form
# distill.sft_data writes SFT targets in, so a student decodes exactly what it was trained on
# (and compact JSON is ~20% fewer tokens than `json.dumps`' spaced default).
JSON_SEPARATORS = (",", ":")


class SchemaGrammars:
    """Compiled JSON grammars for one tokenizer, cached per pydantic schema class."""

    def __init__(self, tokenizer: Any, vocab_size: int):
        import xgrammar

        # vocab_size is the model's (the logits' width), which may exceed the tokenizer's own
        # size because of padding rows; the bitmask must cover every logit.
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgrammar.GrammarCompiler(info)
        self._compiled: dict[type[BaseModel], Any] = {}

    def compiled(self, schema: type[BaseModel]) -> Any:
        if schema not in self._compiled:
            self._compiled[schema] = self._compiler.compile_json_schema(
                schema.model_json_schema(),
                any_whitespace=False,
                separators=JSON_SEPARATORS,
            )
        return self._compiled[schema]

    def logits_processor(self, schema: type[BaseModel]) -> Any:
        """A new processor for exactly one `generate` call (it is stateful)."""
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor(self.compiled(schema))
