"""Trace quality gates: named checks over role outputs, so what a teacher writes badly is caught, counted and
kept out of the student datasets.

    from distill.quality import check_traces
    report = check_traces(traces)          # a QualityReport
    report.rates()[role]["loop"]           # share of a role's outputs that loop
    print(report.summary())                # one line for a log or a quickstart

The checks and why each exists: `CHECKS` (distill.quality.checks); their thresholds: `QualityThresholds`.
"""

from distill.quality.audit import check_replies, check_trace, check_traces
from distill.quality.checks import CHECKS
from distill.quality.report import QUALITY_FILE, Finding, QualityReport, read_quality, summary_line
from distill.quality.thresholds import QualityThresholds

__all__ = [
    "CHECKS",
    "QUALITY_FILE",
    "Finding",
    "QualityReport",
    "QualityThresholds",
    "check_replies",
    "check_trace",
    "check_traces",
    "read_quality",
    "summary_line",
]
