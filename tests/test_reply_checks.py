"""The checks that a reply is one (issue 81): each failure kind a weak teacher writes is caught, and replies
people write pass. Every example here was written for these tests, in the manner of the issue's quotes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_quality import dialogue, trace_with_prompts

from data_prep.dialogues import Dialogue, Turn
from distill.backends.base import GenerationResult
from distill.quality import QualityThresholds, check_replies, check_traces
from distill.quality.checks import role_checks
from distill.quality.judge import judge_replies, parse_verdict
from distill.quality.relevance import off_dialogue
from distill.quality.reply_form import meta_commentary, prompt_echo, self_description, template_fragment
from distill.roles.declared import DeclaredPipeline, pipeline_roles
from distill.roles.roles import ROLES
from distill.roles.teacher_prompts import ERS_TASK

REPO = Path(__file__).resolve().parents[1]
T = QualityThresholds()
TITLES = [spec.title for spec in ROLES.values()]
# Replies a listener could write: none of them may fail a rule below.
HUMAN = [
    "Oh no, that sounds awful. Did your sister at least apologise afterwards?",
    "Congratulations!!! You must be so proud of her :)",
    "I'd be scared too. Have you talked to your landlord about the mold yet? (I would.)",
    "Haha that's a great story, thanks for sharing it with me :p",
    "Wow. I'm a nurse and even I would have panicked in that moment.",
    "That's rough: losing a job right before the holidays. How are you holding up?",
    "Sounds like you handled it well. I hope the interview goes great tomorrow =)",
    "It sounds like you need someone to listen, and I'm here for that.",
    "You can file a response to their letter and ask for more time.",
    "I'm sorry, that must hurt (:",
    "lol :p",
    "Devastated.",
    "awesome",
    "k",
    "Be there by 3:30 and bring snacks!",
    "I'm an administrative assistant too, so I know those late nights.",
    "Acting as a role model for your brother is a lot to carry.",
    "Feeling betrayed is a natural response to what happened to you.",
    "I can empathize with how stressful this move must be.",
    "Your mom sounds like her biggest supporter (and yours).",
]

META = [
    "This is a wonderful example of how to respond to a friend who feels let down.",
    "The best response to this reply is to acknowledge how the seeker is feeling.",
    "The listener should show that they understand the speaker's frustration.",
    "An empathetic response would validate her worry about the move.",
    "Empathy",
    "This is a great response, and a perfect reply to the question.",
    "Empathy Response",
    "Compassion-Driven Reply",
    "I'm not sure, but I think it's sadness.",
    "Here's a JSON object with the reply in it.",
]
SELF = [
    "I am the Empathetic Response Synthesizer in a team of agents that writes replies.",
    "As a virtual assistant built to support people, I hear your frustration with the neighbours.",
    "I'm the reply generator here and my task is to comfort you.",
    "Being a language model, I cannot feel it, but that must be hard.",
    "I am using the new AI to write emails to everyone who cannot use email.",
    "I am sorry for the confusion.",
    "I'm really sorry for the inconvenience, but I'm here to help. What's your name?",
    "The Strategic Response Planner chose comfort first.",
]
TEMPLATE = [
    "{{<ref>{",
    "Gentle Response: ",
    "The Mood-Mirror: Emotional Reaction: expressing feelings",
    "Here is what I would say:",
    "<reply>I am so sorry to hear about the car.</reply>",
    "[INST] Write a reply [/INST]",
    "I know it's hard (and you tried so much",
    "**Reply** That must be hard.",
    "Kindred: Lullaby",
    "Gloomy",
    "warm-hearted-reactive-label-joy",
]


@pytest.mark.parametrize("reply", META)
def test_meta_commentary_catches_talk_about_the_exchange(reply):
    assert meta_commentary(reply)


@pytest.mark.parametrize("reply", SELF)
def test_self_description_catches_an_agent_describing_itself(reply):
    assert self_description(reply, TITLES)


@pytest.mark.parametrize("reply", TEMPLATE)
def test_template_fragment_catches_template_debris(reply):
    assert template_fragment(reply)


@pytest.mark.parametrize("reply", HUMAN)
def test_replies_people_write_pass_every_form_rule(reply):
    assert meta_commentary(reply) is None
    assert self_description(reply, TITLES) is None
    assert template_fragment(reply) is None
    assert prompt_echo(reply, ERS_TASK, T) is None


def test_a_single_word_title_counts_only_when_the_writer_claims_it():
    """A declared reply role's title may be a word listeners use ("Supporter"): only "I am the Supporter" is the
    role speaking."""
    assert self_description("You have a real supporter in your brother.", ["Supporter"]) is None
    assert self_description("I am the Supporter of this team.", ["Supporter"])


def test_prompt_echo_catches_the_roles_instructions_and_not_a_few_shared_words():
    echoed = "Show you listened: pick a concrete detail from the seeker's trigger sentences and weave it in."
    assert prompt_echo(echoed, ERS_TASK, T).endswith("repeat the role's own instructions")
    assert prompt_echo("How human listeners replied in similar situations:", "Retrieved cases: how human "
                       "listeners replied in similar situations:", T)  # fmt: skip
    # a listener's reply may share one 4-gram with the instructions ("one or two sentences") and pass
    assert prompt_echo("Just write me one or two sentences about how the date went!", ERS_TASK, T) is None
    stricter = T.model_copy(update={"prompt_echo_share": 0.3})
    assert prompt_echo("Just write me one or two sentences about how the date went!", ERS_TASK, stricter)


def test_check_traces_reads_the_reply_against_its_own_recorded_prompt():
    """The rendered teacher prompt is the instructions; its dialogue is cut out, so quoting the seeker is echo's
    business, not prompt_echo's."""
    d = dialogue(0)
    outputs = {"ers": {"response": "Above all, show you listened: pick a concrete detail from the seeker's trigger"}}
    bad = trace_with_prompts(d, outputs, "bad")
    good = trace_with_prompts(dialogue(1), {"ers": {"response": HUMAN[0]}}, "ok")
    assert check_traces([bad, good]).failing() == {("bad", "ers"): {"prompt_echo", "meta_commentary"}}


