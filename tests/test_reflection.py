"""MERG's reflection rules without a model: what counts as a valid answer (`parse_output`), the final pick,
what a rerun sees, what the audit is asked, and the retry rule. The loop itself on a scripted backend is in
test_reflection_loop.py; the runs on the embedded model are in test_pipeline.py and test_faithfulness.py."""

from __future__ import annotations

import pytest

from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.pipeline.reflection import choose_final, parse_output
from distill.roles.roles import ROLES, RoleInput
from distill.roles.schemas import ASIOutput, ERSOutput, GRAOutput, PlanOutput, SRPOutput

STAGES = ["asi", "cae", "srp", "ers"]


def _audit(*failed: str) -> GRAOutput:
    checks = [{"stage": s, "passed": s not in failed} for s in STAGES]
    return GRAOutput(checks=checks, earliest_failure=failed[0] if failed else None)


def test_final_pick_is_lexicographic_and_a_tie_goes_to_the_earlier_iteration():
    # iteration 2 passes strictly more (fixes the reply): it wins, however late it comes. The old
    # score (checks − 0.5 per iteration) tied it with iteration 0 and kept iteration 0.
    assert choose_final({0: _audit("ers"), 1: _audit("srp"), 2: _audit()}, STAGES) == 2
    assert choose_final({0: _audit("ers"), 2: _audit()}, STAGES) == 2
    # passing an earlier stage beats passing any number of later ones
    assert choose_final({0: _audit("asi"), 1: _audit("cae", "srp", "ers")}, STAGES) == 1
    assert choose_final({0: _audit("cae"), 1: _audit("asi")}, STAGES) == 0
    # equal checks: the earliest iteration, whatever order the candidates come in
    assert choose_final({2: _audit("srp"), 0: _audit("srp"), 1: _audit("srp")}, STAGES) == 0
    # an iteration without a valid audit passes nothing
    assert choose_final({0: None, 1: _audit("asi", "cae", "srp")}, STAGES) == 1
    assert choose_final({0: None, 1: None}, STAGES) == 0
    with pytest.raises(ValueError):
        choose_final({}, STAGES)


def test_final_selection_last_takes_the_last_complete_iteration():
    assert choose_final({0: _audit(), 1: _audit("asi")}, STAGES, "last") == 1
    assert choose_final({0: _audit("ers"), 2: _audit("asi")}, STAGES, "last") == 2  # iteration 1 broke
    assert PipelineConfig(final_selection="last").final_selection == "last"
    with pytest.raises(ValueError, match="final_selection"):
        PipelineConfig(final_selection="average")


def test_rerun_prompt_carries_the_previous_answer_with_the_correction(tiny_dialogues):
    previous = SRPOutput(reasoning="the seeker is sad", strategy="EX")
    inp = RoleInput(dialogue=tiny_dialogues[0], previous=previous, correction="Comfort before you ask.")
    teacher = ROLES["srp"].render(inp, "teacher")[1]["content"]
    assert f"Your previous answer: {previous.model_dump_json()}" in teacher
    assert teacher.index("Your previous answer") < teacher.index("A reviewer found a problem")
    student = ROLES["srp"].render(inp, "student")[1]["content"]
    assert 'previous: {"strategy":"EX"}' in student and "fix: Comfort before you ask." in student
    first = ROLES["srp"].render(RoleInput(dialogue=tiny_dialogues[0]), "teacher")[1]["content"]
    assert "previous answer" not in first  # a first pass has nothing to carry


def test_audit_prompt_names_only_the_enabled_stages(tiny_dialogues):
    d = tiny_dialogues[0]
    asi, ers = ASIOutput(reasoning="cues", emotion="sadness"), ERSOutput(response="I am sorry.")
    system = ROLES["gra"].render(RoleInput(dialogue=d, upstream={"asi": asi, "ers": ers}), "teacher")[0]["content"]
    assert "- asi: the emotion fits" in system and "- ers: the reply is empathetic and specific\n" in system
    for absent in ("forecast", "plan", "strategy", "cause", "- cae", "- srp"):
        assert absent not in system, absent
    plan = PlanOutput(goal="comfort", stance="supportive", tactic="acknowledge_feeling", tone="warm")
    upstream = {"asi": asi, "plan": plan, "ers": ers}
    system = ROLES["gra"].render(RoleInput(dialogue=d, upstream=upstream), "teacher")[0]["content"]
    assert "- plan:" in system and "consistent with the plan" in system and "forecast" not in system


def test_retries_keep_traces_temperatures_unless_a_retry_temperature_is_set():
    messages = [{"role": "user", "content": "x"}]
    assert PipelineConfig().retry_temperature == 0.7  # a greedy local model would repeat an invalid answer
    same = Pipeline(PipelineConfig(retry_temperature=None), backend=None)
    first, retry = same._request(ROLES["asi"], messages, 0), same._request(ROLES["asi"], messages, 1)
    assert first.temperature == retry.temperature == 0.0 and retry.seed != first.seed
    assert same._request(ROLES["ers"], messages, 2).temperature == 0.5
    warm = Pipeline(PipelineConfig(retry_temperature=0.7), backend=None)
    assert warm._request(ROLES["asi"], messages, 0).temperature == 0.0
    assert warm._request(ROLES["asi"], messages, 1).temperature == 0.7
    assert Pipeline(PipelineConfig(retry_temperature=0.3), None)._request(ROLES["ers"], messages, 1).temperature == 0.5


