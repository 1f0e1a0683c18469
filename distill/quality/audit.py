"""The checks applied to traces: which field of which role goes to which check, with what it is compared.

`check_traces` is the entry point for a run (datasets, `distill inspect`, an eval report); `check_replies`
runs the reply checks on bare replies (a system that wrote no trace, or the human gold replies).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from tqdm.auto import tqdm

from data_prep.dialogues import Dialogue
from distill.backends.base import Backend
from distill.pipeline.reflection import ungrounded_triggers
from distill.pipeline.trace import Step, Trace, roles_of
from distill.quality.checks import (
    echo,
    exemplar_copy,
    leaked_reference,
    loop,
    non_reply,
    parroted_rationale,
    repeated_phrase,
)
from distill.quality.duplicates import near_duplicates
from distill.quality.judge import judge_reason, judge_replies
from distill.quality.registry import (
    CHECKS,
    JUDGE_CHECK,
    REASONING_FIELD,
    TRIGGERS_FIELD,
    exemplar_copy_fields,
    is_reply_role,
    role_checks,
)
from distill.quality.relevance import off_dialogue
from distill.quality.reply_form import meta_commentary, prompt_echo, self_description, template_fragment
from distill.quality.report import Finding, QualityReport
from distill.quality.thresholds import QualityThresholds
from distill.roles.declared import REPLY_FIELD
from distill.roles.duties import reply_role
from distill.roles.roles import ROLES, RoleInput, RoleSpec, exemplar_texts

CHECKED_ROLES = tuple(r for r in ROLES if any(r in c.roles for c in CHECKS.values()))


def checked_roles(trace: Trace) -> tuple[str, ...]:
    """The built-in roles the checks read, then the trace's declared ones (distill.roles.declared): `loop` reads
    every text field of a declared role, and the reply checks read a declared reply (its `response` field). A
    declaration this version cannot read leaves its roles unchecked."""
    roles = trace.roles
    declared = tuple(r for r in trace.outputs if r in roles and roles[r].pipeline is not None)
    return CHECKED_ROLES + declared


def _reply_role(trace: Trace) -> str:
    """The role whose answer is the trace's reply (`Trace.response`): a built-in reply role's, else the last declared
    one's; a reply whose declaration this version cannot read is filed under the built-in reply role."""
    roles = trace.roles
    present = [r for r in checked_roles(trace) if r in trace.outputs and is_reply_role(r, roles)]
    if not present:
        return reply_role(roles)
    return present[0] if roles[present[0]].pipeline is None else present[-1]


def check_traces(
    traces: Sequence[Trace],
    thresholds: Optional[QualityThresholds] = None,
    progress: Optional[bool] = None,
    judge: Optional[Backend] = None,
) -> QualityReport:
    """Every check on every role output the traces hold (failed traces included: what they did answer).

    `progress` None shows a bar for runs of more than 200 traces. `judge`, a backend, adds `reply_judge` (a
    model asked whether each reply is one: distill.quality.judge); without it that check does not run.
    """
    t = thresholds or QualityThresholds()
    report = QualityReport(thresholds=t, traces=len(traces), roles=roles_of(traces), judged=judge is not None)
    show = len(traces) > 200 if progress is None else progress
    for trace in tqdm(traces, desc="quality checks", unit="trace", disable=not show, leave=False):
        for role in checked_roles(trace):
            if trace.outputs.get(role) is not None:
                report.checked[role] = report.checked.get(role, 0) + 1
        report.findings += check_trace(trace, t)
    replied = [tr for tr in traces if isinstance(tr.response, str)]
    report.findings += _run_level(replied, [tr.response for tr in replied], t, judge)
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
            reply_field = field == "response" and is_reply_role(role, roles)
            note(role, "loop", field, loop(text, t) or (repeated_phrase(text, t) if reply_field else None), text)
        step = _final_step(trace, role)
        checks = role_checks(role, roles)
        if "exemplar_copy" in checks and step is not None:
            shown = exemplar_texts(step.messages)  # situation, reply, situation, reply...
            for field in exemplar_copy_fields(roles[role]):
                text = out.get(field)
                if isinstance(text, str):
                    note(role, "exemplar_copy", field, exemplar_copy(text, shown, t, shown[0::2]), text)
        if "parroted_rationale" in checks and isinstance(out.get(REASONING_FIELD), str):
            text = out[REASONING_FIELD]
            reason = parroted_rationale(text, _instructions(roles[role], step, d), seeker, t)
            note(role, "parroted_rationale", REASONING_FIELD, reason, text)
        if "ungrounded_trigger" in checks:
            for span in _ungrounded(out, d, t):
                note(role, "ungrounded_trigger", TRIGGERS_FIELD, f"not a span of the seeker's turns: {span!r}", span)
        if is_reply_role(role, roles):  # filed under the reply: what a student would learn from a prompt holding it
            reason = leaked_reference(d.gold_response, [turn.text for turn in d.turns])
            note(role, "leaked_reference", "response", reason, d.gold_response or "")
        if is_reply_role(role, roles) and isinstance(out.get("response"), str):
            reply = out["response"]
            note(role, "echo", "response", echo(reply, seeker[-1] if seeker else "", t, seeker), reply)
            note(role, "non_reply", "response", non_reply(reply, t), reply)
            for check, reason in reply_form(reply, _own_instructions(roles[role], step, trace, d), t, roles):
                note(role, check, "response", reason, reply)
    return found