def test_a_declared_pipelines_reply_role_gets_the_reply_checks(tiny_dialogues):
    pipeline = DeclaredPipeline.model_validate(
        {
            "name": "mini81",
            "roles": [
                {"name": "feel", "title": "Feeling Namer", "task": "Name the feeling.", "brief": "named the feeling",
                 "answer": {"feeling": {"text": 40}}},
                {"name": "say", "title": "Supporter", "task": "Write the reply.", "inputs": ["feel"],
                 "answer": {"response": {"text": 200}}},
            ],
        }
    )  # fmt: skip
    roles = pipeline_roles(pipeline)
    assert {"meta_commentary", "self_description", "prompt_echo", "template_fragment", "off_dialogue"} <= set(
        role_checks("say", roles)
    )
    assert "meta_commentary" not in role_checks("feel", roles) and "reply_judge" not in role_checks("say", roles)
    assert role_checks("say") == ()  # the built-in roles alone do not know the pipeline's
    outputs = {"feel": {"feeling": "worry"}, "say": {"response": "As the Supporter agent, I note the seeker's worry."}}
    trace = trace_with_prompts(tiny_dialogues[0], outputs, "k", {"pipeline": pipeline.model_dump()})
    assert check_traces([trace]).failing()[("k", "say")] >= {"meta_commentary", "self_description"}


def _dialogues(seekers: list[str]) -> list[Dialogue]:
    return [
        Dialogue(id=f"c{i}#1", conv_id=f"c{i}", turns=[Turn(speaker="seeker", text=s)], situation="x", emotion="joy")
        for i, s in enumerate(seekers)
    ]


