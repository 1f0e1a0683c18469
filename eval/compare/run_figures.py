"""What a system's traces say about how they were made: retries per role, the reflection figures, and the
quality checks (`distill.quality`: loops, copied exemplars, parroted rationales, echoes, non-replies).

Retries show how far a run strays from its configured temperatures (a retry may sample warmer, see
`retry_temperature`). The reflection figures say whether the audit did anything: how often it led to
a rerun, which stage it blamed (the stage a rerun restarts from, counted per audit, as the issue
describes MERG's Fig. 4), the mean selected iteration (MERG's Table 3) and how often the pick changed
the reply. `eval.compare.compare` stores both in report.json and `eval.compare.report` renders them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional

from data_prep.dialogues import Dialogue
from distill.pipeline.reflection import restart_stage
from distill.pipeline.trace import Trace
from distill.quality import QualityReport, check_replies, check_traces
from distill.roles.declared import REPLY_FIELD
from distill.roles.duties import is_gold_reply, reply_role
from distill.roles.roles import STAGE_ORDER
from distill.roles.schemas import GRAOutput
from eval.metrics.stats import mean_with_ci


def retries_per_role(traces: Sequence[Trace]) -> dict[str, Any]:
    """Per role: calls, calls that needed a retry, invalid-output retries and the backend's transport retries,
    with the run's retry rule (`retry_temperature`; null: the same settings)."""
    roles: dict[str, dict[str, int]] = {}
    for trace in traces:
        for step in trace.steps:
            row = roles.setdefault(step.role, {"calls": 0, "retried_calls": 0, "retries": 0, "transport_retries": 0})
            row["calls"] += 1
            row["retried_calls"] += step.attempts > 1
            row["retries"] += max(0, step.attempts - 1)
            row["transport_retries"] += step.transport_retries
    rules = sorted({t.config.get("retry_temperature") for t in traces}, key=str)
    return {"retry_temperature": rules[0] if len(rules) == 1 else rules, "roles": roles}


def _iteration0_reply(trace: Trace) -> Optional[str]:
    replies = (s.parsed[REPLY_FIELD] for s in trace.steps if s.iteration == 0 and s.valid and REPLY_FIELD in s.parsed)
    return next(replies, None)


def reflection_figures(traces: Sequence[Trace]) -> Optional[dict[str, Any]]:
    """The reflection figures of a run whose config turned reflection on; None when it did not."""
    if not any(t.config.get("reflection") for t in traces):
        return None
    audits = clean = 0
    blamed: Counter[str] = Counter()
    reran, selected, changed = [], [], []
    for trace in traces:
        stages = [s for s in STAGE_ORDER if any(step.role == s for step in trace.steps)]
        for step in trace.steps:
            if step.role != "gra" or not step.valid:
                continue
            audits += 1
            stage = restart_stage(GRAOutput.model_validate(step.parsed), stages)
            clean += stage is None
            blamed[stage] += stage is not None
        if trace.status != "ok":
            continue
        reran.append(float(any(s.iteration > 0 and s.role != "gra" for s in trace.steps)))
        selected.append(float(trace.final_iteration))
        changed.append(float(trace.response != _iteration0_reply(trace)))
    return {
        "audit_calls": sum(s.role == "gra" for t in traces for s in t.steps),
        "valid_audits": audits,
        "clean_audits": clean,
        "blamed": {s: blamed[s] for s in STAGE_ORDER if blamed[s]},
        "rerun_rate": mean_with_ci(reran),
        "mean_selected_iteration": mean_with_ci(selected),
        "reply_changed_by_pick": mean_with_ci(changed),
    }


def quality_rates(report: QualityReport, roles: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """role -> outputs checked and the share failing each check (`roles`: only these)."""
    rates, failing = report.rates(), Counter(role for _, role in report.failing())
    return {
        role: {"checked": report.checked[role], "rates": rates[role], "passed": report.checked[role] - failing[role]}
        for role in rates
        if roles is None or role in roles
    }


def trace_quality(traces: Sequence[Trace], own_reply: bool) -> dict[str, Any]:
    """The quality checks on a system's own outputs: the teacher's and the students' alike, so a reader sees
    a student's loop rate beside its teacher's. A reply fed from the data (`own_reply` False) is left out."""
    report = check_traces(traces, progress=False)
    return quality_rates(report, None if own_reply else [r for r in report.checked if not is_gold_reply(r)])


def reply_quality(replies: Sequence[str], dialogues: Sequence[Dialogue]) -> dict[str, Any]:
    """The reply checks that need no prompt, on bare replies (the human row)."""
    return quality_rates(check_replies(replies, dialogues))


def reply_rates(replies: Sequence[str], dialogues: Sequence[Dialogue]) -> dict[str, Any]:
    """The same checks as one row for any system, whatever role wrote its replies (a declared pipeline's `re`,
    `reply` or `chain`): replies checked, and the share failing each check, 0 where none did; a missing reply (a
    failed trace) counts as a non-reply."""
    report = check_replies(replies, dialogues)
    rates = report.rates().get(reply_role(), {})  # bare replies are checked as the built-in reply role's
    return {"checked": len(replies), "rates": {check: rates.get(check, 0.0) for check in ("loop", "echo", "non_reply")}}
