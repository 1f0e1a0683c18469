"""Generic code learns a role's duty from what its pipeline declares, never from its name (issue 77): no product
module outside distill/roles/ names one of TRACE's roles, and distill.roles.duties answers the same questions for
TRACE's built-in roles and for a declared pipeline's."""

from __future__ import annotations

import re
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

REPO = Path(__file__).resolve().parents[1]
PIPELINES = REPO / "configs" / "pipelines"
PRODUCT = ("data_prep", "distill", "train", "eval")
TRACE_ROLE = re.compile(r"""["'](asi|cae|srp|ers)["']|CORE_ROLES""")
ROLES_HOME = "distill/roles/"  # the one place that knows TRACE's roles
# Still to move, owned by another branch: drop each entry once it no longer names a role.
NOT_YET_MOVED = ("distill/quality/",)


def _named_roles(allowed: tuple[str, ...]) -> list[str]:
    hits = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(allowed):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if TRACE_ROLE.search(line):
                    hits.append(f"{rel}:{number}: {line.strip()}")
    return hits


def test_no_product_module_outside_roles_names_a_trace_role():
    hits = _named_roles((ROLES_HOME, *NOT_YET_MOVED))
    assert not hits, "TRACE role names outside distill/roles/ (read them from the role specs):\n" + "\n".join(hits)


def test_the_name_check_finds_a_role_name():
    # the allow-list alone hides distill/roles/, which names every TRACE role: the check above can fail
    assert any(hit.startswith(ROLES_HOME) for hit in _named_roles(NOT_YET_MOVED))


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
