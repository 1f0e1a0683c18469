"""The answers of a declared pipeline that a comparison scores besides the reply, named in its config's `answers:`.

A pipeline its user declares (ESCoT's: emotion → strategy → reply) answers fields TRACE's code does not know.
`answers:` names them by path, so the metrics stay generic:

    answers:
      label: strategy.strategy   # a classification answer in each trace: outputs[role][field]
      gold_label: strategy       # the test dialogue's field holding its gold label (`gold_label`)
      majority_from: train       # the split whose gold labels give the majority class (null: the test gold)
      text: emotion.emotion      # a free-text answer, compared with the reference system's by MiniLM cosine

Systems that answer the same thing in different roles (ESCoT's chain agents: `sr.strategy`; one agent writing the
whole chain: `chain.strategy`) are named by a list: each system reads the first path whose role it runs.

They become the `Sample` fields that the registry's label accuracy and answer similarity read
(`eval.metrics.registry`). A system none of whose traces answers the role has no such field, and is not scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from data_prep.dialogues import Dialogue
from distill.pipeline.trace import Trace

ROLE_FIELD = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_.-]+$"  # role.field
RolePaths = Optional[list[Annotated[str, StringConstraints(pattern=ROLE_FIELD)]]]


class AnswersSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: RolePaths = Field(None, description="role.field of a classification answer (a list: the first a system has)")
    gold_label: Optional[str] = Field(None, description="the test dialogue's field holding the gold label")
    majority_from: Optional[str] = Field(None, description="split whose gold labels give the majority class")
    text: RolePaths = Field(None, description="role.field of a free-text answer (a list: the first a system has)")

    @field_validator("label", "text", mode="before")
    @classmethod
    def _one_or_more(cls, paths: Any) -> Any:
        return [paths] if isinstance(paths, str) else paths


def gold_label(dialogue: Dialogue, field: str) -> Optional[str]:
    """The gold label named `field` of a dialogue: the Dialogue's attribute of that name, or a dotted path into
    one (``chain.strategy``: the key ``strategy`` of its ``chain`` mapping); None where the dialogue has none.
    The one place a comparison reads a gold label, so a dataset that stores it elsewhere changes only this."""
    return _text(_walk(dialogue, field))


def answer_of(trace: Trace, path: str) -> Optional[str]:
    """A trace's answer at ``role.field`` (its final outputs), as text; None where it has none."""
    return _text(_walk(trace.outputs, path))


def _walk(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def check_gold_field(spec: Optional[AnswersSpec], dialogues: Sequence[Dialogue], where: str) -> None:
    """A `gold_label` that no dialogue has is a misspelt field, not a dataset without labels: one line naming it."""
    if spec is None or spec.gold_label is None or not dialogues:
        return
    if all(gold_label(d, spec.gold_label) is None for d in dialogues):
        raise ValueError(f"{where}: answers.gold_label: no dialogue has a field '{spec.gold_label}'")


def answer_fields(
    spec: Optional[AnswersSpec],
    traces: Sequence[Trace],
    test: Sequence[Dialogue],
    reference: Optional[Sequence[Trace]],
    train: Optional[Sequence[Dialogue]] = None,
) -> dict[str, Optional[list]]:
    """The `Sample` fields of one system's declared answers on the test dialogues (its traces in test order);
    `reference`: the reference system's traces, None for the reference itself."""
    if spec is None:
        return {}
    fields: dict[str, Optional[list]] = {}
    if spec.label and spec.gold_label:
        fields["labels"] = _answers(traces, spec.label)
        fields["gold_labels"] = [gold_label(d, spec.gold_label) for d in test]
        fields["train_labels"] = [gold_label(d, spec.gold_label) for d in train] if train else None
    if spec.text:
        fields["answers"] = _answers(traces, spec.text)
        fields["reference_answers"] = _answers(reference, spec.text) if reference is not None else None
    return fields


def _answers(traces: Sequence[Trace], paths: Sequence[str]) -> Optional[list[Optional[str]]]:
    """Each trace's answer at the first of `paths` whose role some trace ran; None when no trace has any of them
    (the system does not answer it)."""
    for path in paths:
        role = path.split(".", 1)[0]
        if any(role in t.outputs for t in traces):
            return [answer_of(t, path) for t in traces]
    return None