SEEKERS = [
    "My daughter drank milk that had gone bad and got sick all night.",
    "My dog finally learned to sit after weeks of practice.",
    "I got the promotion at work I have wanted for two years.",
    "Our basement flooded after the storm and the carpets are ruined.",
    "My best friend is moving across the country next month.",
    "I failed my driving test for the third time today.",
    "The neighbours threw a loud party until four in the morning.",
    "I finally finished running my first marathon last weekend.",
    "My grandmother turned ninety and we all went to see her.",
    "Someone scratched my new car in the parking lot.",
    "I found out my landlord is raising the rent again.",
    "My son scored his first goal at the football match.",
]


def test_off_dialogue_catches_a_reply_written_for_another_seeker():
    """The 12th reply answers the 4th dialogue's seeker (the flood), not its own (the son's goal): it is about
    its own dialogue far less than about the others'. Replies that answer their seekers pass."""
    dialogues = _dialogues(SEEKERS)
    replies = [
        "Oh no, is she feeling better now? Spoiled milk can be nasty.",
        "That's great, training a dog takes real patience!",
        "Congratulations on the promotion, you earned it!",
        "A flooded basement is awful, I hope insurance covers the carpets.",
        "That's hard, you'll miss your best friend a lot.",
        "Third time is rough, you'll pass the driving test next time.",
        "Parties until four in the morning would drive me mad too.",
        "Your first marathon, congratulations on finishing!",
        "Ninety years, what a lovely birthday for your grandmother.",
        "Ugh, a scratch on a new car is so annoying.",
        "Another rent raise? That landlord is greedy.",
        "Our basement flooded in the storm last spring and we had to throw out every carpet.",
    ]
    reasons = off_dialogue(replies, dialogues, T)
    assert [i for i, r in enumerate(reasons) if r] == [11]
    assert reasons[11].startswith("about another dialogue")
    # too few conversations to say what "unrelated" is: nothing is read
    assert off_dialogue(replies[:5], dialogues[:5], T) == [None] * 5
    assert check_replies(replies, dialogues).counts()["ers"]["off_dialogue"] == 1


class Judge:
    """A stand-in judge model: "no" to any reply that says "the seeker", an unparseable answer to "???"."""

    name, model = "stub", "stub-judge"

    def __init__(self):
        self.asked = []

    def generate(self, requests, progress=None):
        self.asked += requests
        out = []
        for req in requests:
            reply = req.messages[-1]["content"].split("Candidate next listener turn: ")[1].split("\n\n")[0]
            verdict = "nonsense" if reply == "???" else '{"reply_to_seeker": "no"}' if "the seeker" in reply else (
                'Sure: {"reply_to_seeker": "yes"}')  # fmt: skip
            out.append(GenerationResult(text=verdict))
        return out

    def describe(self):
        return {"name": self.name, "model": self.model}


def test_the_judge_is_off_by_default_and_files_its_no_as_reply_judge():
    dialogues = _dialogues(SEEKERS[:3])
    replies = ["We should validate the seeker here.", "Good boy! How long did it take?", "???"]
    judge = Judge()
    verdicts = judge_replies(judge, dialogues, replies)
    assert verdicts == [False, True, None] and judge.asked[0].schema is not None
    assert parse_verdict('{"reply_to_seeker": "yes"}') is True and parse_verdict("yes") is None
    # cut off by the token cap after the verdict (JSON mode without the schema went on with another key)
    assert (
        parse_verdict('{"reply_to_seeker":"no",", Ref Ref') is False and parse_verdict('{"reply_to_seeker":"y') is None
    )
    assert "reply_judge" not in check_replies(replies, dialogues).counts()["ers"]
    judged = check_replies(replies, dialogues, judge=judge)
    assert judged.counts()["ers"]["reply_judge"] == 1
    assert {f.dialogue_id for f in judged.findings if f.check == "reply_judge"} == {"c0#1"}
    traces = [
        trace_with_prompts(d, {"ers": {"response": r}}, f"k{i}") for i, (d, r) in enumerate(zip(dialogues, replies))
    ]
    assert check_traces(traces, judge=Judge()).counts()["ers"]["reply_judge"] == 1


def _judge_config(tmp_path, backend: dict):
    import yaml

    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump({"backend": backend}))
    return path


