"""The systems of `eval students`' one compare, all on the imported test split.

- the reference: the teacher's own chains on the test dialogues (the test import), costed at its API price;
- each student at each seed: its pipeline with the student prompts and its adapters;
- `prompted`: the untuned base with the teacher prompts of the per-role student's pipeline;
- `oracle`: the per-role student's reply role given the teacher's own upstream answers on the test dialogues
  (`oracle: {role: teacher}` for every stage before the reply, read from the test import), its adapters those of
  the first seed: how good its replies are when every upstream answer is right, a diagnostic, not a student.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from data_prep.config_file import first_error
from eval.compare.systems import CompareConfig, CompareError
from eval.students.config import ORACLE, PROMPTED, CompareSettings, StudentsConfig, StudentSpec, system_name


def _backend(config: StudentsConfig, adapters: Path | None = None) -> dict[str, Any]:
    backend = config.backend.model_dump()
    return {**backend, "adapters": str(adapters)} if adapters is not None else backend


def _pipeline(student: StudentSpec, config: StudentsConfig, style: str) -> dict[str, Any]:
    return {
        "pipeline": student.pipeline,
        "skip": student.skip,
        "prompt_style": style,
        "use_adapters": style == "student",
        "max_attempts": config.compare.max_attempts,
    }


def student_pipeline(student: StudentSpec, config: StudentsConfig) -> dict[str, Any]:
    """A student's pipeline as it runs: its student prompts, its adapters, its label decoding."""
    pipeline = _pipeline(student, config, "student")
    if student.label_decoding:  # only where set, so a student without it keeps the compare key (and the report) it had
        pipeline["label_decoding"] = dict(student.label_decoding)
    return pipeline


def student_system(student: StudentSpec, seed: int, adapters: Path, n: int, config: StudentsConfig) -> dict:
    pipeline = student_pipeline(student, config)
    ranked = ", ".join(f"{key} {mode}" for key, mode in student.label_decoding.items())
    about = f"{student.learns}; {n} train dialogues, to early stopping or the epoch cap, seed {seed}" + (
        f"; labels: {ranked}" * bool(ranked)
    )
    return {
        "name": system_name(student.name, seed, config),
        "about": about.lstrip("; "),
        "backend": _backend(config, adapters),
        "pipeline": pipeline,
    }


def oracle_system(student: StudentSpec, adapters: Path, reference: Path, config: StudentsConfig) -> dict:
    upstream = [r for r in student.roles if r != student.reply_role]
    pipeline = {**_pipeline(student, config, "student"), "oracle": dict.fromkeys(upstream, "teacher"),
                "oracle_traces": str(reference)}  # fmt: skip
    return {
        "name": ORACLE,
        "about": f"{student.name}'s {student.reply_role} adapter given the teacher's own {', '.join(upstream)} "
        "answers on the test dialogues: a diagnostic, not a student",
        "backend": _backend(config, adapters),
        "pipeline": pipeline,
    }


def prompted_system(student: StudentSpec, config: StudentsConfig) -> dict:
    return {
        "name": PROMPTED,
        "about": f"the untuned base with the teacher prompts of {Path(student.pipeline).name}: the prompted pipeline",
        "backend": _backend(config),
        "pipeline": _pipeline(student, config, "teacher"),
    }


def compare_config(config: StudentsConfig, reference: Path, trained: dict[str, dict[int, Path]], n: int) -> dict:
    """The `eval compare` config: the reference first (every agreement figure is against it)."""
    ref = config.reference
    systems = [{"name": ref.name, "traces": str(reference), "priced_as": ref.priced_as, "about": ref.about}]
    if config.prompted:
        systems.append(prompted_system(config.by_name(config.per_role_student), config))
    for name, seeds in trained.items():
        systems += [student_system(config.by_name(name), seed, path, n, config) for seed, path in seeds.items()]
    per_role = config.by_name(config.per_role_student) if config.oracle else None
    if per_role is not None and per_role.name in trained:  # its adapters: a run of other students has no oracle row
        systems.append(oracle_system(per_role, trained[per_role.name][config.seeds[0]], reference, config))
    settings = config.compare
    return {
        "dialogues": str(reference),
        "split": "test",
        "limit": settings.test_limit,
        "reference": ref.name,
        "systems": systems,
        **_settings(settings),
        "primary": _primary(config, {s["name"] for s in systems}),
    }


def check_compare(config: StudentsConfig) -> None:
    """The compare a run of every student builds passes eval compare's own checks before any stage, not after
    training: its primary two different systems (a student is its first seed's), on a metric this compare scores."""
    every = {s.name: dict.fromkeys(config.seeds, Path("adapters")) for s in config.students}
    try:
        CompareConfig.model_validate(compare_config(config, Path("imports/test"), every, config.n or 1))
    except ValidationError as err:
        raise CompareError(first_error(err, "compare.")) from None


def _settings(settings: CompareSettings) -> dict[str, Any]:
    """The metric settings, as `eval compare`'s keys."""
    return {
        "answers": settings.answers.model_dump(exclude_none=True) if settings.answers else None,
        "ppl": settings.ppl.model_dump() if settings.ppl else None,
        "bertscore": settings.bertscore.model_dump() if settings.bertscore else None,
        "relevance": settings.relevance.model_dump() if settings.relevance else None,
    }


def _primary(config: StudentsConfig, scored: set[str]) -> Optional[dict[str, Any]]:
    """The declared primary comparison, where this run scores both its systems (`--student` may train fewer); a
    student named with several seeds is its first seed's system."""
    primary = config.compare.primary
    if primary is None:
        return None
    students = {s.name for s in config.students}
    pair = [system_name(n, config.seeds[0], config) if n in students and n not in scored else n for n in primary.pair]
    if missing := [name for name in pair if name not in scored]:
        print(
            f"compare.primary: {missing[0]} is not scored in this run (--student); Holm covers every row",
            file=sys.stderr,
        )
        return None
    return {**primary.model_dump(), "pair": tuple(pair)}
