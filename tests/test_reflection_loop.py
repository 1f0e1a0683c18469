"""MERG's reflection loop run by the real `Pipeline` on a scripted backend: the paths a real reviewer rarely takes.

The greedy embedded reviewer passes every stage, so on the model the rerun path runs once at most. Here every
role answers from a script (pre-written JSON, in the order the pipeline asks), while the pipeline's parsing,
retries, audits, reruns and final pick all run for real: a stage faulted twice, an audit that never
validates, a rerun that breaks, a correction left blank. The script is exact: a call it did not plan for
fails the test, and so does a planned answer the pipeline never asked for.
"""

from __future__ import annotations

import json

import pytest

from distill.backends.base import GenerationResult
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.roles.roles import ROLES

STAGES = ["asi", "srp", "ers"]  # cae is off: fewer answers to script, and 'cae' becomes a stage the audit may not name
ASI = {"reasoning": "she cried the whole drive home", "emotion": "sadness"}
REVIEWER = "A reviewer found a problem with your previous answer: "


class ScriptedBackend:
    """Answers each request with the next scripted answer for its role (known from the schema it asks for)."""

    name = model = "scripted"

    def __init__(self, script: dict[str, list]):
        self.script = {role: list(answers) for role, answers in script.items()}

    def generate(self, requests, progress=None):
        results = []
        for request in requests:
            role = next(n for n, spec in ROLES.items() if issubclass(request.schema, spec.schema))
            assert self.script.get(role), f"the pipeline asked {role} once more than the script plans"
            answer = self.script[role].pop(0)
            results.append(GenerationResult(text=answer if isinstance(answer, str) else json.dumps(answer)))
        if progress:
            progress(len(requests))
        return results

    def describe(self):
        return {"backend": self.name}


def _srp(strategy: str) -> dict:
    return {"reasoning": "the seeker needs room to grieve", "strategy": strategy}


def _ers(text: str) -> dict:
    return {"response": text}


def _audit(fault: str | None = None, correction: str | None = None) -> dict:
    audit = {"checks": [{"stage": s, "passed": s != fault} for s in STAGES], "earliest_failure": fault}
    if correction is not None:
        audit["correction"] = correction
    return audit


def _run(script: dict[str, list], dialogue, **config):
    backend = ScriptedBackend(script)
    settings = {"reflection": True, "max_refinements": 2, "rag": False, "use_cae": False, "max_attempts": 1}
    config = PipelineConfig(**{**settings, **config})
    assert config.stages() == STAGES
    [trace] = Pipeline(config, backend).run([dialogue], progress=False)
    assert {role: left for role, left in backend.script.items() if left} == {}, "scripted answers never asked for"
    return trace


def _walk(trace) -> list[tuple[str, int]]:
    return [(s.role, s.iteration) for s in trace.steps]


def _prompt(trace, role: str, iteration: int) -> str:
    [step] = [s for s in trace.steps if (s.role, s.iteration) == (role, iteration)]
    return step.messages[-1]["content"]


def test_a_stage_faulted_twice_is_rerun_twice_and_the_final_pick_is_lexicographic(tiny_dialogues):
    script = {
        "asi": [ASI],
        "srp": [_srp("EX"), _srp("ER")],
        "ers": [_ers("reply 0"), _ers("reply 1"), _ers("reply 2")],
        "gra": [
            _audit("srp", "Comfort before you ask."),
            _audit("ers", "Name the piano."),
            _audit("asi", "Recheck the emotion."),  # max_refinements is spent: audited, never rerun
        ],
    }
    trace = _run(script, tiny_dialogues[0])
    assert trace.status == "ok" and all(s.valid for s in trace.steps)
    assert _walk(trace) == [
        ("asi", 0), ("srp", 0), ("ers", 0), ("gra", 0),
        ("srp", 1), ("ers", 1), ("gra", 1),  # rerun from the first fault; asi carried over
        ("ers", 2), ("gra", 2),  # the second refinement: from the second fault
    ]  # fmt: skip
    # Each restarted stage sees its previous answer and its own correction; a stage after it sees neither.
    assert f"Your previous answer: {json.dumps(_srp('EX'), separators=(',', ':'))}" in _prompt(trace, "srp", 1)
    assert f"{REVIEWER}Comfort before you ask." in _prompt(trace, "srp", 1)
    assert REVIEWER not in _prompt(trace, "ers", 1)
    second = _prompt(trace, "ers", 2)
    assert '"response":"reply 1"' in second and f"{REVIEWER}Name the piano." in second
    # passes per iteration (asi, srp, ers): 0 = TFT, 1 = TTF, 2 = FTT; passing earlier stages wins, so 1
    assert trace.final_iteration == 1
    assert trace.outputs["srp"] == _srp("ER") and trace.outputs["ers"] == _ers("reply 1")
    assert trace.outputs["gra"]["earliest_failure"] == "ers"  # the winning iteration's own audit


