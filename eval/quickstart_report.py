"""The quickstart's closing lines, read from what its run left: `headline`, the result in one sentence (the
student's emotion accuracy against its teacher's, paired, and what the report's Holm table makes of it), and
`teacher_quality`, the teacher run's quality line (`distill inspect`) with a warning when most of its replies fail
the checks. `eval.quickstart` runs the stages and prints these after them.
"""

from __future__ import annotations

import json
from pathlib import Path

# Under this share of its replies passing every check, the teacher's replies are mostly not replies: the quickstart
# says so in one line (its student learns the human replies, so the run itself is not affected).
REPLY_PASS_WARNING = 0.5


def teacher_quality(run: Path) -> str:
    """The teacher run's quality line (`distill inspect`): what the checks found in the traces students learn from,
    the share of its replies that pass every check, and a warning line when that share is under
    `REPLY_PASS_WARNING`, naming the checks its replies fail most."""
    from distill.quality import read_quality, summary_line
    from distill.roles.duties import reply_role

    data = read_quality(run)
    if not data:
        return "teacher quality: not checked"
    line = f"teacher {summary_line(data)} (details: {run / 'quality.json'})"
    replies = data["roles"].get(reply_role())  # the quickstart's teacher runs the built-in pipeline
    if not replies or not replies["checked"]:
        return line
    passed, checked = replies["checked"] - replies["failed"], replies["checked"]
    line += (
        f"\nteacher replies passing every check: {passed}/{checked} ({passed / checked:.0%}); the student's replies "
        "do not come from them but from the human replies (gold guidance, `--ers-target gold`)"
    )
    if passed / checked < REPLY_PASS_WARNING:
        fired = sorted(((c["count"], name) for name, c in replies["checks"].items() if c["count"]), reverse=True)
        named = ", ".join(f"{name} {count}" for count, name in fired)
        line += f"\nwarning: most of the teacher's replies are not replies to the seeker (failed: {named})"
    return line


def headline(report_json: Path) -> str:
    """The result in one sentence: the student's emotion accuracy against its teacher's, paired, and whence."""
    report = json.loads(report_json.read_text()) if report_json.is_file() else {}
    pairs = report.get("paired") or []
    found = [p for p in pairs if p["metric"] == "i_acc" and set(p["pair"]) == {"student", "teacher"}]
    if not found or found[0]["diff"] is None:
        return "result: no paired student-vs-teacher emotion accuracy in the report"
    p = found[0]
    sign = 1 if p["pair"][0] == "student" else -1
    diff, low, high = (sign * p[k] for k in ("diff", "ci_low", "ci_high"))
    low, high = min(low, high), max(low, high)
    verdict = "the interval excludes 0" if low > 0 or high < 0 else "the interval includes 0: too few dialogues to tell"
    if (low > 0 or high < 0) and p.get("p_holm") is not None:
        family = sum(row.get("p_value") is not None and not row.get("primary") for row in pairs)
        verdict += _primary_verdict(p, family) if p.get("primary") else _holm_verdict(p, family)
    return (
        f"result: the distilled student's emotion accuracy minus its teacher's is {diff:+.2f} "
        f"(paired bootstrap 95% CI [{low:+.2f}, {high:+.2f}], n = {p['n']} test dialogues); {verdict}. "
        "The teacher here is the untuned model with TRACE's prompts; the student learned its emotions from that "
        "teacher's train traces, made while it was told the true emotion (gold-guided, STaR)."
    )


def _primary_verdict(row: dict, family: int) -> str:
    """The row is the report's one comparison declared before the run (configs/eval/sample.yaml's `primary`): it is
    tested alone, and Holm's adjustment covers the report's other rows."""
    from eval.compare.paired import ALPHA

    held = "holds" if row.get("survives_holm") else "does not hold"
    return (
        f"; it is the report's one primary comparison, declared before the run and tested alone: p "
        f"{row['p_value']:.3f}, so it {held} at {ALPHA} (Holm's adjustment covers the other {family} rows)"
    )


def _holm_verdict(row: dict, family: int) -> str:
    """What the report's own Holm-adjusted table says of the row: the interval alone is not a finding there."""
    from eval.compare.paired import ALPHA

    held = "holds" if row.get("survives_holm") else "does not hold"
    return (
        f", and Holm's adjustment over the report's {family} paired comparisons gives p {row['p_holm']:.3f}: the "
        f"difference {held} at a family-wise error rate of {ALPHA}"
        + ("" if row.get("survives_holm") else ", so report.md's paired table does not count it a finding")
    )
