"""Does distillation pay? Learning curves of the students against fine-tuning on the same labels.

`python -m eval curve --config configs/eval/curve.yaml --out runs/curve` takes one teacher trace run
and, for N train conversations in `points` (the first N of the train split, so every point extends the
one before), builds each student's datasets, trains its adapters at the same token budget per role, and
scores every student, the emotion probe and the prompted base on the same test dialogues
(`eval compare`, so every difference has a paired CI). The students (`STUDENTS`):

- `traces`: the distilled pipeline (asi, cae, srp, ers adapters from the teacher's traces).
- `direct`: standard fine-tuning, the baseline: asi and ers trained on the data's gold answers with the
  dialogue alone as input, no teacher rationale and no upstream role.
- `rationale`: `traces` with a rationale-task twin for asi and srp rows (Distilling step-by-step); its
  cae and ers adapters are the `traces` student's, so it differs in exactly that.
- `teacher-reply` (opt-in): `traces` whose reply adapter learns the teacher's replies instead of the human
  ones; its asi, cae and srp are the `traces` student's: do the teacher's replies pay?
- `joint` (opt-in): the `traces` rows of all four roles in one adapter, at the four roles' summed token
  budget: is per-role LoRA worth four adapters?

`variants` adds students made like one of these with other dataset options or budget (the levers: class
balance, the rationale's share or source, more passes, the quality checks), or with other decoding alone
(`decoding`: per-role temperature, top-p, min-p), which runs the `like` student's own adapters untrained.
`task: emotion` trains and runs the emotion agent alone, every system's reply being the human one
(`oracle: {ers: gold}`, not scored): the I-ACC question at all N for a fraction of the cost.

This module runs the curve: each point's traces, each student's datasets and adapters, the point's compare, and
the prompted base once. The YAML it runs is `eval.curve.config`'s `CurveConfig`; the systems a point's compare
scores, and that compare's config, are built in `eval.curve.point_systems`.

Each point's datasets, each student's training and the compare (and the base, once) are stages of the project's
stage runner (`eval.runner`), their seconds and peak RSS in `<out>/stages.json`: a rerun reuses every dataset,
adapter, generated system and point report whose stage key holds (`distill.pipeline.stage_key`: everything it
reads), saying why in one line per stage; `eval.curve.curve_report`
turns the point reports into curve.json, curve.md and curve.png after every point.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import yaml

from distill.datasets.sft_tasks import JOINT, joint_dataset
from distill.pipeline.stage_key import PATH_FIELDS, digest, placed, prompt_fingerprint, read_key, regenerating
from distill.pipeline.store import RunInfo
from distill.pipeline.trace import Trace
from distill.roles.roles import DEFAULT_STAGES
from eval.compare.systems import CompareError
from eval.curve.config import CurveConfig
from eval.curve.point_systems import BASE, COMPARE_DIR, anchor_systems, base_system, point_compare, student_system
from eval.curve.students import Student
from eval.runner import Runner, Stage, key_change

# --- the traces of one point -----------------------------------------------------------------------


def first_conversations(dialogues: str, split: str, n: int) -> set[str]:
    """The conv_ids of the first `n` conversations of a split, in the split's own order."""
    from data_prep.loaders import limit_leaves_out, load_split

    whole = load_split(dialogues, split)
    order = list(dict.fromkeys(d.conv_id for d in whole))
    if n > len(order):
        raise CompareError(f"points: {n} train conversations asked, the {split} split has {len(order)}")
    picked = set(order[:n])
    if warning := limit_leaves_out([d for d in whole if d.conv_id in picked], whole, f"point {n}"):
        print(warning, file=sys.stderr)
    return picked


def point_traces(traces: Sequence[Trace], convs: set[str], n: int) -> list[Trace]:
    kept = [t for t in traces if t.dialogue.conv_id in convs]
    found = {t.dialogue.conv_id for t in kept}
    if len(found) < n:
        raise CompareError(
            f"points: {n} train conversations asked, the trace run covers {len(found)} of them; "
            "generate more traces (distill generate --limit) or lower the point"
        )
    return kept


# --- one student at one point --------------------------------------------------------------------