def test_an_invalid_audit_is_retried_recorded_and_never_reruns_blindly(tiny_dialogues):
    script = {
        "asi": [ASI],
        "srp": [_srp("EX")],
        "ers": [_ers("reply 0"), _ers("reply 1")],
        "gra": [
            _audit("ers", "Name the piano."),
            "Looks fine to me!",  # not JSON
            {"checks": [{"stage": "cae", "passed": False}], "earliest_failure": "cae"},  # cae did not run
        ],
    }
    trace = _run(script, tiny_dialogues[0], max_attempts=2)
    # one refinement is left, but an iteration without a valid audit has no fault to rerun from
    assert _walk(trace) == [("asi", 0), ("srp", 0), ("ers", 0), ("gra", 0), ("ers", 1), ("gra", 1)]
    audit = trace.steps[-1]
    assert not audit.valid and audit.attempts == 2
    assert audit.error.startswith("invalid output: field 'checks.0.stage'")
    assert audit.events[0].startswith("attempt 1: invalid output: not JSON")
    # the unaudited iteration passes nothing, so the audited one keeps the answer, fault and all
    assert trace.status == "ok" and trace.final_iteration == 0
    assert trace.outputs["ers"] == _ers("reply 0") and trace.outputs["gra"]["earliest_failure"] == "ers"


def test_a_first_audit_that_never_validates_keeps_the_first_pass_and_records_no_audit(tiny_dialogues):
    script = {"asi": [ASI], "srp": [_srp("EX")], "ers": [_ers("reply 0")], "gra": ['{"checks": [{"stage": "asi", "pa']}
    trace = _run(script, tiny_dialogues[0])
    assert _walk(trace) == [("asi", 0), ("srp", 0), ("ers", 0), ("gra", 0)]
    assert trace.steps[-1].error.startswith("invalid output: truncated JSON")
    assert trace.status == "ok" and trace.final_iteration == 0  # a broken reviewer does not fail the reply
    assert trace.outputs["ers"] == _ers("reply 0") and "gra" not in trace.outputs


@pytest.mark.parametrize("selection", ["best", "last"])
def test_a_rerun_that_breaks_is_left_out_of_the_final_pick(tiny_dialogues, selection):
    script = {
        "asi": [ASI],
        "srp": [_srp("EX"), _srp("ER")],
        "ers": [_ers("reply 0"), _ers("reply 1"), '{"response": "I am so sorry about the pi'],
        "gra": [_audit("srp", "Comfort first."), _audit("ers", "Name the piano.")],
    }
    trace = _run(script, tiny_dialogues[0], final_selection=selection)
    # the broken iteration 2 is not audited, and nothing reruns after it
    assert _walk(trace)[-2:] == [("gra", 1), ("ers", 2)]
    broken = trace.steps[-1]
    assert not broken.valid and broken.error.startswith("invalid output: truncated JSON")
    # 'last' takes the last complete iteration, not the broken one; 'best' picks 1 on its checks (TTF > TFT)
    assert trace.status == "ok" and trace.failure is None and trace.final_iteration == 1
    assert trace.outputs["srp"] == _srp("ER") and trace.outputs["ers"] == _ers("reply 1")


@pytest.mark.parametrize("correction", [None, "  \n "], ids=["absent", "whitespace"])
def test_a_blank_correction_still_tells_the_rerun_stage_what_to_do(tiny_dialogues, correction):
    script = {
        "asi": [ASI, {**ASI, "emotion": "fear"}],
        "srp": [_srp("EX"), _srp("EX")],
        "ers": [_ers("reply 0"), _ers("reply 1")],
        "gra": [_audit("asi", correction), _audit()],
    }
    trace = _run(script, tiny_dialogues[0])
    assert _walk(trace)[4:] == [("asi", 1), ("srp", 1), ("ers", 1), ("gra", 1)]
    # a blank line after the reviewer's words would leave the stage its old answer and no reason to change it
    assert f"{REVIEWER}the reviewer marked this stage as failed; reconsider your answer\n" in _prompt(trace, "asi", 1)
    assert trace.final_iteration == 1 and trace.emotion == "fear"  # the clean audit beats the faulted one
