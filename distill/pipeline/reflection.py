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


def trigger_warnings(out: BaseModel, dialogue: Dialogue) -> list[str]:
    """CAE trigger spans that are not verbatim (case- and space-insensitive) in the seeker's turns.

    Recorded as warnings, not rejections: teachers and small students often quote with a changed
    word or punctuation, the GRA already audits whether the cause is grounded, and rejecting would
    spend retries and drop whole dialogues over a soft quality signal. Dataset builders can filter
    on the warning (event text starts with 'warning: cae trigger').
    """
    if not isinstance(out, CAEOutput):
        return []
    seeker = _squash(dialogue.seeker_text())
    return [
        f"warning: cae trigger {span!r} is not a verbatim span of the seeker's turns"
        for span in out.triggers
        if _squash(span) not in seeker
    ]


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
