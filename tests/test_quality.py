"""The trace quality checks: each catches the failures issue 38 quoted from real runs, human text passes, the
thresholds move the verdicts, and on the shared ED file each check's false-positive rate is 1% or less."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_prep.dialogues import Dialogue, Turn
from data_prep.loaders import load_dialogues
from data_prep.retrieval import Exemplar
from distill.pipeline.reflection import trigger_warnings, ungrounded_triggers
from distill.pipeline.trace import Step, Trace
from distill.quality import CHECKS, QualityThresholds, check_replies, check_traces
from distill.quality.calibration import human_false_positives
from distill.quality.checks import echo, exemplar_copy, loop, non_reply, parroted_rationale
from distill.quality.duplicates import near_duplicates
from distill.roles.declared import stored_roles
from distill.roles.roles import ROLES, build_role_input, exemplar_texts
from distill.roles.schemas import CAEOutput
from distill.roles.teacher_prompts import ASI_TASK

T = QualityThresholds()
SEEKER = "My internet cut out right in the middle of a call with a client today."
# The exemplar the issue's teacher copied, and its reply (issue 38's words, not ED's).
EXEMPLAR = Exemplar(
    dialogue_id="x#1",
    conv_id="x",
    emotion="anger",
    situation="My ex posted private photos of me online.",
    response="That is a huge violation. Have you been able to get them taken down?",
    score=0.9,
    search="precise",
)
COPIED = (
    "My ex posted private photos of me online and I'm sorry. That is a huge violation. "
    "Have you been able to get them taken down?"
)
HUMAN_REPLIES = [
    "Oh no, right in the middle of a call? That is so frustrating, did the client understand?",
    "Wow!",
    "That sounds like a lot to take in.",
    "Yeah yeah yeah, I know the feeling, it happened to me last week too.",
    "Haha, that's great! How old is he now?",
    "I'm so so sorry. Losing a pet after nine years is really hard.",
    "I hope it all works out. $1,000,000 would be nice though!",
]


def dialogue(i: int = 0, seeker: str = SEEKER) -> Dialogue:
    return Dialogue(
        id=f"d{i}#1", conv_id=f"d{i}", turns=[Turn(speaker="seeker", text=seeker)], situation="x", emotion="anger"
    )


@pytest.mark.parametrize(
    "text",
    [
        "stress_and_anxiety_and_depression_and_depression_and\u2026",  # the issue's quotes, cut as it cut them
        "cause_category_1_emotion_category_1_emotion_category_1_\u2026",
        "stress_relief_relief_relief_\u2026",
        "stress_level_1000000000\u2026",
        "stress_and_anxiety_and_depression_and_depression_and_depression_and_depression_and_depression",
        "stress_level_10000000000000000000000000000000000",
        "I'm not sure what's going on here. " * 5,
        "That is hard. I'm not sure what's going on here. Oh. I'm not sure what's going on here. "
        "Well. I'm not sure what's going on here.",
        "so so so so sad",
        "hahahahahahahaha",
        "no no no no no no",  # an interjection, at loop_interjection_repeats
        "Well............",  # a run of punctuation marks, at loop_punctuation_repeats
        "really?!?!?!?!?!?!",
    ],
)
def test_loop_catches_degenerate_repetition(text):
    assert loop(text, T)


def test_loop_compression_rule_catches_a_loop_that_never_repeats_exactly():
    text = "; ".join(f"I am here for you, friend number {n}" for n in range(1, 8))
    reason = loop(text, T)
    assert reason and "compresses" in reason


@pytest.mark.parametrize(
    "text", HUMAN_REPLIES + [SEEKER, "5_5_5_5_5_5 was the score", "No no no no", "Well.........", "Oh.......!!!"]
)
def test_loop_passes_human_text(text):
    assert loop(text, T) is None


def test_exemplar_copy_catches_the_issues_reply_and_not_its_own_words():
    exemplars = [EXEMPLAR.situation, EXEMPLAR.response]
    assert "copied from a retrieved exemplar" in exemplar_copy(COPIED, exemplars, T)
    for reply in HUMAN_REPLIES:
        assert exemplar_copy(reply, exemplars, T) is None
    assert exemplar_copy("That is a huge violation.", exemplars, T) is None  # a short stock phrase is shared


def test_exemplar_copy_needs_a_share_of_the_text_not_only_a_count_of_copied_words():
    """A long reply that quotes a whole exemplar reply and goes on in its own words answers this seeker."""
    exemplars = [EXEMPLAR.situation, EXEMPLAR.response]
    reply = (
        f"{EXEMPLAR.response} I only ask because when my cousin lost her files last spring we spent a whole week "
        "calling the phone company about the broken router."
    )
    assert exemplar_copy(reply, exemplars, T) is None  # 14 copied words of 39: past the count, under the share
    assert exemplar_copy(reply, exemplars, T.model_copy(update={"exemplar_copy_share": 0.3}))


def test_exemplars_are_read_back_from_the_prompt_the_trace_recorded():
    spec = ROLES["ers"]
    messages = spec.render(build_role_input(spec, dialogue(), {}, exemplars=[EXEMPLAR, EXEMPLAR]), "teacher")
    assert exemplar_texts(messages) == [EXEMPLAR.situation, EXEMPLAR.response] * 2
    assert exemplar_texts(spec.render(build_role_input(spec, dialogue(), {}), "student")) == []


def test_ungrounded_trigger_is_fuzzy_and_normalised():
    d = dialogue(seeker="They sold grandma's piano this morning :( and I cried the whole drive home.")
    grounded = ["they sold grandmas piano this morning", "I cried the WHOLE drive home!", ":(", "piano"]
    ungrounded = ["stress_relief_relief_relief", "I cried all the way back to my house", "the dog ran away"]
    assert ungrounded_triggers(grounded + ungrounded, d) == ungrounded
    # the pipeline's warning event reads the same rule
    out = CAEOutput(triggers=[grounded[0], ungrounded[1]], cause="c", category="Loss & Failure")
    assert trigger_warnings(out, d) == [f"warning: cae trigger {ungrounded[1]!r} is not a span of the seeker's turns"]
    assert ungrounded_triggers([grounded[1]], d, min_match=1.0) == []


@pytest.mark.parametrize(
    "reasoning",
    [
        "Judge from the context, the seeker's true emotion is anger.",
        "The seeker feels angry.",
        "Emotion: anger.",
        f'The seeker says: "{SEEKER}"',
    ],
)
def test_parroted_rationale_catches_template_label_and_copy(reasoning):
    assert parroted_rationale(reasoning, ASI_TASK, [SEEKER], T)


@pytest.mark.parametrize(
    "reasoning",
    [
        "The call with a client was cut off, an unfair blow at work, so the seeker is annoyed.",
        "They lost their connection mid-call: anger at something out of their control.",
        "",  # a student answers with the decision alone
    ],
)
def test_parroted_rationale_passes_a_reasoning_with_its_own_cues(reasoning):
    assert parroted_rationale(reasoning, ASI_TASK, [SEEKER], T) is None


def test_parroted_rationale_counts_the_prompts_own_wording_as_no_cue():
    """Words the prompt gave the role are not the reasoning's own cues, even where they are no stock words."""
    reasoning = "A seeker who sounds sentimental belongs to happiness."  # ASI_TASK's own sentence
    assert (parroted_rationale(reasoning, ASI_TASK, [SEEKER], T) or "").startswith("only restates the label or the")
    assert parroted_rationale(reasoning, "", [SEEKER], T) is None  # told nothing: "sounds", "belongs" are its own


