"""Every label set the toolkit uses, in one place.

Prompts, schemas, datasets and metrics all import from here, so a label can never be spelled two
ways. The Ekman order below is the order of the TRACE-prepared CSV's ``emotion_id`` column.
"""

from __future__ import annotations

from typing import Literal

EKMAN: tuple[str, ...] = ("anger", "fear", "disgust", "happiness", "sadness", "surprise")
Ekman = Literal["anger", "fear", "disgust", "happiness", "sadness", "surprise"]

# All 32 EmpatheticDialogues emotions → Ekman's six. ED has no official mapping; this one groups
# each label by valence and arousal with the Ekman family it is a variant of. `prepared` (a calm,
# positive readiness) is the label most often forgotten.
ED_TO_EKMAN: dict[str, str] = {
    "angry": "anger",
    "annoyed": "anger",
    "furious": "anger",
    "jealous": "anger",
    "afraid": "fear",
    "anxious": "fear",
    "apprehensive": "fear",
    "terrified": "fear",
    "disgusted": "disgust",
    "anticipating": "happiness",
    "caring": "happiness",
    "confident": "happiness",
    "content": "happiness",
    "excited": "happiness",
    "faithful": "happiness",
    "grateful": "happiness",
    "hopeful": "happiness",
    "joyful": "happiness",
    "prepared": "happiness",
    "proud": "happiness",
    "trusting": "happiness",
    "ashamed": "sadness",
    "devastated": "sadness",
    "disappointed": "sadness",
    "embarrassed": "sadness",
    "guilty": "sadness",
    "lonely": "sadness",
    "nostalgic": "sadness",
    "sad": "sadness",
    "sentimental": "sadness",
    "impressed": "surprise",
    "surprised": "surprise",
}
ED_EMOTIONS: tuple[str, ...] = tuple(sorted(ED_TO_EKMAN))

EKMAN_DEFINITIONS: dict[str, str] = {
    "anger": "the seeker feels wronged, blocked or treated unfairly (angry, annoyed, furious, jealous)",
    "fear": "the seeker expects harm or an uncertain bad outcome (afraid, anxious, apprehensive, terrified)",
    "disgust": "the seeker is repelled by something offensive, unclean or morally wrong",
    "happiness": "the seeker feels good about something that happened or will happen (joy, pride, gratitude, hope)",
    "sadness": "the seeker feels loss, disappointment, loneliness, guilt or shame",
    "surprise": "the seeker did not expect what happened, pleasantly or not (surprised, impressed)",
}

CAUSE_CATEGORIES: tuple[str, ...] = (
    "relationships",
    "work_or_school",
    "health",
    "loss",
    "achievement",
    "daily_events",
)
CauseCategory = Literal["relationships", "work_or_school", "health", "loss", "achievement", "daily_events"]
CAUSE_DEFINITIONS: dict[str, str] = {
    "relationships": "family, partners, friends, neighbours or other people's behaviour",
    "work_or_school": "jobs, colleagues, exams, studies, money earned or lost at work",
    "health": "illness, injury, medical news, the body or mental health",
    "loss": "death, break-up, losing a pet, a possession or an opportunity",
    "achievement": "success or failure at a goal, a competition, a purchase or a milestone",
    "daily_events": "everyday happenings: travel, weather, pets, home, hobbies, strangers",
}

# Sharma et al. (2020) EPITOME communication mechanisms, as used by TRACE's planner.
STRATEGIES: tuple[str, ...] = ("ER", "IP", "EX")
Strategy = Literal["ER", "IP", "EX"]
STRATEGY_DEFINITIONS: dict[str, str] = {
    "ER": "Emotional Reaction: express warmth, compassion or concern about what the seeker feels.",
    "IP": "Interpretation: show you understand the seeker's feelings and experience by restating or relating to them.",
    "EX": (
        "Exploration: ask a gentle question that invites the seeker to say more about what they feel or went through."
    ),
}

# MERG pragmatic plan: the four dimensions and the values each may take.
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
    """Map an ED fine label or an Ekman label (any case) to Ekman; raise ValueError on anything else."""
    key = label.strip().lower()
    if key in EKMAN:
        return key
    if key in ED_TO_EKMAN:
        return ED_TO_EKMAN[key]
    raise ValueError(f"unknown emotion label '{label}' (expected one of the 32 ED emotions or {', '.join(EKMAN)})")