def build_datasets(
    runner: Runner,
    student: Student,
    traces: list[Trace],
    out: Path,
    config: CurveConfig,
    info: Optional[RunInfo],
    root: Optional[Path] = None,
) -> Path:
    """The student's role datasets under `out` (a point's `datasets-<name>`) in the curve's folder `root`, a stage
    keyed by `dataset_inputs`: rebuilt only when they changed."""
    from distill.datasets.sft_data import BuildReport, DatasetOptions, build_role_datasets, save_role_datasets

    chosen = dict(student.options)
    if student.rationale_task:
        chosen = {"rationale": config.rationale, "rationale_share": config.rationale_share, **chosen}
    # the human reply is every student's ers target unless the student names its own
    chosen = {"ers_target": "gold", "require_gold_emotion": config.require_gold_emotion, **chosen}
    options = DatasetOptions(**chosen)

    def build() -> None:
        report = BuildReport()
        roles = list(DEFAULT_STAGES if student.joint else student.trains)
        built = build_role_datasets(traces, roles, options, report, info)
        missing = [r for r in roles if r not in built]
        if missing:
            raise CompareError(f"student '{student.name}': no {', '.join(missing)} rows ({'; '.join(report.lines())})")
        if student.joint:
            joint_dataset(built, options.seed).save_to_disk(
                str(out / JOINT), num_shards={s: 1 for s in next(iter(built.values()))}
            )
        else:
            save_role_datasets(built, out, traces, info, options, report, Path(config.traces))

    def key() -> dict[str, Any]:
        return dataset_inputs(traces, asdict(options), list(student.trains), info, root)

    return runner.run(Stage(f"{out.parent.name}: {student.name}: datasets", out, build, key))


def dataset_inputs(
    traces: Sequence[Trace],
    options: dict[str, Any],
    roles: list[str],
    info: Optional[RunInfo],
    root: Optional[Path] = None,
) -> dict[str, Any]:
    """Everything a student's datasets are built from: the traces (their content), the options, the roles, the
    student prompts they are rendered with and the teacher run's record (the cards quote it), the paths it names
    placed in the run `root` (`distill.pipeline.stage_key.placed`) but for where its dialogues came from: a run
    moved keeps its record, which names where they were, and their content is the traces' (an import's record
    holds its files' sha256 too)."""
    record = info.to_json() if info else None
    if record is not None:
        record["source"] = {k: v for k, v in record["source"].items() if k not in PATH_FIELDS}
    return {
        "traces": digest([t.model_dump(mode="json") for t in traces]),
        "options": options,
        "roles": roles,
        "student prompts": prompt_fingerprint("student"),
        "teacher run": placed(record, root),
    }


def train_student(runner: Runner, student: Student, n: int, point: Path, config: CurveConfig) -> Path:
    """The student's adapters folder, a stage that checks each role's own key (`train_stale`): its own roles
    trained (or reused, or copied from another student's identical one), borrowed ones linked."""
    adapters = point / f"adapters-{student.name}"

    def train() -> Optional[str]:
        why = _train_roles(student, n, point, config)
        adapters.mkdir(parents=True, exist_ok=True)
        for role in student.borrows:
            link, target = adapters / role, (point / f"adapters-{student.lender}" / role).resolve()
            if not link.exists():
                link.symlink_to(target, target_is_directory=True)
        return "; ".join(f"{role}: {reason}" for role, reason in why.items()) or None

    return runner.run(Stage(f"{point.name}: {student.name}: train", adapters, train))


def _train_roles(student: Student, n: int, point: Path, config: CurveConfig) -> dict[str, str]:
    """Role -> why it was copied or trained, for the roles the student trains whose key changed."""
    from eval.curve.adapter_runs import copy_identical, train_stale

    adapters, datasets = point / f"adapters-{student.name}", point / f"datasets-{student.name}"
    budget = config.budget(n, student) * (len(DEFAULT_STAGES) if student.joint else 1)  # the same total tokens
    flags = {"max_tokens_budget": budget, **({} if student.seed is None else {"seed": student.seed})}
    options = dict.fromkeys(student.trains, flags)
    others = sorted(p for p in point.glob("adapters-*") if p != adapters)  # each beside its datasets-<name>
    learnt = [(p, point / f"datasets-{p.name.removeprefix('adapters-')}") for p in others]
    why = {}
    for role in student.trains:  # a role whose rows a variant's options left unchanged is not trained twice
        donor = copy_identical(adapters / role, datasets / role, options[role],
                               [(a / role, d / role) for a, d in learnt], config.train_config)  # fmt: skip
        if donor is not None:
            why[role] = f"copied from {donor}"
    # a sweep's adapters are read by the curve, not through their cards: no example answer decoded for each
    return why | train_stale(datasets, adapters, options, Path(config.train_config), card_example=False)


# --- the recipe ------------------------------------------------------------------------------------