def test_echo_and_non_reply():
    assert echo(SEEKER, SEEKER, T)
    assert echo("Your internet cut out right in the middle of a call with a client today?", SEEKER, T)
    for reply in ("2018-08-20T18:38:27.13.00Z", "42", "https://example.com/reply", "", "...", "null", "N/A"):
        assert non_reply(reply, T), reply
    for reply in HUMAN_REPLIES:
        assert echo(reply, SEEKER, T) is None and non_reply(reply, T) is None


@pytest.mark.parametrize(
    "reply",
    [
        "I'm sorry, but I'm unable to assist with your request.",
        "I can\u2019t help with that.",
        "As an AI language model, I do not have feelings, but that sounds hard.",
        "I cannot provide advice on this.",
        "I'm just a language model.",
    ],
)
def test_non_reply_fails_a_refusal_or_ai_boilerplate(reply):
    assert (non_reply(reply, T) or "").startswith("a refusal, not a reply: "), reply


@pytest.mark.parametrize(
    "reply",
    [
        "emotion: anger",
        "anger",
        "Sadness.",
        "Strategy: ER",
        "ER",
        "Emotional Reaction",
        "reasoning: the seeker is sad",
        "response: That must have hurt.",
        '{"emotion": "fear"}',
    ],
)
def test_non_reply_fails_a_label_in_place_of_a_reply(reply):
    assert (non_reply(reply, T) or "").startswith("a label in place of a reply: "), reply


