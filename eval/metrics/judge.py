"""Pairwise LLM-as-judge (TRACE's human/GPT evaluation aspects) with position-bias cancelling.

Any `Backend` judges: GPT-4o in production, the embedded model in tests. The verdict is a pydantic
schema (one of ``A | B | tie`` per aspect), so backends with constrained decoding always return
parseable JSON.

Order rule: each pair is judged twice, once with the system's reply as A and once as B. A system
wins (or loses) an aspect only when BOTH orders prefer the same reply; a disagreement between the
orders, a tie in either order, or an unparseable verdict counts as a tie. Unparseable verdicts are
also counted under ``invalid`` so a weak judge is visible. W/L are then tested with a two-sided
sign test (ties excluded).

Two identical replies are a tie without asking: both orders would show the judge the same prompt, so
no verdict could prefer one reply in both. Such pairs are counted under ``identical``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal, Optional

from pydantic import BaseModel, ValidationError, create_model

from data_prep.dialogues import Dialogue
from distill.backends.base import Backend, GenerationRequest
from eval.metrics.stats import sign_test

ASPECTS: dict[str, str] = {
    "empathy": "Which reply better understands and responds to the seeker's feelings?",
    "informativity": "Which reply is more specific to the seeker's situation and says more that is relevant?",
    "fluency": "Which reply is more natural, grammatical and easy to read?",
    "consistency": "Which reply fits the dialogue better, without contradicting it or changing the topic?",
}
Choice = Literal["A", "B", "tie"]


def verdict_schema(aspects: Sequence[str]) -> type[BaseModel]:
    """A pydantic model with one ``A | B | tie`` field per aspect, in the given order."""
    unknown = [a for a in aspects if a not in ASPECTS]
    if unknown:
        raise ValueError(f"unknown judge aspect '{unknown[0]}' (known: {', '.join(ASPECTS)})")
    return create_model("Verdict", **{a: (Choice, ...) for a in aspects})


def judge_messages(dialogue: Dialogue, reply_a: str, reply_b: str, aspects: Sequence[str]) -> list[dict[str, str]]:
    questions = "\n".join(f"- {a}: {ASPECTS[a]}" for a in aspects)
    system = (
        "You compare two candidate listener replies in an emotional-support conversation. For each "
        "aspect answer A, B or tie. Judge only the replies' quality; ignore which one comes first."
    )
    user = (
        f"Dialogue:\n{dialogue.render_context()}\n\nReply A: {reply_a}\n\nReply B: {reply_b}\n\n"
        f"Aspects:\n{questions}\n\nAnswer with one JSON object with the keys "
        + ", ".join(f'"{a}"' for a in aspects)
        + " and nothing else."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_verdict(text: str, schema: type[BaseModel]) -> Optional[dict[str, str]]:
    """The verdict as {aspect: A|B|tie}, or None when the text is not a valid verdict."""
    try:
        return schema.model_validate_json(text.strip()).model_dump()
    except (ValidationError, ValueError):
        try:  # tolerate prose around the object from unconstrained backends
            start, end = text.index("{"), text.rindex("}") + 1
            return schema.model_validate(json.loads(text[start:end])).model_dump()
        except (ValueError, ValidationError):
            return None


def combine_orders(first: Optional[str], second: Optional[str]) -> str:
    """Outcome for the system from two verdicts: ``first`` with the system as A, ``second`` as B.

    Returns "win" / "lose" only when both orders prefer the same reply, else "tie".
    """
    if first == "A" and second == "B":
        return "win"
    if first == "B" and second == "A":
        return "lose"
    return "tie"


def judge_pairs(
    backend: Backend,
    dialogues: Sequence[Dialogue],
    system_replies: Sequence[str],
    other_replies: Sequence[str],
    aspects: Sequence[str] = tuple(ASPECTS),
    max_new_tokens: int = 48,
) -> dict:
    """Judge ``system_replies`` against ``other_replies`` dialogue by dialogue, in both orders.

    Returns per aspect ``{win, lose, tie, invalid, identical, n, p_value}`` from the system's point of view,
    plus the raw per-dialogue outcomes.
    """
    if not (len(dialogues) == len(system_replies) == len(other_replies)):
        raise ValueError("judge_pairs: dialogues, system and other replies must have the same length")
    schema = verdict_schema(aspects)
    pairs = [(d, mine or "", other or "") for d, mine, other in zip(dialogues, system_replies, other_replies)]
    asked = [i for i, (_, mine, other) in enumerate(pairs) if mine != other]
    requests = [
        GenerationRequest(
            messages=judge_messages(pairs[i][0], a, b, aspects),
            schema=schema,
            temperature=0.0,
            max_new_tokens=max_new_tokens,
        )
        for i in asked
        for a, b in ((pairs[i][1], pairs[i][2]), (pairs[i][2], pairs[i][1]))
    ]
    results = backend.generate(requests) if requests else []
    verdicts = {i: [parse_verdict(r.text, schema) for r in results[2 * k : 2 * k + 2]] for k, i in enumerate(asked)}
    per_aspect = {a: {"win": 0, "lose": 0, "tie": 0, "invalid": 0, "identical": 0} for a in aspects}
    outcomes = []
    for i, (d, _, _) in enumerate(pairs):
        first, second = verdicts.get(i, (None, None))
        row = {a: combine_orders(first and first[a], second and second[a]) for a in aspects}
        for a in aspects:
            per_aspect[a][row[a]] += 1
            if i in verdicts:
                per_aspect[a]["invalid"] += (first is None) + (second is None)
            else:
                per_aspect[a]["identical"] += 1
        outcomes.append({"dialogue_id": d.id, **row})
    for counts in per_aspect.values():
        counts["n"] = len(dialogues)
        counts["p_value"] = sign_test(counts["win"], counts["lose"])
    return {
        "aspects": per_aspect,
        "outcomes": outcomes,
        "judge": backend.describe(),
        "rule": "win/lose only if both presentation orders agree; otherwise tie (identical replies: a tie, not asked); "
        "sign test excludes ties",
    }
