"""Label answers by ranking (distill.backends.label_rank): scores against log-likelihoods computed by hand with one
full forward pass per label, contextual calibration, the option's refusals, and the pipeline end to end.

All on a random 2-layer llama with the real tokenizer (conftest's `tiny_model_dir`), in float32.
"""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from distill.backends.base import GenerationRequest, LabelRanking
from distill.backends.label_rank import (
    SCORES_EVENT,
    decodings_from_scores,
    label_slot,
    parse_scores_events,
    scores_event,
)
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.roles.declared import label_set
from distill.roles.roles import ROLES
from distill.roles.schemas import ASIDecision, PlanOutput, SRPOutput

MESSAGES = [{"role": "system", "content": "[asi]"}, {"role": "user", "content": "seeker: I lost my job today."}]
CONTENT_FREE = [{"role": "system", "content": "[asi]"}, {"role": "user", "content": "seeker: N/A"}]


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    from distill.backends.local import LocalBackend

    return LocalBackend(tiny_model_dir, dtype="float32", batch_size=4)


def hand_scores(backend, messages, answer_prefix: str, labels, closing: str) -> dict[str, float]:
    """Each label's log-likelihood from one plain forward pass over prompt + answer prefix + label + closing,
    summing log_softmax at the label's positions: no cache, no batch."""
    tok = backend.tokenizer
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + answer_prefix
    start = len(tok(text, add_special_tokens=False)["input_ids"])
    scores = {}
    for label in labels:
        full = tok(text + label + closing, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = backend.hf_model(torch.tensor([full])).logits[0].float().log_softmax(-1)
        scores[label] = sum(logp[j - 1, full[j]].item() for j in range(start, len(full)))
    return scores


def test_ranked_label_and_scores_match_a_full_forward_per_label(backend):
    labels = label_set(ROLES["asi"], "emotion")
    request = GenerationRequest(messages=MESSAGES, schema=ASIDecision, label_ranking=LabelRanking("emotion"))
    [result] = backend.generate([request])
    expected = hand_scores(backend, MESSAGES, '{"emotion":"', labels, '"}')
    slot = label_slot(ASIDecision.model_json_schema(), "emotion")
    with backend.activate(None):
        scores, _, _ = backend.label_ranker.scores(request, slot, {})
    assert scores == pytest.approx(expected, abs=1e-4)
    best = max(expected, key=expected.get)
    assert ASIDecision.model_validate_json(result.text).emotion == best
    assert result.completion_tokens == len(backend.label_ranker._continuation_ids('{"emotion":"', best + '"}'))
    assert any(e.startswith("label ranked (rank): emotion =") for e in result.events)


def test_a_label_after_generated_fields_is_scored_after_them(backend):
    """`srp`'s reasoning comes first: the label is scored after the JSON the answer has up to its opening quote."""
    slot = label_slot(SRPOutput.model_json_schema())
    request = GenerationRequest(messages=MESSAGES, schema=SRPOutput, label_ranking=LabelRanking("strategy"))
    with backend.activate(None):
        scores, _, _ = backend.label_ranker.scores(request, slot, {"reasoning": 'she said "no"'})
    prefix = '{"reasoning":"she said \\"no\\"","strategy":"'
    assert scores == pytest.approx(hand_scores(backend, MESSAGES, prefix, slot.labels, '"}'), abs=1e-4)


def test_a_label_before_other_fields_is_scored_up_to_the_next_field(backend):
    """`plan`'s goal comes first: its closing quote and the comma that ends its JSON pre-token are scored too."""
    slot = label_slot(PlanOutput.model_json_schema(), "goal")
    request = GenerationRequest(messages=MESSAGES, schema=PlanOutput, label_ranking=LabelRanking("goal"))
    with backend.activate(None):
        scores, _, _ = backend.label_ranker.scores(request, slot, {})
    assert scores == pytest.approx(hand_scores(backend, MESSAGES, '{"goal":"', slot.labels, '",'), abs=1e-4)


def test_calibration_subtracts_the_content_free_scores_once_computed(backend):
    labels = label_set(ROLES["asi"], "emotion")
    ranking = LabelRanking("emotion", calibrated=True, content_free=CONTENT_FREE)
    request = GenerationRequest(messages=MESSAGES, schema=ASIDecision, label_ranking=ranking)
    other = GenerationRequest(
        messages=[MESSAGES[0], {"role": "user", "content": "seeker: My dog ran away."}],
        schema=ASIDecision,
        label_ranking=ranking,
    )
    results = backend.generate([request, other])
    raw = hand_scores(backend, MESSAGES, '{"emotion":"', labels, '"}')
    free = hand_scores(backend, CONTENT_FREE, '{"emotion":"', labels, '"}')
    expected = {label: raw[label] - free[label] for label in labels}
    with backend.activate(None):
        scores, _, _ = backend.label_ranker.scores(request, label_slot(ASIDecision.model_json_schema()), {})
    assert scores == pytest.approx(expected, abs=1e-4)
    assert json.loads(results[0].text) == {"emotion": max(expected, key=expected.get)}
    assert "rank-calibrated" in results[0].events[-1]
    assert len(backend.label_ranker._content_free) == 1  # one content-free pass for both requests
    [line] = parse_scores_events(results[0].events)  # the machine-readable line: raw and content-free apart
    assert line["field"] == "emotion" and line["drafted"] is None  # the whole answer is the label: no draft
    assert line["raw"] == pytest.approx(raw, abs=1e-4) and line["content_free"] == pytest.approx(free, abs=1e-4)
    assert decodings_from_scores(line)["rank-calibrated"] == max(expected, key=expected.get)


def test_the_scores_line_round_trips_and_yields_the_three_decodings():
    raw, free = {"a": -1.0, "b": -2.0, "c": -3.0}, {"a": -0.5, "b": -3.0, "c": -2.0}
    seconds = {"draft": 0.5, "rank": 0.25, "content_free": 0.0}
    event = scores_event("x", "c", raw, free, seconds)
    assert event.startswith(SCORES_EVENT) and "\n" not in event
    [line] = parse_scores_events(["other", event])
    assert line == {"field": "x", "drafted": "c", "raw": raw, "content_free": free, "seconds": seconds}
    assert decodings_from_scores(line) == {"greedy": "c", "rank": "a", "rank-calibrated": "b"}
    assert decodings_from_scores({**line, "content_free": None})["rank-calibrated"] is None


@pytest.mark.parametrize(
    "option, message",
    [
        ({"asi.mood": "rank"}, "'mood' is not an answer field"),
        ({"asi.reasoning": "rank"}, "'reasoning' is not a label of a fixed set"),
        ({"ers": "rank"}, "no label field"),
        ({"gra": "rank"}, "'gra' is not a pipeline stage"),
        ({"asi": "vote"}, "Input should be 'rank' or 'rank-calibrated'"),
    ],
)
def test_the_option_refuses_what_it_cannot_rank_in_one_line(option, message):
    with pytest.raises(ValidationError) as err:
        PipelineConfig(label_decoding=option)
    line = next(line for line in str(err.value).splitlines() if message in line)
    assert line


def test_an_api_backend_is_refused_when_the_pipeline_is_built():
    from distill.backends.openai_backend import OpenAIBackend

    backend = OpenAIBackend(model="gpt-4o", base_url="http://127.0.0.1:9/v1", api_key_env="TD_NO_SUCH_KEY_SET")
    with pytest.raises(ValueError) as err:
        Pipeline(PipelineConfig(label_decoding={"asi": "rank", "srp": "rank"}), backend)
    assert str(err.value) == "label_decoding (asi, srp): the openai backend cannot rank labels; the local one can"


PIPELINE = {
    "name": "ranked",
    "labels": {"mood": ["calm", "upset", "hopeful"], "move": ["Question", "Reflection of Feelings", "Summarize"]},
    "roles": [
        {"name": "mood", "title": "Mood", "answer": {"mood": {"label": "mood"}}, "task": "Name the mood."},
        {
            "name": "move",
            "title": "Mover",
            "inputs": ["mood"],
            "max_new_tokens": 24,
            "answer": {"why": {"text": 6}, "move": {"label": "move"}},
            "task": "Say why, then the move.",
        },
    ],
}


def test_the_pipeline_ranks_end_to_end_and_the_answers_validate(backend, tiny_dialogues):
    config = PipelineConfig(
        pipeline=PIPELINE, prompt_style="student", label_decoding={"mood": "rank-calibrated", "move": "rank"}
    )
    traces = Pipeline(config, backend).run(tiny_dialogues[:3], progress=False)
    for trace in traces:
        assert trace.status == "ok", trace.failure
        assert trace.outputs["mood"]["mood"] in PIPELINE["labels"]["mood"]
        assert trace.outputs["move"]["move"] in PIPELINE["labels"]["move"]
        for step in trace.steps:
            trace.roles[step.role].schema.model_validate(step.parsed)  # the trace's own pipeline's schema
            assert any(e.startswith("label ranked") for e in step.events) and step.latency_s > 0
    assert config.key_dict()["label_decoding"] == {"mood": "rank-calibrated", "move": "rank"}
    assert "label_decoding" not in PipelineConfig().key_dict()  # older runs keep their keys


def test_serve_ranks_per_request_or_by_the_server_flag(backend, tiny_model_dir):
    from fastapi.testclient import TestClient

    from distill.serving.serve import create_app

    schema = {"type": "json_schema", "json_schema": {"name": "Emotion", "schema": ASIDecision.model_json_schema()}}
    body = {"model": tiny_model_dir, "messages": MESSAGES, "max_tokens": 16, "response_format": schema}
    expected = hand_scores(backend, MESSAGES, '{"emotion":"', label_set(ROLES["asi"], "emotion"), '"}')
    for flag, extra in (("generate", {"label_decoding": "rank"}), ("rank", {})):
        with TestClient(create_app(backend, [tiny_model_dir], label_decoding=flag)) as client:
            reply = client.post("/v1/chat/completions", json={**body, **extra})
            assert reply.status_code == 200, reply.text
            answer = json.loads(reply.json()["choices"][0]["message"]["content"])
            assert answer == {"emotion": max(expected, key=expected.get)}
    with TestClient(create_app(backend, [tiny_model_dir])) as client:
        bad = [
            ({k: v for k, v in body.items() if k != "response_format"}, "needs response_format json_schema"),
            ({**body, "label_field": "mood"}, "'mood' is not an answer field"),
            ({**body, "label_decoding": "vote"}, "label_decoding"),
        ]
        for request, message in bad:
            reply = client.post("/v1/chat/completions", json={"label_decoding": "rank", **request})
            assert reply.status_code == 400 and message in reply.json()["error"]["message"], reply.text
