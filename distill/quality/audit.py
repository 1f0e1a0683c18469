"""The checks applied to traces: which field of which role goes to which check, with what it is compared.

`check_traces` is the entry point for a run (datasets, `distill inspect`, an eval report); `check_replies`
runs the reply checks on bare replies (a system that wrote no trace, or the human gold replies).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

from tqdm.auto import tqdm

from data_prep.dialogues import Dialogue
from distill.pipeline.reflection import ungrounded_triggers
from distill.pipeline.trace import Step, Trace, roles_of
from distill.quality.checks import (
    CHECKS,
    echo,
    exemplar_copy,
    is_reply_role,
    leaked_reference,
    loop,
    non_reply,
    parroted_rationale,
)
from distill.quality.duplicates import near_duplicates
from distill.quality.report import Finding, QualityReport
from distill.quality.thresholds import QualityThresholds
from distill.roles.roles import ROLES, exemplar_texts

CHECKED_ROLES = tuple(r for r in ROLES if any(r in c.roles for c in CHECKS.values()))
_REASONING = "reasoning"


def checked_roles(trace: Trace) -> tuple[str, ...]:
    """The built-in roles the checks read, then the trace's declared ones (distill.roles.declared): `loop` reads
    every text field of a declared role, and the reply checks read a declared reply (its `response` field). A
    declaration this version cannot read leaves its roles unchecked."""
    roles = trace.roles
    declared = tuple(r for r in trace.outputs if r in roles and roles[r].pipeline is not None)
    return CHECKED_ROLES + declared


def _reply_role(trace: Trace) -> str:
    """The role whose answer is the trace's reply (`Trace.response`)."""
    return "ers" if "ers" in trace.outputs else [r for r in checked_roles(trace) if is_reply_role(r, trace.roles)][-1]


def check_traces(
    traces: Sequence[Trace], thresholds: Optional[QualityThresholds] = None, progress: Optional[bool] = None
) -> QualityReport:
    """Every check on every role output the traces hold (failed traces included: what they did answer).

    `progress` None shows a bar for runs of more than 200 traces.
    """
    t = thresholds or QualityThresholds()
    report = QualityReport(thresholds=t, traces=len(traces), roles=roles_of(traces))
    show = len(traces) > 200 if progress is None else progress
    for trace in tqdm(traces, desc="quality checks", unit="trace", disable=not show, leave=False):
        for role in checked_roles(trace):
            if trace.outputs.get(role) is not None:
                report.checked[role] = report.checked.get(role, 0) + 1
        report.findings += check_trace(trace, t)
    replied = [tr for tr in traces if isinstance(tr.response, str)]
    report.findings += _near_duplicates(replied, [tr.response for tr in replied], t)
    return report


def check_trace(trace: Trace, t: QualityThresholds) -> list[Finding]:
    """The text-level checks on one trace's final outputs (near_duplicate needs the run: `check_traces`)."""
    found: list[Finding] = []

    def note(role: str, check: str, field: str, reason: Optional[str], text: str) -> None:
        if reason:
            found.append(Finding(trace.key, trace.dialogue.id, role, check, field, reason, text))

    d = trace.dialogue
    seeker = [turn.text for turn in d.turns if turn.speaker == "seeker"]
    roles = trace.roles
    for role in checked_roles(trace):
        out = trace.outputs.get(role)
        if not isinstance(out, dict):
            continue
        for field, text in _texts(out):
            note(role, "loop", field, loop(text, t), text)
        step = _final_step(trace, role)
        if role in CHECKS["exemplar_copy"].roles:
            field = "response" if role == "ers" else _REASONING
            text = out.get(field)
            if isinstance(text, str) and step is not None:
                note(role, "exemplar_copy", field, exemplar_copy(text, exemplar_texts(step.messages), t), text)
        if role in CHECKS["parroted_rationale"].roles and isinstance(out.get(_REASONING), str):
            text = out[_REASONING]
            reason = parroted_rationale(text, _instructions(role, step, d), seeker, t)
            note(role, "parroted_rationale", _REASONING, reason, text)
        if role == "cae":
            for span in _ungrounded(out, d, t):
                note(role, "ungrounded_trigger", "triggers", f"not a span of the seeker's turns: {span!r}", span)
        if is_reply_role(role, roles):  # filed under the reply: what a student would learn from a prompt holding it
            reason = leaked_reference(d.gold_response, [turn.text for turn in d.turns])
            note(role, "leaked_reference", "response", reason, d.gold_response or "")
        if is_reply_role(role, roles) and isinstance(out.get("response"), str):
            reply = out["response"]
            note(role, "echo", "response", echo(reply, seeker[-1] if seeker else "", t), reply)
            note(role, "non_reply", "response", non_reply(reply, t), reply)
    return found


