"""A classical anchor for a label role: logistic regression over sentence embeddings of the dialogue.

For the emotion role it trains in seconds on the train split's gold emotions and answers only the emotion, so
it is a system with an I-ACC and no reply. It shows what a user could pick instead of an LLM emotion agent. The
input is the dialogue, embedded with the exemplar index's encoder (MiniLM): the same text the LLM agents see,
not ED's situation prompt, which often names the emotion. `fit_and_predict` does the same for any label set
(ESCoT's strategies: benchmarks/label_decoding.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from data_prep.dialogues import Dialogue
from data_prep.taxonomy import EKMAN, to_ekman
from distill.pipeline.trace import Step, Trace
from distill.roles.duties import EMOTION_FIELD, RATIONALE_FIELD, emotion_role
from distill.roles.roles import ROLES

PROBE_BACKEND = "probe"


@dataclass
class LabelProbe:
    """Multinomial logistic regression (L2, as scikit-learn's default C=1) fitted with L-BFGS in torch."""

    weights: np.ndarray  # (dim + 1, classes), the last row the bias
    classes: tuple[str, ...]

    @classmethod
    def fit(
        cls,
        features: np.ndarray,
        labels: Sequence[str],
        c: float = 1.0,
        max_iter: int = 200,
        label_set: Sequence[str] = EKMAN,
    ) -> LabelProbe:
        """Fit on `labels`, each one of `label_set` (whose order the classes keep; ValueError for another)."""
        import torch

        if unknown := sorted(set(labels) - set(label_set)):
            raise ValueError(f"probe: train label '{unknown[0]}' is not one of {', '.join(label_set)}")
        classes = tuple(label for label in label_set if label in set(labels))
        if not classes:
            raise ValueError("the probe's train split has no dialogues")
        if len(classes) == 1:  # nothing to separate: the probe answers the one label it has seen
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


def fit_and_predict(
    train_texts: Sequence[str],
    train_labels: Sequence[str],
    test_texts: Sequence[str],
    label_set: Sequence[str] = EKMAN,
    embedder: str = "minilm",
) -> tuple[list[str], dict]:
    """Embed the texts, fit the probe on the train ones' labels and answer each test text; with what it was
    (the model, train texts, fit seconds, seconds per test text, embedding included)."""
    from data_prep.retrieval import shared_embedder

    encoder = shared_embedder(embedder)
    start = time.perf_counter()
    probe = LabelProbe.fit(encoder.encode(list(train_texts)), train_labels, label_set=label_set)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    predicted = probe.predict(encoder.encode(list(test_texts))) if len(test_texts) else []
    per_text = (time.perf_counter() - start) / max(1, len(test_texts))
    model = f"logistic regression over {embedder} embeddings"
    return predicted, {"model": model, "train_dialogues": len(train_texts), "fit_s": round(fit_s, 2),
                       "seconds_per_dialogue": per_text}  # fmt: skip


def probe_traces(
    train: Sequence[Dialogue], test: Sequence[Dialogue], embedder: str = "minilm"
) -> tuple[list[Trace], dict]:
    """Fit the probe on `train`'s gold emotions and answer `test`, one trace per test dialogue (asi only)."""
    predicted, info = fit_and_predict(
        [d.render_context() for d in train],
        [to_ekman(d.emotion) for d in train],
        [d.render_context() for d in test],
        embedder=embedder,
    )
    per_dialogue = info.pop("seconds_per_dialogue")
    traces = [_trace(d, emotion, info["model"], per_dialogue) for d, emotion in zip(test, predicted)]
    return traces, info


def _trace(dialogue: Dialogue, emotion: str, model: str, latency_s: float) -> Trace:
    role = emotion_role()
    answer = {EMOTION_FIELD: emotion, RATIONALE_FIELD: ""}
    step = Step(role=role, messages=[], raw=emotion, parsed=answer, latency_s=latency_s)
    return Trace(
        key=f"{PROBE_BACKEND}:{dialogue.id}",
        dialogue=dialogue,
        backend=PROBE_BACKEND,
        model=model,
        prompt_version="-",
        prompt_style="student",
        config={ROLES[role].switch: True},
        steps=[step],
        outputs={role: answer},
    )