def reply_form(
    reply: str, instructions: str, t: QualityThresholds, roles: Mapping[str, RoleSpec]
) -> list[tuple[str, Optional[str]]]:
    """(check, reason) of the per-reply checks that a reply is one (distill.quality.reply_form); `roles`, its
    pipeline's, give the titles a writer speaking as a role would claim."""
    titles = [spec.title for spec in roles.values()]
    return [
        ("meta_commentary", meta_commentary(reply)),
        ("self_description", self_description(reply, titles)),
        ("prompt_echo", prompt_echo(reply, instructions, t)),
        ("template_fragment", template_fragment(reply)),
    ]


def check_replies(
    replies: Sequence[str],
    dialogues: Sequence[Dialogue],
    thresholds: Optional[QualityThresholds] = None,
    judge: Optional[Backend] = None,
    roles: Mapping[str, RoleSpec] = ROLES,
) -> QualityReport:
    """The reply checks that need no recorded prompt on bare replies, one per dialogue, filed under the reply role of
    `roles` (`reply_role`; prompt_echo reads that role's teacher prompt the dialogue alone would render), and
    leaked_reference on each dialogue: a reply's finding is keyed by its dialogue's id. exemplar_copy needs the
    retrieved cases, so it does not run."""
    if len(replies) != len(dialogues):
        raise ValueError(f"check_replies: {len(replies)} replies for {len(dialogues)} dialogues")
    t = thresholds or QualityThresholds()
    role = reply_role(roles)
    report = QualityReport(
        thresholds=t, traces=len(replies), checked={role: len(replies)}, roles=roles, judged=judge is not None
    )
    for reply, d in zip(replies, dialogues):
        last = next((turn.text for turn in reversed(d.turns) if turn.speaker == "seeker"), "")
        for check, reason in (
            ("loop", loop(reply, t) or repeated_phrase(reply, t)),
            ("echo", echo(reply, last, t, [turn.text for turn in d.turns if turn.speaker == "seeker"])),
            ("non_reply", non_reply(reply, t)),
            *reply_form(reply, _own_instructions(roles[role], None, None, d), t, roles),
        ):
            if reason:
                report.findings.append(Finding(d.id, d.id, role, check, REPLY_FIELD, reason, reply))
        if reason := leaked_reference(d.gold_response, [turn.text for turn in d.turns]):
            report.findings.append(Finding(d.id, d.id, role, "leaked_reference", REPLY_FIELD, reason, d.gold_response))
    keys = [(d.id, d, role) for d in dialogues]
    report.findings += _run_level_findings(keys, replies, t, judge)
    return report


def _run_level(
    traces: Sequence[Trace], replies: Sequence[str], t: QualityThresholds, judge: Optional[Backend]
) -> list[Finding]:
    keys = [(tr.key, tr.dialogue, _reply_role(tr)) for tr in traces]
    return _run_level_findings(keys, replies, t, judge)


def _run_level_findings(
    keys: Sequence[tuple[str, Dialogue, str]], replies: Sequence[str], t: QualityThresholds, judge: Optional[Backend]
) -> list[Finding]:
    """The checks that read a reply beside the run's others (near_duplicate, off_dialogue) or ask a model
    (reply_judge); `keys` holds each reply's (finding key, dialogue, role)."""
    dialogues = [d for _, d, _ in keys]
    found = {
        "near_duplicate": near_duplicates(replies, [d.id for d in dialogues], t),
        "off_dialogue": off_dialogue(replies, dialogues, t),
    }
    if judge is not None:
        found[JUDGE_CHECK] = [judge_reason(v) for v in judge_replies(judge, dialogues, replies)]
    return [
        Finding(key, d.id, role, check, "response", reason, reply)
        for check, reasons in found.items()
        for (key, d, role), reply, reason in zip(keys, replies, reasons)
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


def _instructions(spec: RoleSpec, step: Optional[Step], dialogue: Dialogue) -> str:
    """What the role was told, without the dialogue: the prompt the trace recorded, else its spec's task.

    The dialogue is cut out so that quoting the seeker is judged by the copy rule, not as prompt wording.
    """
    if step is None or not step.messages:
        return spec.task
    context = dialogue.render_context()
    return "\n".join(m.get("content", "").replace(context, " ") for m in step.messages)


def _own_instructions(spec: RoleSpec, step: Optional[Step], trace: Optional[Trace], dialogue: Dialogue) -> str:
    """What the role was told in its own words: `_instructions` without the earlier agents' answers (a cause the
    reply may rightly reword), the retrieved cases' text and the reference reply (exemplar_copy and a gold-guided
    reply's own business). A reply with no recorded prompt is read against the teacher prompt its dialogue alone
    renders (from the role's own spec: a declared role's, of its pipeline)."""
    if step is None or not step.messages:
        step = Step(role=spec.name, messages=spec.render(RoleInput(dialogue=dialogue), "teacher"))
    text = _instructions(spec, step, dialogue)
    turns = spec.context_turns  # a declared role may see the last turns only
    # a label ("ER", "anger") is left in: cut out of the text it would cut words apart, and the prompt lists it anyway
    outputs = [out for name, out in (trace.outputs.items() if trace else ()) if name != spec.name]
    upstream = [v for out in outputs for _, v in _texts(out) if len(v.split()) > 2]
    cuts = [dialogue.render_context(turns), *upstream, *exemplar_texts(step.messages), dialogue.gold_response or ""]
    for cut in sorted(cuts, key=len, reverse=True):  # the longest first: a short answer may sit inside a long one
        if cut.strip():
            text = text.replace(cut, " ")
    return text


def _ungrounded(out: dict[str, Any], dialogue: Dialogue, t: QualityThresholds) -> list[str]:
    spans = out.get(TRIGGERS_FIELD)
    spans = [s for s in spans if isinstance(s, str)] if isinstance(spans, list) else []
    return ungrounded_triggers(spans, dialogue, t.trigger_min_match)