def run_compare(point: Path, compare: dict[str, Any]) -> Optional[str]:
    """The point's report (`<point>/eval/report.json`), computed unless a report of this very config, over adapters
    that hold what they hold now, is there already (`eval.compare.reuse`): a retrained adapter keeps its path but not
    its report. Returns why it was computed, None when it was reused (a runner's stage that checks its own key)."""
    import argparse

    from eval.compare.cli_compare import run as compare_run
    from eval.compare.compare import REPORT_JSON, load_config, load_index, load_test_dialogues
    from eval.compare.reuse import report_changed, run_root

    path, report = point / "compare.yaml", point / COMPARE_DIR / REPORT_JSON
    path.write_text(yaml.safe_dump(compare, sort_keys=False))
    # The report's own record of its key decides, not compare.yaml: that file is written before the
    # compare runs, so a compare killed midway left the new compare.yaml beside the old config's report.
    config = load_config(str(path))
    if report.is_file():
        test = load_test_dialogues(config, str(path))
        stored = json.loads(report.read_text(encoding="utf-8"))
        why = report_changed(stored, config, test, load_index(config, test, str(path)), run_root(report.parent))
        if why is None:
            print(f"reusing {report}", flush=True)
            return None
        regenerating(str(report), why)
    else:
        why = "no report yet"
    if compare_run(argparse.Namespace(config=str(path), out=str(point / COMPARE_DIR))):
        raise CompareError(f"eval compare of {point} failed (its error is above); rerun to resume from here")
    return why


def run_point(
    runner: Runner, n: int, traces: list[Trace], info: Optional[RunInfo], config: CurveConfig, out: Path
) -> Path:
    """Datasets, adapters and the compare of one point, each a stage of `runner`; returns its report.json."""
    from eval.compare.compare import REPORT_JSON

    point = out / f"n{n}"
    point.mkdir(parents=True, exist_ok=True)
    systems = []
    for student in config.ordered_students():
        if student.trains:  # a decoding variant trains nothing: its datasets are its lender's
            build_datasets(runner, student, traces, point / f"datasets-{student.name}", config, info, out)
        adapters = train_student(runner, student, n, point, config)
        systems.append(student_system(student, adapters, config))
    # a generated system is reused exactly while its key holds, what its adapters hold included (`eval.compare.reuse`)
    compare = point_compare(point, systems + anchor_systems(n, out, config), config)
    runner.run(Stage(f"{point.name}: compare", point / COMPARE_DIR, lambda: run_compare(point, compare)))
    return point / COMPARE_DIR / REPORT_JSON


def generate_base(config: CurveConfig, out: Path, config_file: str) -> Optional[str]:
    """The prompted base, generated once for every point (a rerun reuses its stored traces); why it was generated,
    None when reused (a stage that checks its own key, `eval.compare.reuse`)."""
    from eval.compare.compare import load_index, load_test_dialogues
    from eval.compare.systems import CompareConfig, SystemSpec, generate_system

    compare = CompareConfig.model_validate(point_compare(out, [base_system(config)], config))
    test = load_test_dialogues(compare, config_file)
    before = read_key(out / BASE)
    made = generate_system(
        SystemSpec(**base_system(config)),
        test,
        load_index(compare, test, config_file),
        config_file,
        out / BASE,
        split=compare.split,
        root=out,
    )
    if made.source.startswith("reused"):
        return None
    return key_change(before, read_key(out / BASE)) or "traces of some test dialogues missing (resumed)"


def run_curve(config: CurveConfig, out: Path, config_file: str) -> dict[str, Any]:
    """Every point in turn, the curve report rewritten after each (so a partial run is readable)."""
    from tqdm.auto import tqdm

    from distill.pipeline.store import TraceStore
    from eval.curve.curve_report import write_curve

    store = TraceStore(config.traces)
    traces, _ = store.read()
    if not traces:
        raise CompareError(f"{config_file}: traces '{config.traces}' holds no traces")
    info = store.run_info()
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out)  # every point's stages, their seconds and peak RSS in <out>/stages.json
    if config.base:
        runner.run(Stage("base: generate", out / BASE, lambda: generate_base(config, out, config_file)))
    reports: dict[int, Path] = {}
    curve: dict[str, Any] = {}
    for n in tqdm(sorted(set(config.points)), desc="curve points", unit="point"):
        convs = first_conversations(config.dialogues, config.train_split, n)
        reports[n] = run_point(runner, n, point_traces(traces, convs, n), info, config, out)
        curve = write_curve(reports, out, config)
    return curve
