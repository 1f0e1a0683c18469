"""A classical anchor for the emotion role: logistic regression over sentence embeddings of the dialogue.

It trains in seconds on the train split's gold emotions and answers only the emotion, so it is a system
with an I-ACC and no reply. It shows what a user could pick instead of an LLM emotion agent. The input is
the dialogue, embedded with the exemplar index's encoder (MiniLM): the same text the LLM agents see, not
ED's situation prompt, which often names the emotion.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from data_prep.dialogues import Dialogue
from data_prep.taxonomy import EKMAN, to_ekman
from distill.pipeline.trace import Step, Trace

PROBE_BACKEND = "probe"


@dataclass
class EmotionProbe:
    """Multinomial logistic regression (L2, as scikit-learn's default C=1) fitted with L-BFGS in torch."""

    weights: np.ndarray  # (dim + 1, classes), the last row the bias
    classes: tuple[str, ...]

    @classmethod
    def fit(cls, features: np.ndarray, labels: Sequence[str], c: float = 1.0, max_iter: int = 200) -> EmotionProbe:
        import torch

        classes = tuple(label for label in EKMAN if label in set(labels))
        if not classes:
            raise ValueError("the probe's train split has no dialogues")
        if len(classes) == 1:  # nothing to separate: the probe answers the one emotion it has seen
            return cls(np.zeros((features.shape[1] + 1, 1)), classes)
        x = torch.tensor(_with_bias(features), dtype=torch.float64)
        y = torch.tensor([classes.index(label) for label in labels])
        w = torch.zeros(x.shape[1], len(classes), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w], max_iter=max_iter, line_search_fn="strong_wolfe")

        def loss():
            opt.zero_grad()
            # scikit-learn's objective, divided by n: mean cross-entropy + ||W||² / (2 C n), bias unpenalised
            value = torch.nn.functional.cross_entropy(x @ w, y) + (w[:-1] ** 2).sum() / (2 * c * len(y))
            value.backward()
            return value

        opt.step(loss)
        return cls(w.detach().numpy(), classes)

    def predict(self, features: np.ndarray) -> list[str]:
        scores = _with_bias(features) @ self.weights
        return [self.classes[i] for i in scores.argmax(axis=1)]


def _with_bias(features: np.ndarray) -> np.ndarray:
    return np.hstack([features, np.ones((len(features), 1), dtype=features.dtype)])


def probe_traces(
    train: Sequence[Dialogue], test: Sequence[Dialogue], embedder: str = "minilm"
) -> tuple[list[Trace], dict]:
    """Fit the probe on `train`'s gold emotions and answer `test`, one trace per test dialogue (asi only)."""
    from data_prep.retrieval import shared_embedder

    encoder = shared_embedder(embedder)
    start = time.perf_counter()
    probe = EmotionProbe.fit(encoder.encode([d.render_context() for d in train]), [to_ekman(d.emotion) for d in train])
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    predicted = probe.predict(encoder.encode([d.render_context() for d in test]))
    per_dialogue = (time.perf_counter() - start) / max(1, len(test))
    model = f"logistic regression over {embedder} embeddings"
    traces = [_trace(d, emotion, model, per_dialogue) for d, emotion in zip(test, predicted)]
    return traces, {"model": model, "train_dialogues": len(train), "fit_s": round(fit_s, 2)}


def _trace(dialogue: Dialogue, emotion: str, model: str, latency_s: float) -> Trace:
    answer = {"emotion": emotion, "reasoning": ""}
    step = Step(role="asi", messages=[], raw=emotion, parsed=answer, latency_s=latency_s)
    return Trace(
        key=f"{PROBE_BACKEND}:{dialogue.id}",
        dialogue=dialogue,
        backend=PROBE_BACKEND,
        model=model,
        prompt_version="-",
        prompt_style="student",
        config={"use_asi": True},
        steps=[step],
        outputs={"asi": answer},
    )
