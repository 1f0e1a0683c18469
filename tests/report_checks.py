"""Checks on an `eval compare` report folder, shared by the tests that read one.

The full report (teacher from stored traces, a trained student, a generated base, judge, PPL, BERTScore) is
the README workflow's: its test runs the pipeline once and these checks read it, instead of a second run of
the same three systems.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


def numbers_in_tables(markdown: str) -> list[str]:
    """Numbers in table body cells, the system-name column excluded (headers are labels, not data)."""
    found, in_body = [], False
    for line in markdown.splitlines():
        if not line.startswith("|"):
            in_body = False
            continue
        if line.startswith("|---"):
            in_body = True
            continue
        if in_body:
            for cell in line.strip("|").split("|")[1:]:
                found += re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", cell)
    return found


def reads_as(stored: float, shown: str) -> bool:
    """`shown` is `stored` rounded to the decimals `shown` has (report.md rounds for reading)."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return f"{stored:.{decimals}f}" == shown


def json_numbers(value) -> set[float]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, (int, float)):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(json_numbers, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(json_numbers, value)) if value else set()
    return set()


def unbacked_numbers(markdown: str, report: dict) -> list[str]:
    """The numbers of report.md's tables that are no report.json value rounded."""
    stored = json_numbers(report)
    return [n for n in numbers_in_tables(markdown) if not any(reads_as(x, n) for x in stored)]


def assert_teacher_student_base_report(out: Path, n: int) -> None:
    """A report of a stored teacher run, a student on adapters and a generated base, every metric on."""
    for name in ("report.json", "report.md", "metrics.png", "confusion.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    systems = {s["name"]: s for s in report["systems"]}
    assert list(systems) == ["teacher", "student", "base"] and report["test"]["n"] == n
    for s in systems.values():
        assert s["n"] == n and s["ppl"]["value"] > 1 and s["i_acc"]["ekman6"]["n"] == n
        assert s["bertscore"]["f1"]["n"] == n and s["cost"]["n"] == n
    assert systems["teacher"]["agreement"] is None and systems["student"]["agreement"]["emotion"]["n"] == n
    assert systems["student"]["same_outputs_as"] is None
    assert systems["student"]["cost"]["peak_rss_mb"] > 100 and systems["teacher"]["cost"]["peak_rss_mb"] is None
    # the student used its compact prompts: far fewer prompt tokens than the prompted base
    student, base = (systems[s]["cost"]["prompt_tokens_per_dialogue"] for s in ("student", "base"))
    assert student < base
    emp = report["judge"]["results"]["student"]["aspects"]["empathy"]
    assert emp["win"] + emp["lose"] + emp["tie"] == emp["n"] == n
    markdown = (out / "report.md").read_text()
    assert len(numbers_in_tables(markdown)) > 50
    missing = unbacked_numbers(markdown, report)
    assert not missing, f"numbers in report.md that are no report.json value rounded: {missing[:5]}"
