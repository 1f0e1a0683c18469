"""Ending a looping answer while it is decoded (`GenerationRequest.stop_loops`).

A small model often falls into a loop ("anxiety_disorder_category_1234567890...", one phrase over and
over) and decodes it to the token cap, where the quality gates reject it anyway. `LoopWatch` reads the
answer so far with the same rule as the `loop` check (distill.quality.checks.loop_so_far: only the parts
of it that more text cannot undo), so an answer it stops would have failed that check in full, and an
answer it lets through decodes exactly as before.

A constrained answer is JSON: the check reads each string in it, as the quality audit reads each field,
so "sad", "sad" in a list of triggers is not a word repeated in a row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Optional

from distill.quality.checks import loop_so_far
from distill.quality.thresholds import QualityThresholds

# A JSON string literal, closed or still being written (then it runs to the end of the text).
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)("?)')


def json_strings(text: str) -> list[str]:
    """Every string in a JSON text that may be cut anywhere; keys included (they are a word or two)."""
    found = []
    for match in _STRING.finditer(text):
        body = match.group(1)
        if not match.group(2):
            body = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", body)  # an escape cut in half
        try:
            found.append(json.loads(f'"{body}"'))
        except json.JSONDecodeError:
            found.append(body)
    return found


class LoopWatch:
    """`Limits.give_up` for the continuous decoder: the reason the answer so far loops, or None."""

    def __init__(self, tokenizer: Any, constrained: bool, thresholds: Optional[QualityThresholds] = None):
        self.tokenizer, self.constrained = tokenizer, constrained
        self.thresholds = thresholds or QualityThresholds()

    def __call__(self, tokens: Sequence[int]) -> Optional[str]:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        for piece in json_strings(text) if self.constrained else [text]:
            if why := loop_so_far(piece, self.thresholds):
                return f"loop: {why}"
        return None
