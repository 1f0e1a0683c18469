"""The backend protocol: the one seam between the pipeline and whatever produces text.

A backend takes a batch of requests for ONE stage (all share the same adapter) and returns one
result per request, in order. The local transformers backend batches them into one `generate`; the
OpenAI-compatible backend runs them concurrently under a bound. The pipeline owns parsing,
validation and invalid-output retries, so every backend stays a thin transport.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable

from pydantic import BaseModel


@dataclass(frozen=True)
class LabelRanking:
    """Decode the answer's label field `field` by ranking every label of its set after the prompt
    (distill.backends.label_rank) instead of generating it. Only a backend with `ranks_labels` scores text."""

    field: str
    # Contextual calibration (Zhao et al. 2021): subtract each label's score after `content_free`, the same
    # prompt with its content replaced by "N/A".
    calibrated: bool = False
    content_free: Optional[list[dict[str, str]]] = None


@dataclass
class GenerationRequest:
    messages: list[dict[str, str]]
    schema: Optional[type[BaseModel]] = None  # constrain output to this JSON schema when given
    temperature: float = 0.0
    max_new_tokens: int = 128
    adapter: Optional[str] = None  # role adapter to use; None = base model
    seed: Optional[int] = None
    # Truncation of the sampled distribution; greedy decoding (temperature 0) ignores all three.
    top_p: float = 1.0  # nucleus: sample from the fewest most-likely tokens whose probability reaches top_p
    min_p: float = 0.0  # drop tokens below min_p x the most likely token's probability
    typical_p: float = 1.0  # locally typical: the tokens nearest the entropy in surprise, up to this mass
    # End the answer as a failed attempt as soon as it loops (the `loop` quality check on what is written
    # so far) rather than at max_new_tokens. Backends that stream tokens honour it; an API backend cannot.
    stop_loops: bool = False
    label_ranking: Optional[LabelRanking] = None  # rank a label field of `schema` rather than generate it

    def __post_init__(self) -> None:
        if self.label_ranking is not None and self.schema is None:
            raise ValueError(f"label_ranking ({self.label_ranking.field}) needs the answer's schema")
        if self.label_ranking is not None and self.label_ranking.calibrated and not self.label_ranking.content_free:
            raise ValueError("label_ranking: calibration needs the content-free messages")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p} (1 = no nucleus truncation)")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p} (0 = no min-p truncation)")
        if not 0 < self.typical_p <= 1:
            raise ValueError(f"typical_p must be in (0, 1], got {self.typical_p} (1 = no typical truncation)")

    def truncation(self) -> tuple[float, float, float]:
        """(top_p, min_p, typical_p) as they act: a greedy request samples nothing, so for it they are (1, 0, 1)."""
        return (self.top_p, self.min_p, self.typical_p) if self.temperature > 0 else (1.0, 0.0, 1.0)


TRUNCATED_EVENT = "input truncated"  # how an event says the prompt was cut to fit the model's context


@dataclass
class GenerationResult:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    transport_retries: int = 0  # HTTP-level retries (429/5xx/timeouts) the backend absorbed
    events: list[str] = field(default_factory=list)  # human-readable retry/fallback log for the trace
    error: Optional[str] = None  # set when the transport gave up; text is then ""
    gave_up: Optional[str] = None  # why the backend ended the answer early (`stop_loops`); a failed attempt


ProgressFn = Callable[[int], None]  # called with the number of requests just finished


@runtime_checkable
class Backend(Protocol):
    name: str  # "local", "openai", ...
    model: str  # model id recorded in traces and trace keys

    def generate(
        self, requests: Sequence[GenerationRequest], progress: Optional[ProgressFn] = None
    ) -> list[GenerationResult]: ...

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description for traces and cards. Must never contain secrets."""
        ...
