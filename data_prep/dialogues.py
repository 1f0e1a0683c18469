"""The typed `Dialogue` record every part of the toolkit passes around.

Loaders for the three EmpatheticDialogues forms (original CSVs, a `datasets` copy, the TRACE-prepared
CSV) live in ``data_prep.loaders`` and all produce this record.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

Speaker = Literal["seeker", "responder"]


class Turn(BaseModel):
    speaker: Speaker
    text: str


class Dialogue(BaseModel):
    """One example: the conversation so far (ending on a seeker turn) and the gold listener reply."""

    id: str = Field(description="unique per example, e.g. 'hit:0_conv:1#1'")
    conv_id: str = Field(description="the conversation it came from; splits never separate one conv_id")
    turns: list[Turn]
    situation: str = Field(description="ED's situation prompt given to the seeker")
    emotion: str = Field(description="gold Ekman emotion (data_prep.taxonomy.EKMAN)")
    emotion_fine: Optional[str] = Field(default=None, description="gold ED fine label, when the source has it")
    gold_response: Optional[str] = None
    labels: dict[str, str] = Field(
        default_factory=dict, description="gold labels beyond the emotion, by name (ESD's strategy: labels.strategy)"
    )

    def render_context(self, last: Optional[int] = None) -> str:
        """The dialogue as 'seeker: …' / 'responder: …' lines, the form every prompt shows; `last`: only its
        last turns (a declared role's truncation; None: all)."""
        turns = self.turns[-last:] if last else self.turns
        return "\n".join(f"{t.speaker}: {t.text}" for t in turns)

    def seeker_text(self) -> str:
        return "\n".join(t.text for t in self.turns if t.speaker == "seeker")

    def last_seeker_turn(self) -> str:
        """The seeker's last turn, the one the reply answers ("" in a dialogue without one)."""
        return next((t.text for t in reversed(self.turns) if t.speaker == "seeker"), "")
