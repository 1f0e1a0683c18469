"""What the teacher is told, role by role: the instructions, label definitions and the briefing on earlier agents.

The four TRACE roles are modelled on the agent specifications of TRACE's code (sunbus100/TRACE,
Agent1.py-Agent4.py), in our own words, with the differences docs/faithfulness.md's deviations table lists (cause
definitions added, the strategy examples dropped, reasoning capped at 240 characters and trigger spans at
120 by the schemas, `prepared` listed under happiness):

- each agent is told which earlier agents ran and what each of them produced (`BRIEFS`);
- ASI sees the dialogue and the six classes with the finer ED emotions each groups, and answers with its
  reasoning and the emotion;
- CAE is told that the emotion came from an expert who knew the classes are broad, and returns 1-2 trigger
  sentences of the seeker, a one-sentence global cause summary and one of six antecedent-event categories;
- SRP studies the retrieved cases' strategies for inspiration but decides for this case, returns the
  reasoning for its choice and one of ER/IP/EX, and does not write the reply;
- ERS emulates the tone and brevity of the retrieved human replies without copying them, opens with the
  chosen strategy and blends in a second one, and weaves in a concrete detail from the trigger sentences.

The MERG and EmoStage roles, the audit's per-stage checks and the plan's value lists are this project's
own wording of those papers' roles. The compact student prompts are
not here: the behaviour of a student lives in its adapter (`distill.roles.roles.render_student`).
"""

from __future__ import annotations

from data_prep.taxonomy import (
    CAUSE_DEFINITIONS,
    EKMAN,
    EKMAN_DEFINITIONS,
    PHASE_DEFINITIONS,
    PLAN_DIMENSIONS,
    STRATEGY_DEFINITIONS,
)


def _defs(d: dict[str, str]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in d.items())


# One sentence per agent, as later agents hear of it.
BRIEFS: dict[str, str] = {
    "asi": "identified the seeker's dominant emotion, knowing that each of the six classes stands for several "
    "finer emotions (happiness covers pride and sentimentality, for instance)",
    "cae": "found why the seeker feels this way: the seeker's sentences that trigger the emotion, a one-sentence "
    "summary of the overall cause, and the kind of event behind it",
    "caef": "forecast the emotion the reply should carry and checked it against the seeker's emotion and the evidence",
    "perspective": "described the seeker's psychological state and the support they need",
    "phase": "recognised which counselling phase the conversation is in",
    "srp": "chose the primary empathy strategy for the reply",
    "plan": "planned the reply's goal, stance, tactic and tone",
    "ers": "wrote the listener's reply",
}

ASI_TASK = f"""Identify the seeker's dominant emotion in the dialogue below.
The emotions in this kind of data were first labelled with 32 fine-grained emotions and then grouped into \
Ekman's six classes, so read each class as the group of finer emotions it stands for:
{_defs(EKMAN_DEFINITIONS)}
Judge from the context, the flow of the conversation and the seeker's word choice. A seeker who sounds \
sentimental belongs to happiness; one who sounds annoyed belongs to anger.
Give a brief reasoning that cites the seeker's cues, then the emotion: one of {", ".join(EKMAN)}."""

CAE_TASK = f"""Analyse the cause of the seeker's emotion at two levels.
1. Trigger spans: copy the one or two sentences spoken by the seeker that most directly trigger or express \
the emotion, word for word.
2. Global cause: summarise in one sentence the overall reason for the emotion (for example: "The seeker is \
happy because they reconnected with a close friend."), then classify that cause into exactly one of these \
kinds of antecedent event:
{_defs(CAUSE_DEFINITIONS)}"""

CAEF_TASK = f"""Forecast the emotion the listener's reply should carry, one of {", ".join(EKMAN)}, so that the \
reply answers the seeker's emotion and its cause (a reply to sadness may carry sadness in sympathy; a reply \
to pride may share the happiness). Then check consistency: is the forecast compatible with the perceived \
emotion and with the evidence in the trigger spans and the cause? Give a short reasoning, the forecast, and \
whether it is consistent."""

SRP_TASK = f"""Choose the single most appropriate empathy strategy for the next reply. Do not write the reply.
Study which strategies the human listeners in the retrieved cases used and take inspiration from them, but \
decide for this case on its own merits. The strategies:
{_defs(STRATEGY_DEFINITIONS)}
Give a brief expert reasoning for your choice, then the strategy: ER, IP or EX."""

PLAN_TASK = "Plan the reply along four pragmatic dimensions:\n" + "\n".join(
    f"- {dim}: one of {', '.join(vals)}" for dim, vals in PLAN_DIMENSIONS.items()
)

ERS_TASK = f"""Write the listener's next turn: one or two sentences.
- Emulate the tone, phrasing and brevity of the human replies in the retrieved cases, but write your own \
words: never copy them.
- Open with the chosen primary strategy, then blend in a second strategy to round the reply off. The \
strategies:
{_defs(STRATEGY_DEFINITIONS)}
- Above all, show you listened: pick a concrete detail from the seeker's trigger sentences (their puppy, \
their boss) and weave it into the reply.
- Be warm and natural, never judgemental, and give no unsolicited advice."""

PERSPECTIVE_TASK = (
    "Take the seeker's perspective: describe their psychological state and the support they need, one short "
    "sentence each."
)

PHASE_TASK = "Decide which counselling phase the conversation is in:\n" + _defs(PHASE_DEFINITIONS)

# What the audit checks at each stage; `gra_task` asks only about the stages that ran.
GRA_CHECKS: dict[str, str] = {
    "asi": "the emotion fits the dialogue",
    "cae": "the cause is grounded in the seeker's words",
    "caef": "the forecast emotion is consistent with the seeker's emotion and its cause",
    "perspective": "the seeker's state and needs fit the dialogue",
    "phase": "the counselling phase fits the conversation",
    "srp": "the strategy suits the emotion",
    "plan": "the plan suits the emotion and the strategy",
    "ers": "the reply is empathetic and specific",
}


def gra_task(stages: tuple[str, ...]) -> str:
    """The audit instruction for the run's enabled `stages`: one check per stage, in stage order."""
    checks = [f"- {stage}: {GRA_CHECKS[stage]}" for stage in GRA_CHECKS if stage in stages]
    if "ers" in stages and "plan" in stages:
        checks[-1] += ", and consistent with the plan"
    return audit_instruction(checks)


def audit_instruction(checks: list[str]) -> str:
    """The audit's instruction around its checks, one `- stage: what passes` line per stage in stage order (TRACE's
    from `GRA_CHECKS`, a declared pipeline's from its stages: distill.roles.audit_role)."""
    return (
        "Audit the earlier agents' work stage by stage, in order. For each of these stages say whether it "
        "passed:\n" + "\n".join(checks) + "\nName the earliest failed stage (or null) and give a one-sentence "
        "correction for it."
    )