def check_replies(
    replies: Sequence[str], dialogues: Sequence[Dialogue], thresholds: Optional[QualityThresholds] = None
) -> QualityReport:
    """The ers checks that need no prompt (loop, echo, non_reply, near_duplicate) on bare replies, one per
    dialogue, and leaked_reference on each dialogue: a reply's finding is keyed by its dialogue's id."""
    if len(replies) != len(dialogues):
        raise ValueError(f"check_replies: {len(replies)} replies for {len(dialogues)} dialogues")
    t = thresholds or QualityThresholds()
    report = QualityReport(thresholds=t, traces=len(replies), checked={"ers": len(replies)})
    for reply, d in zip(replies, dialogues):
        last = next((turn.text for turn in reversed(d.turns) if turn.speaker == "seeker"), "")
        for check, reason in (
            ("loop", loop(reply, t)),
            ("echo", echo(reply, last, t)),
            ("non_reply", non_reply(reply, t)),
        ):
            if reason:
                report.findings.append(Finding(d.id, d.id, "ers", check, "response", reason, reply))
        if reason := leaked_reference(d.gold_response, [turn.text for turn in d.turns]):
            report.findings.append(Finding(d.id, d.id, "ers", "leaked_reference", "response", reason, d.gold_response))
    ids = [d.id for d in dialogues]
    for reply, d, reason in zip(replies, dialogues, near_duplicates(replies, ids, t)):
        if reason:
            report.findings.append(Finding(d.id, d.id, "ers", "near_duplicate", "response", reason, reply))
    return report


def _near_duplicates(traces: Sequence[Trace], replies: Sequence[str], t: QualityThresholds) -> list[Finding]:
    reasons = near_duplicates(replies, [tr.dialogue.id for tr in traces], t)
    return [
        Finding(tr.key, tr.dialogue.id, _reply_role(tr), "near_duplicate", "response", reason, reply)
        for tr, reply, reason in zip(traces, replies, reasons)
        if reason
    ]


def _texts(out: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """(field, text) for every string in an output, list items included (cae's triggers)."""
    for field, value in out.items():
        if isinstance(value, str):
            yield field, value
        elif isinstance(value, list):
            yield from ((f"{field}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str))


def _final_step(trace: Trace, role: str) -> Optional[Step]:
    """The step that produced the role's final output (a later iteration may have carried it over)."""
    final = trace.outputs.get(role)
    return next((s for s in reversed(trace.steps) if s.role == role and s.parsed == final), None)


def _instructions(role: str, step: Optional[Step], dialogue: Dialogue) -> str:
    """What the role was told, without the dialogue: the prompt the trace recorded, else the registry's task.

    The dialogue is cut out so that quoting the seeker is judged by the copy rule, not as prompt wording.
    """
    if step is None or not step.messages:
        return ROLES[role].task
    context = dialogue.render_context()
    return "\n".join(m.get("content", "").replace(context, " ") for m in step.messages)


def _ungrounded(out: dict[str, Any], dialogue: Dialogue, t: QualityThresholds) -> list[str]:
    spans = out.get("triggers")
    spans = [s for s in spans if isinstance(s, str)] if isinstance(spans, list) else []
    return ungrounded_triggers(spans, dialogue, t.trigger_min_match)
