"""off_dialogue, the run-level check that a reply is about its own dialogue.

A reply's relevance is the MiniLM cosine with its dialogue's last seeker turns (the embedder of the exemplar index
and of eval's relevance metric, `data_prep.retrieval.shared_embedder`). Low relevance alone says little: a short
stock reply ("Congratulations!") is near nothing. So each reply is also read against the seeker turns of other
dialogues of the same run, chosen by a fixed-seed shuffle, and fails when it is about one of them and not about its
own: its relevance to its own dialogue is under `off_dialogue_own` while to another it is `off_dialogue_other` or
more. A reply written for another seeker (a retrieved case's reply copied into an unrelated dialogue, a story
about a coworker's lunch for a seeker whose daughter drank spoiled milk) is near dialogues like that one.

A run of fewer than `off_dialogue_min_dialogues` dialogues is not read: the shuffled ones are too few to say what
"unrelated" looks like (and no model is loaded for it).

One rule needs no model and reads every reply: condolences ("sorry for your loss") to a seeker whose dialogue tells
of no death, loss or illness: a reply to some other trouble.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Optional

import numpy as np

from data_prep.dialogues import Dialogue
from distill.quality.thresholds import QualityThresholds

RELEVANCE_MODEL = "minilm"
_SEED = 0
# The seeker's last few turns: what the reply answers. A long support dialogue (ESD-CoT's run to 20+ turns)
# would otherwise dilute the embedding with turns the reply no longer speaks to.
_SEEKER_TURNS = 3


_CONDOLENCE = re.compile(
    r"\bsorry (?:for|about) (?:your|the|their|his|her) (?:\w+ )?loss\b|\bcondolences?\b|\brest in peace\b", re.I
)
# What a dialogue says when condolences fit it; wide on purpose ("lost", "gone", "sick"): a miss costs less here
_LOSS = re.compile(
    r"\b(?:die[sd]?|dying|dead|death|pass(?:ed|ing)? (?:away|on)|passing|funeral|lost|lose|losing|loss|killed|buried"
    r"|grave|put down|put to sleep|euthani[sz]\w*|gone|memorial|widow\w*|cancer|murder\w*|suicide|miscarr\w*|sick"
    r"|ill|illness|hospital\w*|rip)\b",
    re.I,
)


def unfounded_condolence(reply: str, dialogue: Dialogue) -> Optional[str]:
    """Condolences for a loss the dialogue (its turns and situation) never mentions."""
    if (m := _CONDOLENCE.search(reply)) is None:
        return None
    if _LOSS.search(" ".join([dialogue.situation, *(turn.text for turn in dialogue.turns)])):
        return None
    return f"condolences for a loss its dialogue does not tell of: {m.group(0)!r}"


def seeker_context(dialogue: Dialogue) -> str:
    """The text a reply is compared with: the seeker's last turns, joined."""
    turns = [turn.text for turn in dialogue.turns if turn.speaker == "seeker"]
    return " ".join(turns[-_SEEKER_TURNS:])


def off_dialogue(
    replies: Sequence[Optional[str]], dialogues: Sequence[Dialogue], t: QualityThresholds
) -> list[Optional[str]]:
    """One reason (or None) per reply: its relevance to its own dialogue against `off_dialogue_shuffles` other
    dialogues of the run (never one of its own conversation). An empty reply, or one whose dialogue has no
    seeker turn, is not read."""
    if len(replies) != len(dialogues):
        raise ValueError(f"off_dialogue: {len(replies)} replies for {len(dialogues)} dialogues")
    condolences = [unfounded_condolence(r, d) if r else None for r, d in zip(replies, dialogues)]
    read = [i for i, (r, d) in enumerate(zip(replies, dialogues)) if r and r.strip() and seeker_context(d)]
    if len({dialogues[i].conv_id for i in read}) < t.off_dialogue_min_dialogues:
        return condolences
    cosines = _cosines([replies[i] for i in read], [seeker_context(dialogues[i]) for i in read])
    conv = [dialogues[i].conv_id for i in read]
    reasons: list[Optional[str]] = list(condolences)
    rng = random.Random(_SEED)
    for row, i in enumerate(read):
        others = [col for col in range(len(read)) if conv[col] != conv[row]]
        others = rng.sample(others, min(t.off_dialogue_shuffles, len(others)))
        reasons[i] = reasons[i] or _verdict(float(cosines[row, row]), cosines[row, others], t)
    return reasons


def _verdict(own: float, others: np.ndarray, t: QualityThresholds) -> Optional[str]:
    nearest = float(others.max())
    if own < t.off_dialogue_own and nearest >= t.off_dialogue_other:
        return (
            f"about another dialogue: relevance {own:.2f} to its own seeker, {nearest:.2f} to another of the "
            f"{len(others)} read"
        )
    return None


def _cosines(replies: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
    """cosines[i, j]: reply i against context j (unit embeddings, so a dot product)."""
    from data_prep.retrieval import shared_embedder

    embedder = shared_embedder(RELEVANCE_MODEL)
    return embedder.encode(list(replies), progress=False) @ embedder.encode(list(contexts), progress=False).T