@pytest.mark.parametrize(
    "reply",
    [
        "I'm sorry to hear that. Did the client call you back?",
        "I'm so sorry, that's awful.",
        "Anger is understandable here, did you tell him?",
        "That is a lot of fear and anger to carry at once, are you sleeping?",
        "Upset?",
        "I'm so happy for you!",
        "You can't help it, connections drop. Worrying won't help either.",
        "Note: a wired connection drops less often.",
        "Devastated.",  # a one-word reaction in ED's words, not a role's label
        "Impressed!",
        "I'm unable to provide much advice but I am here for you",
    ],
)
def test_non_reply_passes_listeners_who_say_sorry_or_name_a_feeling(reply):
    assert non_reply(reply, T) is None


def test_near_duplicate_counts_different_dialogues():
    same = "I'm so sorry to hear that, it must have been really hard for you."
    nearly = "I'm so sorry to hear that, it must have been really hard on you."
    replies = [same] * 3 + [nearly] * 2 + HUMAN_REPLIES
    flagged = near_duplicates(replies, [f"d{i}" for i in range(len(replies))], T)
    assert all(flagged[:5]) and not any(flagged[5:])
    # four dialogues are too few; one dialogue answered five times is one dialogue
    assert not any(near_duplicates([same] * 4, ["a", "b", "c", "d"], T))
    assert not any(near_duplicates([same] * 5, ["a"] * 5, T))


