"""Every label set the toolkit uses, in one place.

Prompts, schemas, datasets and metrics all import from here, so a label can never be spelled two
ways. The Ekman order below is the order of the TRACE-prepared CSV's ``emotion_id`` column.
"""

from __future__ import annotations

from typing import Literal

EKMAN: tuple[str, ...] = ("anger", "fear", "disgust", "happiness", "sadness", "surprise")
Ekman = Literal["anger", "fear", "disgust", "happiness", "sadness", "surprise"]

# All 32 EmpatheticDialogues emotions → Ekman's six, exactly as TRACE maps them
# (sunbus100/TRACE, Agent1.py `get_emotion_definitions`); TRACE's gold `emotion_id` labels follow this
# map. The less obvious entries are TRACE's: anticipating → surprise, impressed and sentimental →
# happiness. TRACE's map has no `prepared`, so its pipeline cannot label such a conversation; we map it
# to happiness, beside its nearest neighbours in TRACE's map (confident, hopeful), so that data loaded
# from the original ED release keeps every conversation.
ED_TO_EKMAN: dict[str, str] = {
    "joyful": "happiness", "excited": "happiness", "proud": "happiness", "grateful": "happiness",
    "content": "happiness", "impressed": "happiness", "caring": "happiness", "trusting": "happiness",
    "faithful": "happiness", "hopeful": "happiness", "confident": "happiness", "sentimental": "happiness",
    "sad": "sadness", "lonely": "sadness", "disappointed": "sadness", "devastated": "sadness",
    "nostalgic": "sadness", "guilty": "sadness", "ashamed": "sadness", "embarrassed": "sadness",
    "angry": "anger", "furious": "anger", "annoyed": "anger", "jealous": "anger",
    "afraid": "fear", "terrified": "fear", "anxious": "fear", "apprehensive": "fear",
    "disgusted": "disgust",
    "surprised": "surprise", "anticipating": "surprise",
    "prepared": "happiness",  # not in TRACE's map: see above
}  # fmt: skip
NOT_IN_TRACE_MAP: tuple[str, ...] = ("prepared",)
ED_EMOTIONS: tuple[str, ...] = tuple(sorted(ED_TO_EKMAN))

# What each class covers, in TRACE's terms: the ED labels it groups (derived from the map above, so the
# prompt's boundaries can never disagree with the gold labels).
EKMAN_DEFINITIONS: dict[str, str] = {
    e: "covers the finer emotions " + ", ".join(f for f, m in ED_TO_EKMAN.items() if m == e) for e in EKMAN
}

# TRACE's six antecedent-event categories for the global cause (Agent2.py `cause_taxonomy`), spelled as
# TRACE spells them so outputs compare with its own. The definitions are ours.
CAUSE_CATEGORIES: tuple[str, ...] = (
    "Social Connection & Affection",
    "Conflict & Injustice",
    "Loss & Failure",
    "Achievement & Success",
    "Threat & Potential Danger",
    "Unexpectedness & Novelty",
)
CauseCategory = Literal[CAUSE_CATEGORIES]  # the same six: a Literal over a tuple of strings
CAUSE_DEFINITIONS: dict[str, str] = {
    "Social Connection & Affection": "closeness with others: being cared for, missing or reuniting with someone, "
    "love, friendship, family warmth",
    "Conflict & Injustice": "being wronged or blocked by someone: unfair treatment, rudeness, betrayal, "
    "broken rules or promises",
    "Loss & Failure": "something valued is gone or a goal was missed: death, break-up, rejection, a lost "
    "possession, a failed attempt",
    "Achievement & Success": "a goal reached or progress made: a win, a promotion, a good result, a "
    "milestone, something earned",
    "Threat & Potential Danger": "possible harm ahead: risk to health, safety, money or status, an "
    "uncertain outcome to come",
    "Unexpectedness & Novelty": "something sudden, new or out of the ordinary: a surprise, a first "
    "experience, an unforeseen turn",
}

# Sharma et al. (2020) EPITOME communication mechanisms, as used by TRACE's planner.
STRATEGIES: tuple[str, ...] = ("ER", "IP", "EX")
Strategy = Literal["ER", "IP", "EX"]
STRATEGY_DEFINITIONS: dict[str, str] = {
    "ER": "Emotional Reaction: express the feelings reading the seeker's situation stirs in you (warmth, "
    "compassion, concern), ideally naming them, to build rapport.",
    "IP": "Interpretation: show you understand the feelings and experience you infer from the seeker's "
    "situation, by naming the inferred feeling or by relating a similar experience of your own.",
    "EX": "Exploration: ask a specific, gentle question about feelings or experiences the seeker has not "
    "said outright, to understand them better.",
}

# The pragmatic plan after MERG: four dimensions; the values each may take are this project's own.
PLAN_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "goal": ("comfort", "validate", "encourage", "celebrate", "explore", "inform"),
    "stance": ("supportive", "curious", "reassuring", "enthusiastic", "reflective"),
    "tactic": ("acknowledge_feeling", "reflect_content", "ask_question", "share_perspective", "offer_hope"),
    "tone": ("warm", "gentle", "upbeat", "calm", "serious"),
}

# EmoStage counselling phases (ESConv's three stages of Hill's helping model).
PHASES: tuple[str, ...] = ("exploration", "comforting", "action")
Phase = Literal["exploration", "comforting", "action"]
PHASE_DEFINITIONS: dict[str, str] = {
    "exploration": "the problem is still being described; help the seeker open up",
    "comforting": "the feeling is clear; show empathy and understanding",
    "action": "the seeker is ready to cope; help them think about next steps",
}


def to_ekman(label: str) -> str:
    """Map an ED fine label, an Ekman label (any case) or an Ekman id to Ekman; ValueError on anything else.

    Ids are TRACE's (dataset/emotion_to_id_ekman.json, the `emotion_id` column of its CSVs): 0 anger,
    1 fear, 2 disgust, 3 happiness, 4 sadness, 5 surprise, which is the order of `EKMAN`. TRACE's agents
    write -1/-2 for a failed prediction; those, like any other id, are unknown labels here.
    """
    key = str(label).strip().lower()
    if key in EKMAN:
        return key
    if key in ED_TO_EKMAN:
        return ED_TO_EKMAN[key]
    if key.isdigit() and int(key) < len(EKMAN):
        return EKMAN[int(key)]
    raise ValueError(
        f"unknown emotion label '{label}' (expected one of the 32 ED emotions, {', '.join(EKMAN)}, "
        f"or an id 0-{len(EKMAN) - 1})"
    )
