"""Parsing role outputs and the MERG reflection rules: what counts as a valid answer, where a
refinement restarts, and which iteration becomes the final answer.

Kept apart from the runner (distill.pipeline.pipeline) so the rules read in one sitting and are testable
without a model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Optional

from pydantic import BaseModel, ValidationError

from data_prep.dialogues import Dialogue
from distill.roles.roles import PromptStyle, RoleSpec
from distill.roles.schemas import CAEOutput, GRAOutput

FinalSelection = Literal["best", "last"]
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)\s*```", re.DOTALL)


class OutputRejected(ValueError):
    """An answer that does not validate; the message is the one-line reason kept in the trace."""


def _json_candidate(text: str) -> str:
    """The JSON part of a model answer: inside a code fence if there is one, else from the first '{'."""
    fenced = _FENCE.search(text)
    if fenced:
        return fenced.group(1)
    start = text.find("{")
    return text[start:] if start >= 0 else text


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "output"
    if err.get("type", "").startswith("json"):
        # pydantic reports a cut-off answer as 'EOF while parsing': almost always max_new_tokens.
        reason = "truncated JSON" if "EOF" in err.get("msg", "") else "not JSON"
        return f"{reason} ({err.get('msg', '')})"
    return f"field '{where}': {err.get('msg', 'invalid')}"


def parse_output(spec: RoleSpec, text: str, stages: Sequence[str], style: PromptStyle = "teacher") -> BaseModel:
    """Validate one raw answer against the role's schema for `style` and the run's enabled `stages`.

    Returns the role's full schema (a student's decision-only answer is lifted into it); raises
    OutputRejected.
    """
    schema = spec.schema_for(style, stages)
    candidate = _json_candidate(text.strip())
    if not candidate.strip():
        raise OutputRejected("empty output")
    try:
        parsed = schema.model_validate_json(candidate)
    except ValidationError as exc:
        # A chatty model may add text after the object; retry on the outermost {...} before giving up.
        end = candidate.rfind("}")
        try:
            parsed = schema.model_validate_json(candidate[: end + 1]) if end > 0 else None
        except ValidationError:
            parsed = None
        if parsed is None:
            raise OutputRejected(_first_error(exc)) from None
    return spec.from_student(parsed)


# A trigger counts as quoted when this share of its words sits in word pairs of the seeker's turns:
# teachers and small students quote with a dropped apostrophe or one changed word, not with new sentences.
TRIGGER_MIN_MATCH = 0.8


def trigger_warnings(out: BaseModel, dialogue: Dialogue, min_match: float = TRIGGER_MIN_MATCH) -> list[str]:
    """One warning per CAE trigger span that is not a span of the seeker's turns (`ungrounded_triggers`).

    Recorded as warnings, not rejections: the GRA already audits whether the cause is grounded, and
    rejecting would spend retries and drop whole dialogues over a soft quality signal. The
    `ungrounded_trigger` quality check (distill.quality) reads the same rule, and `distill datasets`
    filters on it.
    """
    if not isinstance(out, CAEOutput):
        return []
    return [
        f"warning: cae trigger {span!r} is not a span of the seeker's turns"
        for span in ungrounded_triggers(out.triggers, dialogue, min_match)
    ]


def ungrounded_triggers(triggers: Sequence[str], dialogue: Dialogue, min_match: float = TRIGGER_MIN_MATCH) -> list[str]:
    """The trigger spans whose `span_match` with the seeker's turns is under `min_match`."""
    text = dialogue.seeker_text()
    return [span for span in triggers if span_match(span, text) < min_match]


def span_match(span: str, text: str) -> float:
    """Share of the span's words that sit in a word pair the text also has (a one-word span: in the text).

    Normalised (lower case; punctuation, apostrophes and spacing ignored) and fuzzy: a changed word costs
    the two pairs around it, while a made-up span shares almost no pairs with the seeker's words. A span
    without words (an emoticon, "...") can only be matched verbatim: 1.0 or 0.0.
    """
    span_words, text_words = _span_words(span), _span_words(text)
    if not span_words:
        return float(bool(_squash(span)) and _squash(span) in _squash(text))
    if len(span_words) == 1:
        return float(span_words[0] in text_words)
    pairs = set(zip(text_words, text_words[1:]))
    covered = [False] * len(span_words)
    for i, pair in enumerate(zip(span_words, span_words[1:])):
        if pair in pairs:
            covered[i] = covered[i + 1] = True
    return sum(covered) / len(span_words)


def _span_words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower().replace("'", "").replace("\u2019", ""))


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


# --- reflection: where to restart, which iteration wins --------------------------------------------


def stage_passes(audit: Optional[GRAOutput], stages: Sequence[str]) -> tuple[bool, ...]:
    """Passed flags in stage order. A stage the GRA did not mention passes, unless it is the named
    earliest failure; an iteration without a valid audit passes nothing (it cannot beat an audited one)."""
    if audit is None:
        return tuple(False for _ in stages)
    verdict = {c.stage: c.passed for c in audit.checks}
    return tuple(verdict.get(s, True) and s != audit.earliest_failure for s in stages)


def restart_stage(audit: GRAOutput, stages: Sequence[str]) -> Optional[str]:
    """The earliest stage the audit faults: its `earliest_failure` or the first failed check, whichever comes first."""
    passes = stage_passes(audit, stages)
    return next((s for s, ok in zip(stages, passes) if not ok), None)


def choose_final(
    candidates: dict[int, Optional[GRAOutput]], stages: Sequence[str], selection: FinalSelection = "best"
) -> int:
    """The iteration whose answer becomes the trace's outputs.

    ``candidates`` maps each complete iteration (every stage valid) to its audit, or None when the GRA
    produced no valid audit for it. ``best`` compares the tuples of passed flags in stage order
    lexicographically (passing an earlier stage beats passing any number of later ones), so a later
    iteration wins only when it is strictly better, and a tie goes to the earliest iteration: the
    iteration number breaks ties and nothing else. ``last`` takes the last complete iteration, the
    no-selection variant the issue describes MERG comparing against.
    """
    if not candidates:
        raise ValueError("choose_final needs at least one complete iteration")
    if selection == "last":
        return max(candidates)
    return max(sorted(candidates), key=lambda it: (stage_passes(candidates[it], stages), -it))