def test_thresholds_move_the_verdicts_and_a_bad_file_names_the_field(tmp_path):
    assert loop("so so so sad", T) is None
    assert loop("so so so sad", T.model_copy(update={"loop_word_repeats": 3}))
    path = tmp_path / "q.yaml"
    path.write_text("loop_word_repeats: 3\n", encoding="utf-8")
    assert QualityThresholds.from_file(path).loop_word_repeats == 3
    path.write_text("loop_word_repeat: 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"q\.yaml: field 'loop_word_repeat'"):
        QualityThresholds.from_file(path)


def trace_with_prompts(d: Dialogue, outputs: dict[str, dict], key: str, config: dict | None = None) -> Trace:
    """A teacher trace whose steps carry the prompts its pipeline's roles render (one exemplar for srp and ers)."""
    steps, roles = [], stored_roles(config or {})
    for role, out in outputs.items():
        spec = roles[role]
        inp = build_role_input(spec, d, outputs, exemplars=[EXEMPLAR] if spec.uses_exemplars else None)
        steps.append(Step(role=role, messages=spec.render(inp, "teacher"), parsed=out))
    return Trace(
        key=key, dialogue=d, backend="b", model="m", prompt_version="v2", prompt_style="teacher",
        config=config or {}, steps=steps, outputs=outputs,
    )  # fmt: skip


def test_check_traces_applies_each_check_to_its_roles():
    bad = {
        "asi": {"reasoning": "Judge from the context, the seeker's true emotion is anger.", "emotion": "anger"},
        "cae": {"triggers": ["stress_relief_relief_relief"], "cause": "c", "category": "Loss & Failure"},
        "srp": {"reasoning": "A cut call with a client needs warmth first.", "strategy": "ER"},
        "ers": {"response": COPIED},
    }
    good = {**bad, "asi": {"reasoning": "A call cut off mid-sentence: annoyed.", "emotion": "anger"}}
    good["cae"] = {"triggers": ["My internet cut out"], "cause": "c", "category": "Loss & Failure"}
    good["ers"] = {"response": HUMAN_REPLIES[0]}
    report = check_traces([trace_with_prompts(dialogue(0), bad, "bad"), trace_with_prompts(dialogue(1), good, "ok")])
    assert report.failing() == {
        ("bad", "asi"): {"parroted_rationale"},
        ("bad", "cae"): {"loop", "ungrounded_trigger"},
        ("bad", "ers"): {"exemplar_copy"},
    }
    assert report.checked == {"asi": 2, "cae": 2, "srp": 2, "ers": 2}
    assert report.rates()["ers"]["exemplar_copy"] == 0.5 and report.rates()["srp"]["loop"] == 0.0
    # every check naming ers, but the judge: it reads replies only when a judge model is given
    assert set(report.counts()["ers"]) == {n for n, c in CHECKS.items() if "ers" in c.roles} - {"reply_judge"}


def test_check_replies_runs_the_reply_checks_on_bare_replies():
    replies = ["2018-08-20T18:38:27.13.00Z", SEEKER] + HUMAN_REPLIES
    report = check_replies(replies, [dialogue(i) for i in range(len(replies))])
    assert report.counts()["ers"] == {
        "loop": 0, "exemplar_copy": 0, "echo": 1, "non_reply": 1, "near_duplicate": 0, "leaked_reference": 0,
        "meta_commentary": 0, "self_description": 0, "prompt_echo": 0, "template_fragment": 0, "off_dialogue": 0,
    }  # fmt: skip


def test_leaked_reference_flags_a_dialogue_that_already_holds_its_reference_reply():
    """The gold reply as one of the dialogue's turns (other case, spacing and punctuation) is flagged on the reply
    role of a generated run and on bare replies; a turn that only shares some of its words passes."""
    from distill.quality.checks import leaked_reference

    gold = "That must have been so frustrating. Did the client understand?"
    clean = dialogue(0).model_copy(update={"gold_response": gold})
    copy = Turn(speaker="responder", text="  that must have been SO frustrating, did the client understand")
    leaked = clean.model_copy(update={"id": "d1#1", "turns": [*clean.turns, copy]})
    reason = leaked_reference(gold, [t.text for t in leaked.turns])
    assert reason == "the reference reply is already turn 2 of the dialogue's 2"
    assert leaked_reference(gold, [SEEKER, "That must have been so frustrating."]) is None
    assert leaked_reference(None, [SEEKER]) is None and leaked_reference("", [""]) is None
    outputs = {"ers": {"response": HUMAN_REPLIES[0]}}
    report = check_traces([trace_with_prompts(clean, outputs, "ok"), trace_with_prompts(leaked, outputs, "leak")])
    assert report.failing() == {("leak", "ers"): {"leaked_reference"}}
    assert report.counts()["ers"]["leaked_reference"] == 1
    assert check_replies([gold, gold], [clean, leaked]).counts()["ers"]["leaked_reference"] == 1


def test_check_traces_reads_srps_reasoning_for_a_copied_exemplar():
    """srp's reasoning is what its prompt's exemplars can be copied into (ers's is its reply)."""
    report = check_traces([trace_with_prompts(dialogue(0), {"srp": {"reasoning": COPIED, "strategy": "ER"}}, "k")])
    assert report.failing() == {("k", "srp"): {"exemplar_copy"}}
    assert [(f.field, f.text) for f in report.findings] == [("reasoning", COPIED)]


def test_echo_is_of_the_seekers_last_turn_in_a_dialogue_of_several(tiny_dialogues):
    """The checks compare a reply with the seeker's last turn, not the first, in traces and in bare replies."""
    d = tiny_dialogues[1]  # three seeker turns, a responder's between them
    last = d.turns[-1].text
    assert [t.speaker for t in d.turns].count("seeker") == 3 and last != d.turns[0].text
    report = check_traces([trace_with_prompts(d, {"ers": {"response": last}}, "k")])
    assert report.failing() == {("k", "ers"): {"echo"}}
    assert check_replies([last], [d]).counts()["ers"]["echo"] == 1


def test_near_duplicate_runs_over_the_whole_run_in_check_traces_and_check_replies():
    """Five dialogues given the same reply: each is a near_duplicate, in a trace run and in bare replies."""
    same = "I'm so sorry to hear that, it must have been really hard for you."
    dialogues = [dialogue(i) for i in range(6)]
    replies = [same] * 5 + [HUMAN_REPLIES[0]]
    traces = [
        trace_with_prompts(d, {"ers": {"response": r}}, f"k{i}") for i, (d, r) in enumerate(zip(dialogues, replies))
    ]
    assert check_traces(traces).failing() == {(f"k{i}", "ers"): {"near_duplicate"} for i in range(5)}
    assert check_replies(replies, dialogues).counts()["ers"]["near_duplicate"] == 5


def test_false_positive_rates_on_real_ed_human_text(shared_ed_csv):
    dialogues = load_dialogues(shared_ed_csv).splits["all"]
    assert len(dialogues) == 1263
    rates = human_false_positives(dialogues)
    assert set(rates) == set(CHECKS) - {"reply_judge"}  # the judge needs a judge model: benchmarks/quality_recall.py
    assert rates["echo"]["texts"] == rates["non_reply"]["texts"] == 1263
    too_high = {check: r for check, r in rates.items() if r["rate"] > 0.01}
    assert not too_high, too_high


def test_docs_list_every_check_and_every_threshold_with_its_default():
    text = (Path(__file__).resolve().parents[1] / "docs" / "quality.md").read_text(encoding="utf-8")
    for name in CHECKS:
        assert f"| `{name}` |" in text, name
    for name, spec in QualityThresholds.model_fields.items():
        # the default as it reads in the table, plain or as a code span (a setting, not a measured figure)
        assert any(f"| `{name}` | {d} |" in text for d in (spec.default, f"`{spec.default}`")), name