def test_top_p_and_min_p_reach_sampled_requests_and_their_retries_only():
    messages = [{"role": "user", "content": "x"}]
    cut = Pipeline(PipelineConfig(top_p={"ers": 0.9, "asi": 0.5}, min_p={"ers": 0.05}), backend=None)
    for attempt in (0, 1, 2):  # a retry keeps them (and samples warmer, not narrower)
        ers = cut._request(ROLES["ers"], messages, attempt)
        assert (ers.temperature > 0, ers.top_p, ers.min_p) == (True, 0.9, 0.05)
    greedy = cut._request(ROLES["asi"], messages, 0)  # asi is greedy: nothing to cut
    assert (greedy.temperature, greedy.top_p, greedy.min_p) == (0.0, 1.0, 0.0)
    assert cut._request(ROLES["asi"], messages, 1).top_p == 0.5  # its retry samples at 0.7, and is cut
    assert cut._request(ROLES["srp"], messages, 1).top_p == 1.0  # roles without one are not cut
    plain = Pipeline(PipelineConfig(), backend=None)._request(ROLES["ers"], messages, 0)
    assert (plain.top_p, plain.min_p) == (1.0, 0.0)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"top_p": {"ers": 0}}, "ers: 0.0 is outside (0, 1]"),
        ({"top_p": {"ers": 1.2}}, "ers: 1.2 is outside (0, 1]"),
        ({"min_p": {"ers": 1}}, "ers: 1.0 is outside [0, 1)"),
        ({"min_p": {"ers": -0.5}}, "ers: -0.5 is outside [0, 1)"),
        ({"top_p": {"erss": 0.9}}, "'erss' is not a role (roles: asi, cae,"),
    ],
)
def test_bad_top_p_or_min_p_in_a_config_names_the_field_and_the_role(setting, message):
    with pytest.raises(ValueError) as refused:
        PipelineConfig(**setting)
    field = next(iter(setting))
    assert f"\n{field}\n" in f"\n{refused.value}" and message in str(refused.value)


def test_the_audit_runs_on_its_own_backend_when_the_config_names_one():
    plain = Pipeline(PipelineConfig(reflection=True), backend="the pipeline's")
    assert plain._reviewer == "the pipeline's"
    reviewer = {"type": "openai", "model": "a-stronger-reviewer", "base_url": "http://127.0.0.1:9/v1"}
    paired = Pipeline(PipelineConfig(reflection=True, reflection_backend=reviewer), backend="the pipeline's")
    assert (paired._reviewer.name, paired._reviewer.model) == ("openai", "a-stronger-reviewer")
    assert paired.config.key_dict()["reflection_backend"] == reviewer  # part of every trace key
    with pytest.raises(ValueError, match="(?s)reflection_backend.*needs a 'type', one of local, openai"):
        PipelineConfig(reflection=True, reflection_backend={"model": "x"})


def test_parse_output_rules():
    asi, gra = ROLES["asi"], ROLES["gra"]
    fenced = 'Sure!\n```json\n{"reasoning": "cues", "emotion": "fear"}\n```'
    assert parse_output(asi, fenced, ["asi"]).emotion == "fear"
    chatty = 'Here it is: {"reasoning": "cues", "emotion": "fear"} Hope that helps!'  # cut at the last '}'
    assert parse_output(asi, chatty, ["asi"]).emotion == "fear"
    for empty in ("   ", "```json\n```"):
        with pytest.raises(ValueError, match="^empty output$"):
            parse_output(asi, empty, ["asi"])
    with pytest.raises(ValueError, match="^not JSON"):
        parse_output(asi, "I think it is fear.", ["asi"])
    with pytest.raises(ValueError, match="field 'emotion'"):
        parse_output(asi, '{"reasoning": "x", "emotion": "joy"}', ["asi"])
    with pytest.raises(ValueError, match="truncated JSON"):
        parse_output(asi, '{"reasoning": "x", "emo', ["asi"])
    # the audit's stage names are an enum of the run's enabled stages
    with pytest.raises(ValueError, match="field 'checks.0.stage'"):
        parse_output(
            gra, '{"checks": [{"stage": "plan", "passed": false}], "earliest_failure": "plan"}', ["asi", "ers"]
        )
    with pytest.raises(ValueError, match="field 'earliest_failure'"):
        parse_output(gra, '{"checks": [], "earliest_failure": "survey"}', ["asi", "ers"])
    audit = parse_output(
        gra, '{"checks": [{"stage": "asi", "passed": true}], "earliest_failure": null}', ["asi", "ers"]
    )
    assert audit.earliest_failure is None
    schema = gra.schema_for("teacher", ["asi", "ers"]).model_json_schema()
    stage_enum = schema["$defs"][schema["properties"]["checks"]["items"]["$ref"].split("/")[-1]]["properties"]
    assert stage_enum["stage"]["enum"] == ["asi", "ers"]


def test_student_answers_the_decision_alone_and_traces_keep_one_schema():
    asi = ROLES["asi"]
    # a student answers with the decision; the trace holds the role's full schema, rationale empty
    lifted = parse_output(asi, '{"emotion": "fear"}', ["asi"], style="student")
    assert isinstance(lifted, asi.schema) and lifted.model_dump() == {"reasoning": "", "emotion": "fear"}
    with pytest.raises(ValueError, match="reasoning"):
        parse_output(asi, '{"emotion": "fear"}', ["asi"])  # the teacher must still reason
    with pytest.raises(ValueError):
        parse_output(asi, '{"reasoning": "x", "emotion": "fear"}', ["asi"], style="student")  # extra key
    assert asi.student_target(asi.schema(reasoning="cues", emotion="fear")).model_dump() == {"emotion": "fear"}
    cae = ROLES["cae"]  # roles without a student schema answer the same in both styles
    assert cae.schema_for("student") is cae.schema_for("teacher") is cae.schema