def test_inspect_refuses_a_judge_config_without_a_backend_before_any_check(tiny_dialogues, tmp_path, capsys):
    from test_datasets import write_run

    from distill.__main__ import main as distill_main

    write_run(tmp_path / "run", [trace_with_prompts(tiny_dialogues[0], {"ers": {"response": HUMAN[0]}}, "k")])
    bad = tmp_path / "judge.yaml"
    bad.write_text("pipeline: {}\n")
    assert distill_main(["inspect", str(tmp_path / "run"), "--judge", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: field 'backend' must be a mapping" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "quality.json").exists()


@pytest.mark.slow
def test_inspect_asks_a_judge_behind_a_local_openai_compatible_server(smollm_path, tiny_dialogues, tmp_path, capsys):
    """`distill serve` on a tiny random model is the judge: constrained decoding makes every verdict parse, so each
    reply gets one, and quality.json counts the replies under reply_judge."""
    import json

    from fault_proxy import ServeProcess, make_tiny_model
    from test_datasets import write_run

    from distill.__main__ import main as distill_main
    from distill.quality.judge import judge_backend

    server = ServeProcess(str(make_tiny_model(smollm_path, tmp_path / "tiny")), tmp_path / "serve.log").wait_ready()
    try:
        import httpx

        model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        backend = {"type": "openai", "model": model, "base_url": server.url + "/v1", "strict_schema": False}
        config = _judge_config(tmp_path, backend)
        dialogues = tiny_dialogues[:3]
        assert None not in judge_replies(judge_backend(str(config)), dialogues, HUMAN[:3])
        traces = [
            trace_with_prompts(d, {"ers": {"response": r}}, f"k{i}") for i, (d, r) in enumerate(zip(dialogues, HUMAN))
        ]
        write_run(tmp_path / "run", traces)
        assert distill_main(["inspect", str(tmp_path / "run"), "--judge", str(config)]) == 0
    finally:
        server.stop()
    ers = json.loads((tmp_path / "run" / "quality.json").read_text())["roles"]["ers"]
    assert ers["checked"] == 3 and "reply_judge" in ers["checks"]
    assert "reply_judge" in capsys.readouterr().out


def test_echo_catches_a_writer_speaking_as_the_seeker_in_the_seekers_own_sentence():
    """Eight words in a row of the seeker's last turn, even inside a longer reply: people quote five at most."""
    from distill.quality.checks import echo

    seeker = "I do not have a car. I took the bus anyway because the interview mattered so much."
    reply = "I took the bus anyway because the interview mattered so much. It's normal, and I'm glad you're here."
    assert echo(reply, seeker, T) == "8+ words in a row of the seeker's last turn"
    assert echo("The bus anyway because the interview mattered? Wow, good for you.", seeker, T) is None


def test_bare_replies_are_read_by_their_own_pipelines_reply_role():
    """check_replies with a declared pipeline's roles files the replies under its reply role (escot's `re`, not
    TRACE's ers) and reads prompt_echo against that role's own prompt: its task said back fails, ers's passes."""
    from distill.roles.declared import load_pipeline
    from distill.roles.duties import reply_role

    roles = pipeline_roles(load_pipeline(REPO / "configs" / "pipelines" / "escot.yaml"))
    assert reply_role(roles) == "re" and reply_role(ROLES) == "ers"
    own = "Write the supporter's next turn in the dialogue: one to three warm, specific sentences."
    dialogues = _dialogues(SEEKERS[:2])
    report = check_replies([own, HUMAN[0]], dialogues, roles=roles)
    assert set(report.checked) == {"re"} and report.failing() == {(dialogues[0].id, "re"): {"prompt_echo"}}
    assert check_replies([own, HUMAN[0]], dialogues).failing() == {}  # ers's prompt is not re's


def test_no_module_of_distill_quality_names_a_trace_role():
    """The checks read a role by what it answers or is shown (distill.quality.registry), never by TRACE's names."""
    quoted = re.compile(r"""["'](?:asi|cae|srp|ers)["']|\bCORE_ROLES\b""")
    found = [
        f"{path.name}:{n}"
        for path in sorted((REPO / "distill" / "quality").glob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if quoted.search(line)
    ]
    assert not found, found


def test_a_reply_whose_declaration_cannot_be_read_is_filed_under_the_built_in_reply_role():
    """A stored declaration this version cannot read leaves its roles unchecked, but its reply still goes through
    the run-level checks (near_duplicate here), filed under the built-in reply role."""
    from distill.pipeline.trace import Trace

    dialogues = _dialogues(SEEKERS[:5])
    traces = [
        Trace(key=f"k{i}", dialogue=d, backend="b", model="m", prompt_version="v2", prompt_style="teacher",
              config={"pipeline": {"name": "newer", "roles": "a form this version cannot read"}},
              outputs={"say": {"response": "That is a lot to carry, and I am glad you told me about it today."}})
        for i, d in enumerate(dialogues)
    ]  # fmt: skip
    assert {(f.role, f.check) for f in check_traces(traces).findings} == {("ers", "near_duplicate")}


# --- rules from kept-back-3's misses: hand-written replies of each kind ---------------------------------------------


def test_loop_catches_a_phrase_said_over_and_over_in_a_reply_and_not_a_reply_saying_it_twice():
    """A reply's loop with other words between ("I'm glad that you" three times) is a loop; twice is emphasis."""
    from distill.quality.checks import loop, repeated_phrase

    looped = "I'm glad that you won. I'm glad that you are going. I'm glad that you wrote it. Enjoy the trip."
    assert "said 3 times" in repeated_phrase(looped, T)
    assert loop(looped, T) is None  # no run in a row: only the reply rule sees it
    assert repeated_phrase("I'm glad that you won, and I'm glad that you are going. Enjoy the trip!", T) is None
    contest = dialogue(0, "I won an essay contest and I get to go to Washington!")
    [reply] = check_replies([looped], [contest], T).findings
    assert reply.check == "loop"


def test_echo_catches_a_reply_opening_with_the_seekers_first_person_words():
    """The writer speaks as the seeker: "I'm excited to think of all ..." to a seeker who said it, in any of their
    turns. A listener's "I'm excited for you" shares two words and passes."""
    from distill.quality.checks import echo

    first = "I'm excited to think of all the possibilities that are open to me right now"
    last = "Being able to learn almost anything online, for one"
    assert "first-person words" in echo("I'm excited to think of all possibilities that I have.", last, T, [first])
    assert echo("I'm excited to think of all possibilities that I have.", last, T) is None  # the first turn unread
    assert echo("I'm excited for you, that sounds like a great time to learn.", last, T, [first]) is None
    assert echo("Excited to think of all the possibilities? Me too!", last, T, [first]) is None  # not "I ..."


@pytest.mark.parametrize("reply", ["yes", "no", "Yeah"])
def test_template_fragment_catches_a_bare_yes_or_no(reply):
    assert template_fragment(reply)


@pytest.mark.parametrize("reply", ["Yes!", "ok", "Wow", "No way!"])
def test_template_fragment_passes_a_word_people_say_alone_or_an_answer_with_a_mark(reply):
    assert template_fragment(reply) is None


def test_off_dialogue_catches_condolences_for_a_loss_the_dialogue_never_tells_of():
    """Read on every reply, whatever the run's size: no model is needed."""
    from distill.quality.relevance import unfounded_condolence

    rain = dialogue(0, "I left a borrowed book outside and it was ruined in the rain.")
    grief = dialogue(1, "My grandmother passed away last week and I can't stop crying.")
    sorry = "I am sorry for your loss. I will take care of it."
    assert "condolences" in unfounded_condolence(sorry, rain)
    assert unfounded_condolence(sorry, grief) is None
    assert unfounded_condolence("I'm sorry, that's a loss of a good book though.", rain) is None
    assert off_dialogue([sorry, sorry], [rain, grief], T)[0] and off_dialogue([sorry], [grief], T) == [None]
