"""distill.roles.duties answers the same questions, from the role specs' declared fields, for TRACE's built-in roles
and for a declared pipeline's."""

from __future__ import annotations

from pathlib import Path

import pytest

from distill.roles.declared import load_pipeline, pipeline_roles
from distill.roles.duties import (
    answers_emotion,
    answers_reply,
    emotion_role,
    gold_roles,
    has_rationale_task,
    is_gold_reply,
    rationale_roles,
    reply_role,
)
from distill.roles.roles import DEFAULT_STAGES, ROLES

PIPELINES = Path(__file__).resolve().parents[1] / "configs" / "pipelines"


def test_trace_duties_are_its_roles():
    assert DEFAULT_STAGES == ("asi", "cae", "srp", "ers")
    assert (reply_role(), emotion_role()) == ("ers", "asi")
    assert gold_roles() == ("asi", "ers")
    assert rationale_roles() == ("asi", "srp")
    assert is_gold_reply("ers") and not is_gold_reply("asi") and not is_gold_reply("no-such-role")


def test_a_declared_pipeline_duties_come_from_its_fields():
    roles = pipeline_roles(load_pipeline(PIPELINES / "escot.yaml"))
    assert reply_role(roles) == "re"  # the declared roles follow the built-in ones
    declared = {name: spec for name, spec in roles.items() if spec.pipeline}
    assert [name for name, spec in declared.items() if answers_reply(spec)] == ["re"]
    # em's emotion is free text, not a label: it is no emotion role, and the data holds none of its answers
    assert not answers_emotion(declared["em"])
    assert not any(spec.gold_answer for spec in declared.values())
    assert not is_gold_reply("re", roles)


@pytest.mark.parametrize("name", ["escot.yaml", "escot-strategy-first.yaml"])
def test_a_declared_student_answer_without_reasoning_is_no_rationale_task(name):
    roles = pipeline_roles(load_pipeline(PIPELINES / name))
    declared = [spec for spec in roles.values() if spec.pipeline]
    # escot-strategy-first's sr student drops `reason`, not the `reasoning` a rationale twin teaches
    assert not any(has_rationale_task(spec) for spec in declared)
    assert rationale_roles(roles) == ("asi", "srp")


def test_reply_and_emotion_fields_are_read_from_the_schema():
    assert [name for name, spec in ROLES.items() if answers_reply(spec)] == ["ers"]
    assert [name for name, spec in ROLES.items() if answers_emotion(spec)] == ["asi"]  # caef's is a forecast
