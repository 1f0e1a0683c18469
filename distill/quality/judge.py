"""`reply_judge`, the optional check: a language model asked "is this a reply to the seeker?".

Off by default: it needs a model that can judge, and a 135M one cannot. Any backend answers it (an
OpenAI-compatible server such as vLLM, Ollama or llama.cpp, an API, or the local backend): `distill inspect RUN
--judge CONFIG` takes the `backend:` of a config such as configs/teacher/ollama-qwen.yaml, and
`benchmarks/quality_recall.py --judge CONFIG` puts its recall and false-positive rate beside the rules'. The
verdict is a one-field JSON schema, so a backend with constrained decoding always answers in it; a verdict that
does not parse is no verdict, and the reply passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal, Optional

from pydantic import BaseModel, ValidationError

from data_prep.dialogues import Dialogue
from distill.backends.base import Backend, GenerationRequest

QUESTION = (
    "Is the candidate a reply that the listener says to the seeker, in the listener's own words, about this "
    "conversation? Answer no when it talks about the conversation, the seeker or 'the response' in the third "
    "person, describes its writer as an agent, model or role, repeats instructions, is a template, label or "
    "fragment, or is about something other than this conversation."
)


_CUT_VERDICT = re.compile(r'\{\s*"reply_to_seeker"\s*:\s*"(yes|no)"\s*,')


class ReplyVerdict(BaseModel):
    """The judge's answer: is the candidate a reply to the seeker."""

    reply_to_seeker: Literal["yes", "no"]


def judge_messages(dialogue: Dialogue, reply: str) -> list[dict[str, str]]:
    system = "You check candidate listener turns for an emotional-support conversation."
    user = (
        f"Conversation:\n{dialogue.render_context()}\n\nCandidate next listener turn: {reply}\n\n{QUESTION}\n\n"
        'Answer with one JSON object with the key "reply_to_seeker" ("yes" or "no") and nothing else.'
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_verdict(text: str) -> Optional[bool]:
    """True (a reply to the seeker), False (not one), or None when the text holds no verdict."""
    try:
        data = ReplyVerdict.model_validate_json(text.strip())
    except (ValidationError, ValueError):
        try:  # prose around the object, from a backend without constrained decoding
            start, end = text.index("{"), text.rindex("}") + 1
            data = ReplyVerdict.model_validate(json.loads(text[start:end]))
        except (ValueError, ValidationError):
            # an object cut off by the token cap after its verdict (a server held to JSON, not to the schema, may go
            # on with another key): the verdict was written whole
            cut = _CUT_VERDICT.match(text.strip())
            return None if cut is None else cut[1] == "yes"
    return data.reply_to_seeker == "yes"


def judge_replies(
    backend: Backend, dialogues: Sequence[Dialogue], replies: Sequence[str], max_new_tokens: int = 16
) -> list[Optional[bool]]:
    """One verdict per reply (None: no parseable verdict), asked in one batch; an empty reply is not asked."""
    if len(dialogues) != len(replies):
        raise ValueError(f"judge_replies: {len(replies)} replies for {len(dialogues)} dialogues")
    asked = [i for i, reply in enumerate(replies) if reply and reply.strip()]
    requests = [
        GenerationRequest(
            messages=judge_messages(dialogues[i], replies[i]),
            schema=ReplyVerdict,
            temperature=0.0,
            max_new_tokens=max_new_tokens,
        )
        for i in asked
    ]
    results = backend.generate(requests) if requests else []
    verdicts: list[Optional[bool]] = [None] * len(replies)
    for i, result in zip(asked, results):
        verdicts[i] = None if result.error else parse_verdict(result.text)
    return verdicts


def judge_reason(verdict: Optional[bool]) -> Optional[str]:
    """The finding's reason for a verdict: only a "no" fails."""
    return "the judge model answered that this is not a reply to the seeker" if verdict is False else None


def judge_backend(config: str) -> Backend:
    """The judge model: the backend of a config file (`backend: {type: ...}`, read as `distill generate` reads it);
    a bad file or backend is a one-line ValueError naming it."""
    from distill.backends import make_backend
    from distill.pipeline.cli_generate import load_config

    return make_backend(load_config(config)["backend"])
