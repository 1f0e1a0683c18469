"""The recipe of `eval students`: per student, import, datasets and training to convergence; then one compare.

Every stage runs through the project's stage runner (`eval.runner`), under the reuse rule of
`distill.pipeline.stage_key`: it is reused exactly when its inputs are unchanged, and otherwise made again with one
line saying which input changed; its seconds and peak RSS go to `<out>/stages.json`.

- **import** (`distill import`, in process): the first N train rows (written to `<out>/data/train-N.json`), the
  validation file and the test file, each keyed by the data's content, the mapping, the split and the pipeline.
- **datasets**: the student's role datasets, its train import as `train` and its validation import as
  `validation` (or `eval_fraction` of the train conversations held out), keyed by both runs' traces, the options,
  the roles and the student prompts (`eval.curve.curve.dataset_inputs`).
- **train** (`eval.curve.adapter_runs.train_stale`, one `python -m train` per student and seed): every epoch up to
  `num_train_epochs`, stopped by the validation loss, the best epoch kept; keyed by the dataset (both splits),
  every training setting (the seed, the patience, the epochs), the prompts and the base model.
- **forced** (a student-forced student, per seed: `eval.students.forced`): per fold, the upstream roles' datasets
  less the fold, their adapters and their answers on the fold's train dialogues; then the datasets its reply
  learns at that seed, whose upstream is those answers.
- **compare** (`eval.curve.curve.run_compare`): every student and seed, the reference, the prompted base and the
  oracle row on the test split, keyed by its config, the test dialogues, each system's inputs and its adapters.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from distill.pipeline.stage_key import digest, read_key
from eval.compare.systems import CompareError
from eval.runner import Runner, Stage, key_change
from eval.students.config import StudentsConfig, StudentSpec, read_rows


def train_subset(config: StudentsConfig, out: Path) -> tuple[Path, int]:
    """The train file the students import: the first N rows, written once (a rerun finds it unchanged)."""
    rows = read_rows(config.data.train)
    n = config.n or len(rows)
    if n > len(rows):
        raise CompareError(f"n: {n} train rows asked, {config.data.train} has {len(rows)}")
    if n == len(rows):
        return Path(config.data.train), n
    path = out / "data" / f"train-{n}.json"
    text = json.dumps(rows[:n], ensure_ascii=False)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path, n


def import_run(runner: Runner, stage: str, data: Path | str, mapping: str, run: Path, split: str,
               pipeline: Optional[str] = None) -> Path:  # fmt: skip
    """`distill import`, in process (as `pipeline`, a variant of the mapping's, where given), a stage that checks its
    own key (data, mapping, split, pipeline): it ran exactly when the key it leaves differs from the one before."""
    from distill.__main__ import main as distill

    def make() -> Optional[str]:
        before = read_key(run)
        argv = ["import", "--data", str(data), "--mapping", mapping, "--split", split, "--out", str(run)]
        argv += ["--pipeline", pipeline] if pipeline else []
        with contextlib.redirect_stdout(sys.stderr):
            if distill(argv):
                raise CompareError(f"{stage}: distill import of {data} with {mapping} failed (its error is above)")
        return key_change(before, read_key(run))

    return runner.run(Stage(stage, run, make))


def build_datasets(runner: Runner, student: StudentSpec, train: Path, validation: Optional[Path], out: Path,
                   config: StudentsConfig, root: Path, auxiliary: Optional[Path] = None) -> Path:  # fmt: skip
    """The student's role datasets in `out`, in the run folder `root`: train rows from its train import, validation
    rows from its validation import (or `eval_fraction` of the train conversations), and a multitask student's
    auxiliary rows from the links of its `auxiliary` import (`with_links`); rebuilt only when their inputs changed."""
    from distill.datasets.dataset_card import read_run
    from distill.datasets.sft_data import BuildReport, build_role_datasets, save_role_datasets, with_validation_run
    from eval.curve.curve import dataset_inputs

    options = config.dataset_options()

    @functools.cache
    def runs() -> tuple:  # read inside the stage (its seconds), once for its key and its build
        return read_run(train), read_run(validation) if validation else (None, None, None)

    def key() -> dict[str, Any]:
        (traces, info, _), (held, _, _) = runs()
        inputs = dataset_inputs(traces, asdict(options), student.roles, info, root)
        inputs["validation"] = digest([t.model_dump(mode="json") for t in held]) if held is not None else None
        if auxiliary is not None:  # only then, so the other students keep the key they had
            links, _, _ = read_run(auxiliary)
            inputs["auxiliary"] = {"traces": digest([t.model_dump(mode="json") for t in links]),
                                   "links": student.auxiliary.links, "share": student.auxiliary.share}  # fmt: skip
        return inputs

    def build() -> None:
        (traces, info, _), (held, held_info, _) = runs()
        report = BuildReport()
        built = build_role_datasets(traces, student.roles, options, report, info)
        if held is not None:
            where = f"{validation} (the validation import of student {student.name})"
            built = with_validation_run(built, held, held_info, options, report, where)
        if auxiliary is not None:
            built = with_links(built, student, auxiliary, options, report)
        for line in report.lines():
            print(line, file=sys.stderr)
        if missing := [r for r in student.roles if r not in built or not len(built[r]["validation"])]:
            raise CompareError(f"student {student.name}: role {missing[0]} has no train or validation rows "
                               f"({'; '.join(report.lines())})")  # fmt: skip
        save_role_datasets(built, out, traces, info, options, report, train)

    return runner.run(Stage(f"{student.name}: datasets", out, build, key))


def with_links(built: dict, student: StudentSpec, auxiliary: Path, options, report) -> dict:
    """The reply dataset with the auxiliary rows of its train dialogues (`sft_tasks.with_link_rows`), from the links'
    rows the auxiliary import gives (built as any student's are); the validation split left as it is."""
    from datasets import Dataset, DatasetDict, concatenate_datasets

    from distill.datasets.dataset_card import read_run
    from distill.datasets.sft_data import BuildReport, build_role_datasets
    from distill.datasets.sft_tasks import with_link_rows

    traces, info, _ = read_run(auxiliary)
    spec, role = student.auxiliary, student.reply_role
    link_sets = build_role_datasets(traces, spec.links, options, BuildReport(), info)
    links = {link: concatenate_datasets(list(link_sets[link].values())).to_list() for link in link_sets}
    rows, made = with_link_rows(built[role]["train"].to_list(), links, spec.share, options.seed)
    if not sum(made["rows"].values()):
        raise CompareError(f"student {student.name}: auxiliary: {auxiliary} answers no link of its train dialogues "
                           f"({', '.join(spec.links)}; do both mappings read the same ids?)")  # fmt: skip
    counts = report.counts[role]
    counts.auxiliary = {"traces": str(auxiliary), "mapping": spec.mapping, **made}
    counts.rows = {**counts.rows, "train": len(rows)}
    train = Dataset.from_list(rows, features=built[role]["train"].features)
    return {**built, role: DatasetDict({"train": train, "validation": built[role]["validation"]})}


def train_flags(student: StudentSpec, seed: int, config: StudentsConfig, role: str) -> dict[str, Any]:
    """The flags over the train YAML: to convergence (epochs, patience, no token budget), this seed, this base.
    A role a variant pipeline leaves as its base declares it trains under the base (the same key as there)."""
    from distill.roles.declared import variant_of

    variant = variant_of(student.pipeline)
    unchanged = variant is not None and variant[1] is not None and role not in variant[1]
    return {
        "model_name_or_path": config.backend.model,
        "pipeline": variant[0] if unchanged else student.pipeline,
        "num_train_epochs": float(config.num_train_epochs),  # a float, as it was: earlier adapters keep their key
        "early_stopping_patience": config.early_stopping_patience,
        "max_tokens_budget": 0,
        "seed": seed,
        "use_cpu": config.backend.device == "cpu",
        **config.train_flags,
    }


def train_adapters(runner: Runner, student: StudentSpec, datasets: Path, adapters: Path, seed: int,
                   config: StudentsConfig, donors: Sequence[tuple[Path, Path]] = (),
                   init: Optional[Path] = None) -> Path:  # fmt: skip
    """The student's adapters at this seed, trained (`train_stale`) only where a role's key changed. A role whose
    rows and settings an earlier student's adapter (`donors`: this seed's adapters and their datasets) was trained
    on is copied from it: a student that differs only in how it decodes, or in one role, trains nothing else. With
    `init` (two-stage) every role starts from that adapter, whose weights are then part of each role's key."""
    from eval.curve.adapter_runs import copy_identical, train_stale

    start = {"init_adapter": str(init)} if init is not None else {}
    flags = {role: {**train_flags(student, seed, config, role), **start} for role in student.roles}

    def train() -> Optional[str]:
        copied = {}
        for role in student.roles:
            donor = copy_identical(adapters / role, datasets / role, flags[role],
                                   [(a / role, d / role) for a, d in donors], config.train_config)  # fmt: skip
            if donor is not None:
                copied[role] = f"copied from {donor}"
        trained = train_stale(datasets, adapters, flags, Path(config.train_config), card_example=False)
        return "; ".join(f"{role}: {why}" for role, why in {**copied, **trained}.items()) or None

    return runner.run(Stage(f"{student.name} seed {seed}: train", adapters, train))


def init_adapter(config: StudentsConfig, student: StudentSpec, trained: dict[str, dict[int, Path]],
                 seed: int) -> Optional[Path]:  # fmt: skip
    """The adapter a two-stage student's roles start from: its `init_from` student's one adapter at this seed,
    trained earlier in this run (and reused, never trained again)."""
    if student.init_from is None:
        return None
    return trained[student.init_from][seed] / config.by_name(student.init_from).roles[0]


def import_student(runner: Runner, student: StudentSpec, config: StudentsConfig, out: Path,
                   train_file: Path) -> tuple[Path, Path]:  # fmt: skip
    """The student's imports (train, validation, a multitask student's auxiliary) and its datasets: the train import
    and the datasets folder."""
    runs = out / "imports" / student.name
    train = import_run(runner, f"{student.name}: import train", train_file, student.mapping, runs / "train",
                       "train", student.pipeline)  # fmt: skip
    validation = None
    if config.data.validation:
        mapping = student.validation_mapping or student.mapping
        validation = import_run(runner, f"{student.name}: import validation", config.data.validation, mapping,
                                runs / "validation", "validation", student.pipeline)  # fmt: skip
    auxiliary = None
    if student.auxiliary is not None:  # the same train dialogues, imported with the links' mapping
        auxiliary = import_run(runner, f"{student.name}: import auxiliary", train_file, student.auxiliary.mapping,
                               runs / "auxiliary", "train")  # fmt: skip
    datasets = build_datasets(runner, student, train, validation, out / "datasets" / student.name, config, out,
                              auxiliary)  # fmt: skip
    return train, datasets


def seed_datasets(runner: Runner, student: StudentSpec, train: Path, datasets: Path, seed: int,
                  config: StudentsConfig, out: Path) -> Path:  # fmt: skip
    """What the student trains on at this seed: its datasets, or a student-forced student's, whose reply rows read
    the answers of upstream adapters trained at this seed (`eval.students.forced`)."""
    if student.forced is None:
        return datasets
    from eval.students.forced import forced_datasets, upstream_roles

    flags = {role: train_flags(student, seed, config, role) for role in upstream_roles(student)}
    return forced_datasets(runner, student, train, datasets, seed, config, out, flags)


def run_students(config: StudentsConfig, out: Path) -> tuple[Path, dict[str, Any]]:
    """Every stage in turn; returns the compare's report.json and what `students.json` needs to be written."""
    from eval.students.systems import check_compare, compare_config

    check_compare(config)  # before any stage: nothing is written when the compare or a data file would be refused
    config.check_data()
    train_file, n = train_subset(config, out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out)
    reference = import_run(runner, "reference: import test", config.data.test, config.reference.mapping,
                           out / "imports" / "test", "test")  # fmt: skip
    trained: dict[str, dict[int, Path]] = {}
    learnt: dict[str, dict[int, Path]] = {}  # the datasets each student's adapters learnt, per seed
    for student in config.chosen():
        train, datasets = import_student(runner, student, config, out, train_file)
        trained[student.name], learnt[student.name] = {}, {}
        for seed in config.seeds:
            donors = [(trained[name][seed], learnt[name][seed]) for name in trained if name != student.name]
            learnt[student.name][seed] = data = seed_datasets(runner, student, train, datasets, seed, config, out)
            init = init_adapter(config, student, trained, seed)
            adapters = out / "adapters" / student.name / f"seed-{seed}"
            trained[student.name][seed] = train_adapters(runner, student, data, adapters, seed, config, donors, init)
    from eval.compare.compare import REPORT_JSON
    from eval.curve.curve import COMPARE_DIR, run_compare
    from eval.students.forced import fold_adapters

    compare = compare_config(config, reference, trained, n)
    runner.run(Stage("compare", out / COMPARE_DIR, lambda: run_compare(out, compare)))
    folds = {s.name: {seed: fold_adapters(out, s, seed) for seed in config.seeds} for s in config.chosen() if s.forced}
    ran = {"n": n, "adapters": trained, "stages": runner.records, "compare": compare, "folds": folds}
    return out / COMPARE_DIR / REPORT_JSON, ran
