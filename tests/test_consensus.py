"""Consensus reranking (distill.pipeline.consensus): chrF, the pick, the backend that samples k times, and the
pipeline option that turns it on for a role."""

from __future__ import annotations

import json

import pytest

from distill.backends.base import GenerationRequest, GenerationResult
from distill.pipeline.config import PipelineConfig
from distill.pipeline.consensus import (
    SEED_STRIDE,
    ConsensusBackend,
    answer_text,
    chrf,
    consensus_pick,
    minilm_matrix,
)
from distill.pipeline.pipeline import Pipeline
from distill.roles.roles import ROLES

REPLIES = {  # sample j of the ers request answers REPLIES[j]: two alike, one off, one not JSON
    0: "Bananas orbit the quiet moon at noon.",
    1: "I'm so sorry to hear that, it sounds really hard.",
    2: "I'm so sorry to hear that, that sounds so hard.",
    3: "{not json",
}


def test_chrf_reads_characters_and_weighs_recall():
    assert chrf("I'm so sorry", "I'm so sorry") == pytest.approx(1.0)
    assert chrf("I'm so sorry", "Im so  sorry") < 1.0 and chrf("abc", "xyz") == 0.0
    assert chrf("so sorry", "so sorry to hear that") < chrf("so sorry to hear that", "so sorry")  # recall counts more
    assert chrf("", "anything") == 0.0


def test_chrf_averages_every_order_up_to_6():
    """'abcabc' against 'abcabd': n-gram precision = recall = 5/6, 4/5, 3/4, 2/3, 1/2 and 0 for n = 1..6, so
    chrF is their mean over all six orders (cutting the range short drops the 6-gram's 0)."""
    assert chrf("abcabc", "abcabd") == pytest.approx((5 / 6 + 4 / 5 + 3 / 4 + 2 / 3 + 1 / 2 + 0) / 6)
    assert chrf("abcabc", "abcabd", order=3) == pytest.approx((5 / 6 + 4 / 5 + 3 / 4) / 3)


def test_the_pick_is_the_sample_most_like_the_others():
    best, agreement = consensus_pick([REPLIES[0], REPLIES[1], REPLIES[2]])
    assert best in (1, 2) and 0 < agreement < 1
    assert consensus_pick(["only one"]) == (0, 1.0)
    assert consensus_pick(["Oh no.", "Oh no.", "Oh no."]) == (0, pytest.approx(1.0))  # a tie keeps the first
    assert consensus_pick(["so sad", "Oh no.", "Oh no.", "so sad"])[0] == 0
    assert answer_text('{"response": "Oh no."}') == "Oh no." and answer_text(REPLIES[3]) is None
    assert answer_text('{"response": " "}') is None  # says nothing: not a candidate


def test_minilm_consensus_keeps_the_sample_closest_in_meaning_to_the_others():
    """Two samples mean the same in different words; chrF, reading characters, keeps the long off one."""
    texts = [
        "I am so sorry to hear about your dog, that is heartbreaking.",
        "Losing a pet hurts so much, my condolences.",
        "I am so sorry to hear about your dog walking business and your heartbreaking hours, so sorry.",
    ]
    from data_prep.retrieval import shared_embedder

    vectors = shared_embedder("minilm").encode(texts, progress=False)
    cosine = vectors @ vectors.T
    assert minilm_matrix(texts) == pytest.approx(cosine, abs=1e-6)
    best, agreement = consensus_pick(texts, "minilm")
    assert best == int(((cosine.sum(axis=1) - 1.0) / 2).argmax()) and best != 2
    assert agreement == pytest.approx(float((cosine[best].sum() - cosine[best, best]) / 2), abs=1e-6)
    assert consensus_pick(texts, "chrf")[0] == 2
    with pytest.raises(ValueError, match="one of chrf, minilm"):
        ConsensusBackend(Seeded(), 4, similarity="bleu")


class Seeded:
    """Answers each request by its seed's sample number; records the requests it got."""

    name = model = "seeded"

    def __init__(self):
        self.requests: list[GenerationRequest] = []

    def generate(self, requests, progress=None):
        self.requests += requests
        out = []
        for r in requests:
            asi = issubclass(r.schema, ROLES["asi"].schema) if r.schema else False
            j = (r.seed or 0) // SEED_STRIDE
            text = json.dumps({"reasoning": "her dog died", "emotion": "sadness"}) if asi else REPLIES[j % 4]
            text = text if asi or j % 4 == 3 else json.dumps({"response": text})
            out.append(GenerationResult(text=text, prompt_tokens=10, completion_tokens=5 + j, latency_s=1.0))
            if progress:
                progress(1)
        return out

    def describe(self):
        return {"backend": self.name}


def test_the_backend_samples_each_sampled_request_k_times_and_counts_them_all():
    inner = Seeded()
    backend = ConsensusBackend(inner, samples=4)
    sampled = GenerationRequest(messages=[{"role": "user", "content": "hi"}], temperature=1.0, seed=0)
    greedy = GenerationRequest(messages=[{"role": "user", "content": "hi"}], temperature=0.0, seed=0)
    done: list[int] = []
    kept, once = backend.generate([sampled, greedy], progress=done.append)
    assert [r.seed for r in inner.requests] == [0, 1000, 2000, 3000, 0]  # the greedy one once
    assert sum(done) == 2  # progress in requests, not samples
    assert json.loads(kept.text)["response"] in (REPLIES[1], REPLIES[2])
    assert (kept.prompt_tokens, kept.completion_tokens, kept.latency_s) == (40, 5 + 6 + 7 + 8, 4.0)
    assert kept.events[-1].startswith("consensus: kept sample ") and "(3 usable" in kept.events[-1]
    assert once.completion_tokens == 5 and not once.events
    with pytest.raises(ValueError, match="at least 2"):
        ConsensusBackend(inner, samples=1)


@pytest.mark.parametrize("similarity", ["chrf", "minilm"])
def test_the_pipeline_option_reranks_the_role_it_names(tiny_dialogues, similarity):
    inner = Seeded()
    config = PipelineConfig(
        rag=False,
        use_cae=False,
        use_srp=False,
        temperatures={"ers": 1.0},
        consensus={"ers": 3},
        consensus_by=similarity,
    )
    [trace] = Pipeline(config, inner).run(tiny_dialogues[:1], progress=False)
    assert trace.status == "ok" and trace.response in (REPLIES[1], REPLIES[2])
    asi, ers = trace.steps
    assert asi.completion_tokens == 5 and ers.completion_tokens == 5 + 6 + 7  # three samples paid for
    assert "consensus: kept sample" in ers.events[-1] and f"mean {similarity} " in ers.events[-1]
    assert "consensus" in config.key_dict() and "consensus" not in PipelineConfig().key_dict()  # older runs resume
    assert ("consensus_by" in config.key_dict()) == (similarity != "chrf")  # the default keeps older keys


@pytest.mark.parametrize(
    "value, message", [({"ers": 1}, "2 to 16"), ({"ers": 17}, "2 to 16"), ({"xyz": 4}, "not a role")]
)
def test_a_bad_consensus_setting_is_refused(value, message):
    with pytest.raises(ValueError, match=message):
        PipelineConfig(consensus=value)
