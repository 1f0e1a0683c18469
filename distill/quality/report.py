"""What the quality checks found over a set of traces (`QualityReport`), and `quality.json`, its file.

This module is quality.json's one writer and reader. The file sits inside the trace run folder, beside
traces.jsonl and run.json, and holds per role and check: how many outputs failed, the rate, and one
example, plus the thresholds that were used.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from distill.quality.checks import CHECKS, role_checks
from distill.quality.thresholds import QualityThresholds
from distill.roles.roles import ROLES, RoleSpec
from distill.version import __version__

QUALITY_FILE = "quality.json"
FORMAT = 1
_EXAMPLE_CHARS = 160  # an example is for recognising the failure, not for reading the whole output


@dataclass(frozen=True)
class Finding:
    """One failed check on one role output: where (trace key, dialogue, role, field), why, and the text."""

    key: str
    dialogue_id: str
    role: str
    check: str
    field: str
    reason: str
    text: str

    def example(self) -> dict[str, str]:
        text = self.text if len(self.text) <= _EXAMPLE_CHARS else self.text[: _EXAMPLE_CHARS - 1] + "\u2026"
        return {"dialogue_id": self.dialogue_id, "field": self.field, "reason": self.reason, "text": text}


@dataclass
class QualityReport:
    """The findings over some traces, and how many outputs of each role were checked."""

    thresholds: QualityThresholds = field(default_factory=QualityThresholds)
    traces: int = 0
    checked: dict[str, int] = field(default_factory=dict)  # role -> outputs checked
    findings: list[Finding] = field(default_factory=list)
    # the checked traces' roles (their pipelines'): which checks read each
    roles: Mapping[str, RoleSpec] = field(default_factory=lambda: ROLES)
    judged: bool = False  # a judge model read the replies (`reply_judge`)

    def failing(self) -> dict[tuple[str, str], set[str]]:
        """(trace key, role) -> the checks that role's output failed: what a dataset builder filters on."""
        out: dict[tuple[str, str], set[str]] = defaultdict(set)
        for f in self.findings:
            out[(f.key, f.role)].add(f.check)
        return dict(out)

    def counts(self) -> dict[str, dict[str, int]]:
        """role -> check -> outputs that failed it (an output with two looping fields counts once)."""
        seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for f in self.findings:
            seen[f.role][f.check].add(f.key)
        return {
            role: {check: len(seen[role][check]) for check in role_checks(role, self.roles, self.judged)}
            for role in self.checked
        }

    def rates(self) -> dict[str, dict[str, float]]:
        """role -> check -> share of that role's checked outputs that failed it."""
        return {
            role: {check: n / self.checked[role] if self.checked[role] else 0.0 for check, n in by_check.items()}
            for role, by_check in self.counts().items()
        }

    def _examples(self) -> dict[tuple[str, str], Finding]:
        first: dict[tuple[str, str], Finding] = {}
        for f in self.findings:
            first.setdefault((f.role, f.check), f)
        return first

    def to_json(self) -> dict[str, Any]:
        counts, rates, examples = self.counts(), self.rates(), self._examples()
        failed = defaultdict(set)
        for f in self.findings:
            failed[f.role].add(f.key)
        roles = {
            role: {
                "checked": self.checked[role],
                "failed": len(failed[role]),
                "checks": {
                    check: {
                        "count": n,
                        "rate": round(rates[role][check], 4),
                        "example": examples[(role, check)].example() if (role, check) in examples else None,
                    }
                    for check, n in counts[role].items()
                },
            }
            for role in self.checked
        }
        return {
            "format": FORMAT,
            "traces": self.traces,
            "roles": roles,
            "checks": {name: {"roles": list(c.roles), "fields": c.fields, "why": c.why} for name, c in CHECKS.items()},
            "thresholds": self.thresholds.model_dump(),
            "trace_distill_version": __version__,
        }

    def table(self) -> list[str]:
        """The report as aligned text rows: role, check, count, rate and one example's reason."""
        rows = [("role", "check", "failed", "rate", "example")]
        examples = self._examples()
        for role, by_check in self.counts().items():
            for check, n in by_check.items():
                example = examples.get((role, check))
                why = f"{example.dialogue_id}: {example.reason} <- {_clip(example.text)}" if example else ""
                rows.append((role, check, f"{n}/{self.checked[role]}", f"{n / max(self.checked[role], 1):.1%}", why))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return [" ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]

    def summary(self) -> str:
        """One line: every check that fired, with its count and rate, or that none did."""
        return summary_line(self.to_json())

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / QUALITY_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)  # a reader sees the old file or the new one, never half of one
        return path


def _clip(text: str, width: int = 60) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "\u2026")


def summary_line(data: dict[str, Any]) -> str:
    """`QualityReport.summary` from a quality.json's content (what a later reader of the run has)."""
    fired = [
        f"{role} {check} {c['count']}/{r['checked']} ({c['count'] / r['checked']:.1%})"
        for role, r in data["roles"].items()
        for check, c in r["checks"].items()
        if c["count"]
    ]
    return f"quality ({data['traces']} traces): " + ("; ".join(fired) if fired else "no check failed")


def read_quality(run_dir: Path) -> Optional[dict[str, Any]]:
    """A run's quality.json as written by `QualityReport.write`; None when `distill inspect` has not run on it."""
    path = Path(run_dir) / QUALITY_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: field 'format': not a quality report of format {FORMAT}")
    return data
