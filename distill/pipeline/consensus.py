"""Consensus reranking (minimum Bayes risk) of a sampled answer: sample it k times, keep the sample most like
the others.

At a high temperature a sampled reply is more varied and more often off; the sample that agrees most with its
siblings is the one least likely to be off, and needs no gold reply and no reward model to find. Similarity
(`SIMILARITIES`) is chrF (Popović 2015: character n-gram F-score, n up to 6, recall weighted by beta 2, whitespace
ignored), cheap enough for k(k − 1) comparisons per answer, or `minilm`: the cosine of the samples' MiniLM
sentence embeddings (the retrieval index's embedder), which reads meaning rather than characters, so it does not
favour the longest sample as chrF's recall does. The k samples are k requests, decoded together; the answer kept
carries the tokens and latency of all k, so a report's cost shows what the lever costs.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Optional

import numpy as np

from distill.backends.base import Backend, GenerationRequest, GenerationResult, ProgressFn

SEED_STRIDE = 1_000  # sample j of a request draws with seed + j * SEED_STRIDE; retries add 1 to the seed


def _char_ngrams(text: str, n: int) -> Counter:
    chars = "".join(text.split())
    return Counter(chars[i : i + n] for i in range(len(chars) - n + 1))


def chrf(hypothesis: str, reference: str, order: int = 6, beta: float = 2.0) -> float:
    """chrF in [0, 1]: the F-beta of character n-gram precision and recall, each averaged over n = 1..order (the
    orders both texts are long enough for)."""
    precisions, recalls = [], []
    for n in range(1, order + 1):
        hyp, ref = _char_ngrams(hypothesis, n), _char_ngrams(reference, n)
        if not hyp or not ref:
            continue
        common = sum((hyp & ref).values())
        precisions.append(common / sum(hyp.values()))
        recalls.append(common / sum(ref.values()))
    if not precisions:
        return 0.0
    p, r = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
    return 0.0 if p + r == 0 else (1 + beta**2) * p * r / (beta**2 * p + r)


def chrf_matrix(texts: Sequence[str]) -> np.ndarray:
    """chrF of every text (row, the hypothesis) against every other (column, the reference)."""
    return np.array([[chrf(t, o) if i != j else 0.0 for j, o in enumerate(texts)] for i, t in enumerate(texts)])


def minilm_matrix(texts: Sequence[str]) -> np.ndarray:
    """The cosine of every pair of texts' MiniLM sentence embeddings (unit rows, so a dot product)."""
    from data_prep.retrieval import shared_embedder

    vectors = shared_embedder("minilm").encode(texts, progress=False)
    return vectors @ vectors.T


SIMILARITIES: dict[str, Callable[[Sequence[str]], np.ndarray]] = {"chrf": chrf_matrix, "minilm": minilm_matrix}


def consensus_pick(texts: Sequence[str], similarity: str = "chrf") -> tuple[int, float]:
    """The index of the text with the highest mean similarity to the others (the first on a tie), and that mean."""
    if len(texts) < 2:
        return 0, 1.0
    matrix = SIMILARITIES[similarity](texts)
    scores = [(float(matrix[i].sum()) - float(matrix[i, i])) / (len(texts) - 1) for i in range(len(texts))]
    best = max(range(len(texts)), key=lambda i: (scores[i], -i))
    return best, scores[best]


def answer_text(raw: str) -> Optional[str]:
    """What a JSON answer says, its string values joined (the reply of `{"response": ...}`); None when it is not
    JSON or says nothing, so it cannot be a candidate."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return None
    words = " ".join(_strings(data)).strip()
    return words or None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


class ConsensusBackend:
    """A backend that samples each sampled request `samples` times through `inner` and returns the one result
    `consensus_pick` keeps, by `similarity`, among those that finished with a usable JSON answer. A greedy request
    is passed on once: its samples would be one answer k times."""

    def __init__(self, inner: Backend, samples: int, similarity: str = "chrf") -> None:
        if samples < 2:
            raise ValueError(f"consensus needs at least 2 samples, got {samples}")
        if similarity not in SIMILARITIES:
            raise ValueError(f"consensus similarity '{similarity}': one of {', '.join(SIMILARITIES)}")
        self.inner, self.samples, self.similarity = inner, samples, similarity
        self.name, self.model = inner.name, inner.model

    def generate(
        self, requests: Sequence[GenerationRequest], progress: Optional[ProgressFn] = None
    ) -> list[GenerationResult]:
        groups = [self._copies(r) for r in requests]
        flat = [copy for group in groups for copy in group]
        results = self.inner.generate(flat, progress=self._progress(groups, progress))
        out, start = [], 0
        for group in groups:
            out.append(self._keep_one(results[start : start + len(group)]))
            start += len(group)
        return out

    def _copies(self, request: GenerationRequest) -> list[GenerationRequest]:
        if request.temperature <= 0:
            return [request]
        seed = request.seed or 0
        return [replace(request, seed=seed + j * SEED_STRIDE) for j in range(self.samples)]

    @staticmethod
    def _progress(groups: list[list[GenerationRequest]], progress: Optional[ProgressFn]) -> Optional[ProgressFn]:
        """Reports whole requests: a request counts as done once as many samples finished as it has (in order)."""
        if progress is None:
            return None
        sizes, state = [len(g) for g in groups], {"samples": 0, "requests": 0}

        def report(finished: int) -> None:
            state["samples"] += finished
            done, covered = 0, 0
            for size in sizes:
                if covered + size > state["samples"]:
                    break
                covered, done = covered + size, done + 1
            if done > state["requests"]:
                progress(done - state["requests"])
                state["requests"] = done

        return report

    def _keep_one(self, results: list[GenerationResult]) -> GenerationResult:
        if len(results) == 1:
            return results[0]
        usable = [
            (j, text)
            for j, r in enumerate(results)
            if r.error is None and r.gave_up is None and (text := answer_text(r.text)) is not None
        ]
        if usable:
            best, agreement = consensus_pick([text for _, text in usable], self.similarity)
            kept = usable[best][0]
            note = f"consensus: kept sample {kept + 1} of {len(results)} ({len(usable)} usable, "
            note += f"mean {self.similarity} {agreement:.3f})"
        else:
            kept, note = 0, f"consensus: none of {len(results)} samples usable"
        chosen = results[kept]
        return replace(
            chosen,
            prompt_tokens=sum(r.prompt_tokens for r in results),
            completion_tokens=sum(r.completion_tokens for r in results),
            latency_s=sum(r.latency_s for r in results),  # the k decodes' cost, not the wall time of one
            transport_retries=sum(r.transport_retries for r in results),
            events=[*(e for r in results for e in r.events), note],
        )

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()
