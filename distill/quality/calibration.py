"""How often each check fires on human text, where it never should: its false-positive rate.

Human dialogues (the shared ED file, or any loaded with data_prep) stand in for a teacher that writes like
people do. `benchmarks/quality_fp.py` prints the figures that docs/quality.md quotes, and a test holds every
rate to 1% or less.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any, Optional

from data_prep.dialogues import Dialogue
from distill.pipeline.reflection import ungrounded_triggers
from distill.quality.audit import check_replies
from distill.quality.checks import FUNCTION_WORDS, exemplar_copy, loop, parroted_rationale, words
from distill.quality.registry import REPLY_FORM_CHECKS
from distill.quality.thresholds import QualityThresholds
from distill.roles.duties import reply_role
from distill.roles.roles import ROLES
from distill.roles.teacher_prompts import ASI_TASK

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def human_false_positives(
    dialogues: Sequence[Dialogue], thresholds: Optional[QualityThresholds] = None
) -> dict[str, dict[str, Any]]:
    """check -> {"on": what human text it read, "texts": how many, "flagged": how many failed, "rate"}.

    - loop: every gold reply, seeker turn and situation;
    - echo, non_reply, near_duplicate: the gold replies, as a run (`check_replies`);
    - leaked_reference: each gold reply against its own dialogue's turns (`check_replies`);
    - meta_commentary, self_description, template_fragment: the gold replies; prompt_echo: each against the ers
      teacher prompt its dialogue renders; off_dialogue: the gold replies as one run (`check_replies`);
    - exemplar_copy: each gold reply against the situation and reply of the two other dialogues whose
      situations share the most words with its own (a lexical stand-in for the embedding retrieval);
    - ungrounded_trigger: each seeker sentence as a trigger (a check that the normalisation holds on real text);
    - parroted_rationale: each situation as the asi reasoning, with the asi instructions. Its copy rule is not
      measured: ED's seekers often paste their situation into their first turn, so no human rationale here
      is independent of the dialogue.
    """
    t = thresholds or QualityThresholds()
    gold = [d.gold_response or "" for d in dialogues]
    seeker_turns = [turn.text for d in dialogues for turn in d.turns if turn.speaker == "seeker"]
    found: dict[str, tuple[str, int, int]] = {}
    texts = gold + seeker_turns + [d.situation for d in dialogues]
    found["loop"] = ("gold replies, seeker turns, situations", len(texts), _flagged(loop(x, t) for x in texts))
    replies = check_replies(gold, dialogues, t).counts()[reply_role(ROLES)]
    for check in ("echo", "non_reply", "near_duplicate", *REPLY_FORM_CHECKS):
        found[check] = (_ON.get(check, "gold replies"), len(gold), replies[check])
    found["leaked_reference"] = ("gold replies vs their own dialogues", len(gold), replies["leaked_reference"])
    neighbours = _lexical_neighbours([d.situation for d in dialogues], k=2)
    copies = (
        exemplar_copy(
            d.gold_response or "",
            [x for j in near for x in _exemplar(dialogues[j])],
            t,
            [dialogues[j].situation for j in near],
        )
        for d, near in zip(dialogues, neighbours)
    )
    found["exemplar_copy"] = ("gold replies vs two lexical neighbours", len(dialogues), _flagged(copies))
    spans = [(s, d) for d in dialogues for turn in d.turns if turn.speaker == "seeker" for s in _sentences(turn.text)]
    grounded = (ungrounded_triggers([s], d, t.trigger_min_match) for s, d in spans)
    found["ungrounded_trigger"] = ("seeker sentences as triggers", len(spans), _flagged(grounded))
    rationales = (parroted_rationale(d.situation, ASI_TASK, [], t) for d in dialogues)
    found["parroted_rationale"] = ("situations as asi reasoning", len(dialogues), _flagged(rationales))
    return {
        check: {"on": on, "texts": n, "flagged": k, "rate": round(k / n, 4) if n else 0.0}
        for check, (on, n, k) in found.items()
    }


_ON = {
    "prompt_echo": "gold replies vs the ers teacher prompt",
    "off_dialogue": "gold replies vs other dialogues of the file",
}


def _flagged(reasons) -> int:
    return sum(1 for r in reasons if r)


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(text) if s.strip()]


def _exemplar(d: Dialogue) -> list[str]:
    return [d.situation, d.gold_response or ""]


def _lexical_neighbours(situations: Sequence[str], k: int) -> list[list[int]]:
    """For each situation, the k others sharing the most distinct content words (ties: the earlier one)."""
    bags = [set(words(s)) - FUNCTION_WORDS for s in situations]
    index: dict[str, list[int]] = defaultdict(list)
    for i, bag in enumerate(bags):
        for w in bag:
            index[w].append(i)
    out = []
    for i, bag in enumerate(bags):
        shared = Counter(j for w in bag for j in index[w] if j != i)
        out.append([j for j, _ in sorted(shared.items(), key=lambda item: (-item[1], item[0]))[:k]])
    return out
