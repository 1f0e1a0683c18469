"""Exemplar retrieval for TRACE's planner and synthesizer (contract; implementation in progress)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Exemplar(BaseModel):
    """One retrieved example: a past situation, its emotion and the human listener's reply."""

    dialogue_id: str
    conv_id: str
    emotion: str
    situation: str
    response: str
    score: float
    search: Literal["precise", "fuzzy"]
