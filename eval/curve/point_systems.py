"""The systems of one learning-curve point, as its `eval compare` config lists them: each student's (its adapters,
its pipeline, the stages it reuses from its lender's generated traces), the probe's and the prompted base's, and that
compare config itself (`point_compare`).

Both `eval.curve.curve` (which runs a point) and the curve config's validator (which builds the smallest point's
systems to refuse what compare would refuse) build them here; this module reads the config through `CurveSettings`
alone, so it imports neither of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Protocol

from distill.datasets.sft_tasks import JOINT
from distill.roles.roles import DEFAULT_STAGES
from eval.compare.systems import SYSTEMS_DIR, BertScoreSpec, DialoguePplSpec, PplSpec
from eval.curve.students import EMOTION_ONLY, Student, reused_stages

BASE = "base"
PROBE = "probe"
COMPARE_DIR = "eval"  # a point's `eval compare` folder


class CurveSettings(Protocol):
    """What a point's systems read of the curve config (`CurveConfig` of eval/curve/config.py, whose validator
    calls this module: a type named here, not imported, keeps the import graph free of a cycle)."""

    dialogues: str
    index: Optional[str]
    train_split: str
    test_split: str
    test_limit: Optional[int]
    task: str
    backend: dict[str, Any]
    base: bool
    probe: bool
    ppl: Optional[PplSpec]
    dialogue_ppl: Optional[DialoguePplSpec]
    bertscore: Optional[BertScoreSpec]
    paper_reference: Optional[str]
    shares_by_size: Optional[int]

    def lender(self, student: Student) -> Student: ...


def system_run(point: Path, student: str) -> Path:
    """Where the point's compare keeps a student's generated traces."""
    return point / COMPARE_DIR / SYSTEMS_DIR / f"student-{student}"


def student_system(student: Student, adapters: Path, config: CurveSettings) -> dict[str, Any]:
    pipeline = {"prompt_style": "student", "use_adapters": True, "max_attempts": 2, **student.pipeline}
    reuse = reused_stages(student, config.lender(student))
    if reuse:  # the lender's system is generated first (`ordered_students`), in the same compare folder
        pipeline.update(reuse=list(reuse), reuse_from=str(system_run(adapters.parent, student.lender)))
    folders = {role: str(adapters / JOINT) for role in DEFAULT_STAGES} if student.joint else str(adapters)
    return {"name": f"student-{student.name}", "backend": {**config.backend, "adapters": folders}, "pipeline": pipeline}


def base_system(config: CurveSettings) -> dict[str, Any]:
    """The untuned base with the teacher's prompts and no adapters: the zero-shot control."""
    pipeline = {"prompt_style": "teacher", "use_adapters": False, "max_attempts": 2}
    if config.task == "emotion":
        pipeline.update(EMOTION_ONLY)
    return {"name": BASE, "backend": dict(config.backend), "pipeline": pipeline}


def anchor_systems(n: int, out: Path, config: CurveSettings) -> list[dict[str, Any]]:
    """A point's systems beside the students: the probe trained on its N dialogues, the base generated once."""
    systems: list[dict[str, Any]] = []
    if config.probe:
        systems.append({"name": PROBE, "probe": {"split": config.train_split, "limit": n}})
    if config.base:
        systems.append({"name": BASE, "traces": str(out / BASE)})
    return systems


def point_compare(point: Path, systems: list[dict], config: CurveSettings) -> dict[str, Any]:
    """The `eval compare` config of one point: every system on the same test dialogues."""
    return {
        "dialogues": config.dialogues,
        "split": config.test_split,
        "limit": config.test_limit,
        "index": config.index,
        "reference": systems[0]["name"],
        "systems": systems,
        "ppl": config.ppl.model_dump() if config.ppl else None,
        "bertscore": config.bertscore.model_dump() if config.bertscore else None,
        "paper_reference": config.paper_reference,
        "shares_by_size": config.shares_by_size,
        # only when set, so a curve without the guard keeps the compare config (and reuse) it had before it
        **({"dialogue_ppl": config.dialogue_ppl.model_dump()} if config.dialogue_ppl else {}),
    }
