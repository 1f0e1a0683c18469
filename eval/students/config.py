"""`configs/eval/escot-students.yaml`: which students `eval students` trains on one teacher's chains, and how it
scores them.

One YAML names the data files per split (what `distill import` reads), the students (each a declared pipeline and
the mapping that turns the train file into its trace run), the reference (the teacher's own chains on the test
split), the training (a train YAML, the most epochs, the early-stopping patience: no token budget) and the compare
settings. Its keys, mappings and pipelines are checked when the file loads, its data files and the compare it
builds when the run starts (`check_data`, `systems.check_compare`), so a bad key, a data file that will not import
or a pipeline without a reply role is one line before any stage runs and anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from data_prep.config_file import first_error, read_mapping
from data_prep.config_file import load_config as load_config_file
from distill.pipeline.label_decoding import LabelDecodingMode
from eval.compare.answers import AnswersSpec
from eval.compare.systems import (
    BertScoreSpec,
    CompareError,
    PplSpec,
    PrimaryComparison,
    RelevanceSpec,
    loadable_model,
)
from eval.students.chain_specs import AuxiliarySpec, ForcedSpec

# flags the recipe sets itself: training to convergence, one seed per run, no token budget
RECIPE_FLAGS = ("num_train_epochs", "early_stopping_patience", "seed", "max_tokens_budget", "output_dir",
                "dataset_name", "roles", "model_name_or_path")  # fmt: skip


# the report names of the prompted base's and the oracle's rows
ORACLE, PROMPTED = "oracle", "prompted"


def system_name(student: str, seed: int, config: StudentsConfig) -> str:
    """`traces` with one seed, `traces-s42` with several."""
    return student if len(config.seeds) == 1 else f"{student}-s{seed}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataFiles(_Strict):
    """The files `distill import` reads, one per split."""

    train: str = Field(description="the train chains (e.g. ESD-CoT's train_em_sr_re.json)")
    validation: Optional[str] = Field(
        None, description="the validation chains early stopping reads; null = hold out `eval_fraction` of train"
    )
    test: str = Field(description="the test chains: the dialogues every system is scored on, and the reference")

    def missing(self) -> Optional[str]:
        """One line naming the first split whose file is not there (checked when the run starts)."""
        for split in ("train", "validation", "test"):
            path = getattr(self, split)
            if path is not None and not Path(path).exists():
                hint = (
                    "; name another, or set `validation: null` and eval_fraction (--eval-fraction 0.1) to hold "
                    "out that share of the train conversations"
                    if split == "validation"
                    else ""
                )
                return f"data.{split}: no such file {path}{hint}"
        return None


class StudentSpec(_Strict):
    """One student: a declared pipeline and the mapping that makes the train file its trace run."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="the student's name in the report")
    pipeline: str = Field(description="the declared pipeline it runs (configs/pipelines/...)")
    mapping: str = Field(description="the import mapping of the train file (its `pipeline` is this one)")
    validation_mapping: Optional[str] = Field(
        None, description="the import mapping of the validation file, where its format differs; null = `mapping`"
    )
    learns: str = Field("", description="what its adapters learn, from whom (report.md shows it)")
    label_decoding: dict[str, LabelDecodingMode] = Field(
        default_factory=dict,
        description="how its label answers are decoded when it is scored (the pipeline's `label_decoding`, e.g. "
        "{sr: rank}); a student that differs from an earlier one only here takes that one's adapters, not trained",
    )

    auxiliary: Optional[AuxiliarySpec] = Field(
        None,
        description="multitask (step-by-step): its one adapter also learns the upstream links of another import of "
        "the same train dialogues, each under its own tag; it answers the reply alone at test; null = none",
    )
    init_from: Optional[str] = Field(
        None,
        description="two-stage (alpha-UMi): an earlier one-adapter student (e.g. multitask) whose adapter at the same "
        "seed every role of this one starts from, then trains on its own rows; null = a fresh LoRA",
    )
    forced: Optional[ForcedSpec] = Field(
        None,
        description="student-forced (scheduled sampling, cross-fitted): its reply role learns from its own upstream "
        "adapters' answers on the train dialogues, each fold's from adapters trained on the other folds; null = the "
        "teacher's upstream",
    )

    @cached_property
    def pipeline_config(self):
        """Its pipeline, less the roles its mapping skips (a `distill.pipeline.config.PipelineConfig`)."""
        from distill.pipeline.config import PipelineConfig

        return PipelineConfig(pipeline=self.pipeline, skip=self.skip)

    @cached_property
    def roles(self) -> list[str]:
        """The roles it trains: its pipeline's stages less those its mapping skips."""
        return self.pipeline_config.stages()

    @cached_property
    def skip(self) -> list[str]:
        from distill.imports.mapping import load_mapping

        return list(load_mapping(self.mapping).skip)

    @cached_property
    def reply_role(self) -> Optional[str]:
        """The role of those it trains that writes the pipeline's reply (a `response` answer field)."""
        from distill.quality.checks import is_reply_role

        return next((r for r in self.roles if is_reply_role(r, self.pipeline_config.roles)), None)

    def check(self) -> None:
        """The mappings read, name this student's pipeline (or the one it is a variant of), and it has a reply
        role: one line otherwise."""
        from distill.imports.mapping import load_mapping
        from distill.roles.declared import base_of

        for key in ("mapping", "validation_mapping"):
            path = getattr(self, key)
            if path is None:
                continue
            mapping = load_mapping(path)  # one line naming the file and the field
            if Path(mapping.pipeline).resolve() not in (Path(self.pipeline).resolve(), base_of(self.pipeline)):
                raise ValueError(f"{key} {path} imports pipeline {mapping.pipeline}, not {self.pipeline} "
                                 "nor the pipeline it extends")  # fmt: skip
        if self.reply_role is None:
            raise ValueError(f"pipeline {self.pipeline} has no reply role (no role answers a `response` field)")
        self._check_label_decoding()
        if self.auxiliary is not None:
            self._check_auxiliary()
        if self.forced is not None and len(self.roles) < 2:
            raise ValueError(f"forced: a student-forced student's reply reads its own upstream roles; this one trains "
                             f"{', '.join(self.roles)} alone")  # fmt: skip
        if self.forced is not None and self.init_from is not None:
            raise ValueError("forced: and init_from: together are not built: the fold adapters would start fresh")

    def _check_auxiliary(self) -> None:
        if self.roles != [self.reply_role]:
            raise ValueError(f"auxiliary: a multitask student trains one adapter, its reply role; this one trains "
                             f"{', '.join(self.roles)}")  # fmt: skip
        if not self.auxiliary.links:
            raise ValueError(f"auxiliary.mapping: {self.auxiliary.mapping} imports no link before the reply "
                             f"(pipeline {self.auxiliary.pipeline})")  # fmt: skip

    def _check_label_decoding(self) -> None:
        from distill.pipeline.config import PipelineConfig
        from distill.pipeline.label_decoding import split_key

        if untrained := [key for key in self.label_decoding if split_key(key)[0] not in self.roles]:
            raise ValueError(f"label_decoding: {untrained[0]}: not a role it trains ({', '.join(self.roles)})")
        try:  # the pipeline's own check: each key a role whose answer has that label field
            PipelineConfig(pipeline=self.pipeline, skip=self.skip, label_decoding=self.label_decoding)
        except ValidationError as err:
            raise ValueError(f"label_decoding: {first_error(err)}") from None


class ReferenceSpec(_Strict):
    """The teacher's own chains on the test split: the reference system and the test dialogues."""

    name: str = Field("teacher", description="its name in the report")
    mapping: str = Field(description="the import mapping of the test file (every link, the gold labels)")
    priced_as: Optional[str] = Field(None, description="the API model its chains are costed at (eval compare)")
    about: str = Field("the teacher's chains on the test split: the reference", description="report.md's line")


class BackendSpec(_Strict):
    """The local backend every student, the prompted base and the oracle run on."""

    type: Literal["local"] = "local"
    model: str = Field("smollm2-135m", description="the base model (an alias, a folder or a hub id)")
    device: Literal["cpu", "cuda"] = Field("cpu", description="where training and decoding run")
    dtype: str = Field("auto", description="auto, float32 or bfloat16")
    batch_size: int = Field(16, ge=1, description="prompts decoded together")

    @field_validator("model")
    @classmethod
    def _runnable(cls, model: str) -> str:
        return loadable_model(model)


class CompareSettings(_Strict):
    """What the one compare scores besides the reply (eval compare's own keys)."""

    answers: Optional[AnswersSpec] = Field(None, description="label and text answers to score (eval compare)")
    ppl: Optional[PplSpec] = Field(default_factory=PplSpec, description="perplexity settings; null = none")
    bertscore: Optional[BertScoreSpec] = Field(default_factory=BertScoreSpec, description="null = no BERTScore")
    relevance: Optional[RelevanceSpec] = Field(default_factory=RelevanceSpec, description="null = no relevance")
    test_limit: Optional[StrictInt] = Field(
        None, ge=1, description="score the first N test dialogues (--limit); null = all"
    )
    max_attempts: int = Field(2, ge=1, description="generations per step before it is recorded as failed")
    primary: Optional[PrimaryComparison] = Field(
        None,
        description="the one comparison the run is for, declared before it (two of its systems, by report name or "
        "student name: with several seeds, a student is its first seed's system; and a paired metric): tested "
        "alone at 0.05, out of Holm's family, which covers every other row; null = none",
    )


class StudentsConfig(_Strict):
    """Train each student to convergence on the same dialogues, then score them all in one compare."""

    data: DataFiles
    eval_fraction: Optional[float] = Field(
        None, gt=0, lt=1, description="with no validation file: the share of train conversations held out for it"
    )
    students: list[StudentSpec] = Field(min_length=1, description="the students, each trained per seed")
    student: Optional[list[str]] = Field(None, min_length=1, description="train only these of `students`; null = all")
    reference: ReferenceSpec
    n: Optional[StrictInt] = Field(None, ge=1, description="the first N rows of the train file; null = all")
    train_config: str = Field("configs/train/smollm2-cpu.yaml", description="the train YAML every student uses")
    num_train_epochs: StrictInt = Field(5, ge=1, description="the most epochs a role trains")
    early_stopping_patience: StrictInt = Field(1, ge=1, description="stop after this many epochs without a better loss")
    train_flags: dict[str, Any] = Field(default_factory=dict, description="other train flags over the train YAML")
    seeds: list[StrictInt] = Field(
        default_factory=lambda: [42], min_length=1, description="one training run per seed, each a different integer"
    )
    backend: BackendSpec = Field(default_factory=BackendSpec)
    compare: CompareSettings = Field(default_factory=CompareSettings)
    prompted: bool = Field(True, description="also score the untuned base with the teacher prompts")
    oracle: bool = Field(True, description="also score the per-role student's reply given the teacher's upstream")
    per_role_student: str = Field(
        "traces",
        description="the student whose pipeline the prompted base runs and whose reply role the oracle row runs",
    )

    @model_validator(mode="after")
    def _consistent(self) -> StudentsConfig:
        names = [s.name for s in self.students]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"students: name {dupes[0]} given twice")
        if dupes := sorted({seed for seed in self.seeds if self.seeds.count(seed) > 1}):
            raise ValueError(f"seeds: {dupes[0]} given twice (one training run per seed)")
        if unknown := [n for n in self.student or [] if n not in names]:
            raise ValueError(f"student: unknown student '{unknown[0]}' (students: {', '.join(names)})")
        if self.data.validation is None and self.eval_fraction is None:
            raise ValueError("data.validation: none given; name a validation file, or set eval_fraction (e.g. 0.1) "
                             "to hold out that share of the train conversations")  # fmt: skip
        if set(self.train_flags) & set(RECIPE_FLAGS):
            taken = sorted(set(self.train_flags) & set(RECIPE_FLAGS))
            raise ValueError(f"train_flags: {taken[0]} is set by the recipe (its own key, or --seeds, --n)")
        if not Path(self.train_config).is_file():
            raise ValueError(f"train_config: no such file {self.train_config}")
        for spec in self.students:
            try:
                spec.check()
            except ValueError as err:  # a pipeline or mapping refused: its first error, in one line
                why = first_error(err) if isinstance(err, ValidationError) else str(err)
                raise ValueError(f"students ({spec.name}): {why}") from None
        self._check_init_from()
        if (self.oracle or self.prompted) and self.per_role_student not in [s.name for s in self.students]:
            raise ValueError(f"per_role_student: '{self.per_role_student}' is not a student; "
                             "name one, or set oracle and prompted to false")  # fmt: skip
        primary, known = self.compare.primary, [*self.system_names(), *(s.name for s in self.students)]
        if primary and (unknown := [n for n in primary.pair if n not in known]):
            raise ValueError(f"compare.primary.pair: '{unknown[0]}' is not a system of this run "
                             f"({', '.join(self.system_names())})")  # fmt: skip
        return self

    def _check_init_from(self) -> None:
        """Each `init_from` names an earlier one-adapter student, chosen in this run too."""
        for n, spec in enumerate(self.students):
            if spec.init_from is None:
                continue
            earlier = {s.name: s for s in self.students[:n]}
            if spec.init_from not in earlier:
                raise ValueError(f"students ({spec.name}): init_from: '{spec.init_from}' is not a student above it "
                                 f"({', '.join(earlier) or 'none'})")  # fmt: skip
            if len(roles := earlier[spec.init_from].roles) != 1:
                raise ValueError(f"students ({spec.name}): init_from: {spec.init_from} trains {len(roles)} adapters "
                                 f"({', '.join(roles)}); name a one-adapter student (e.g. multitask)")  # fmt: skip
            if spec in self.chosen() and earlier[spec.init_from] not in self.chosen():
                raise ValueError(f"student: {spec.name} starts from {spec.init_from}'s adapter (init_from); "
                                 f"choose {spec.init_from} too")  # fmt: skip

    def check_data(self) -> None:
        """Each data file is there, reads, and fits every mapping that imports it, by the import's own checks on the
        rows it will import (each field a mapping names is in some row, each id printable): one line naming the
        split, before any stage. A JSON or JSONL file is read here; another format is left to `distill import`."""
        from distill.imports.chains import MappingError, check_data, check_ids
        from distill.imports.mapping import load_mapping

        if why := self.data.missing():
            raise CompareError(why)
        for split, path, mappings in self._imports():
            if not Path(path).is_file() or Path(path).suffix.lower() not in (".json", ".jsonl"):
                continue
            rows = read_rows(path, split)[: self.n if split == "train" else None]
            if split == "train":
                self._check_folds(len(rows))
            for name in mappings:
                mapping = load_mapping(name)
                if mapping.format not in (None, "json"):
                    continue
                try:
                    check_data(mapping, rows, name, path)
                    check_ids(mapping, rows, path)
                except MappingError as err:
                    raise CompareError(f"data.{split}: {err}") from None

    def _check_folds(self, rows: int) -> None:
        """Each student-forced student has a train dialogue for every fold."""
        for spec in self.chosen():
            if spec.forced is not None and rows < spec.forced.folds:
                raise CompareError(f"students ({spec.name}): forced.folds: {spec.forced.folds} folds of {rows} train "
                                   "dialogues; name fewer folds or more rows (n)")  # fmt: skip

    def _imports(self) -> Iterator[tuple[str, str, list[str]]]:
        """(split, data file, the mappings that import it) for each file the run imports."""
        chosen = self.chosen()
        auxiliary = [s.auxiliary.mapping for s in chosen if s.auxiliary is not None]
        yield "train", self.data.train, list(dict.fromkeys([*(s.mapping for s in chosen), *auxiliary]))
        if self.data.validation is not None:
            mappings = dict.fromkeys(s.validation_mapping or s.mapping for s in chosen)
            yield "validation", self.data.validation, list(mappings)
        yield "test", self.data.test, [self.reference.mapping]

    def system_names(self) -> list[str]:
        """Every system the compare may score, by its report name: the reference, the prompted base, each
        student at each seed, the oracle."""
        students = [system_name(s.name, seed, self) for s in self.students for seed in self.seeds]
        return [self.reference.name, *[PROMPTED] * self.prompted, *students, *[ORACLE] * self.oracle]

    def dataset_options(self):
        """The options every student's datasets are built with (a `distill.datasets.options.DatasetOptions`): with
        no validation file, `eval_fraction` of the train conversations held out for it."""
        from distill.datasets.options import DatasetOptions

        return DatasetOptions(eval_fraction=0.0 if self.data.validation else self.eval_fraction)

    def chosen(self) -> list[StudentSpec]:
        return [s for s in self.students if self.student is None or s.name in self.student]

    def by_name(self, name: str) -> StudentSpec:
        return next(s for s in self.students if s.name == name)

    def varies(self, student: StudentSpec) -> Optional[str]:
        """The earlier student this one is a variant of, which the report sets it against: the one with its
        pipeline (or the pipeline its own extends) and its mapping, decoding its labels as generated (a
        student-forced one differs from it in its reply's rows alone)."""
        from distill.roles.declared import base_of

        own = Path(student.pipeline).resolve()
        same = student.label_decoding or student.forced is not None
        pipelines = {own, base_of(student.pipeline)} if same else {base_of(student.pipeline)}
        for other in self.students[: self.students.index(student)]:
            plain = not other.label_decoding and other.forced is None and other.init_from is None
            if plain and other.mapping == student.mapping and Path(other.pipeline).resolve() in pipelines:
                return other.name
        return None


def read_rows(path: str, split: str = "train") -> list[Any]:
    """The rows of a JSON list or a JSON lines file (.jsonl, or a .json of one object a line, as `datasets` reads
    it), as written (a subset is written back exactly); one line naming the split and the file otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith(".jsonl") or text.lstrip().startswith("{"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = json.loads(text)
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON: the file named, in one line
        raise CompareError(f"data.{split}: {path}: cannot read its rows ({str(err).splitlines()[0]})") from None
    if not isinstance(rows, list):
        raise CompareError(f"data.{split}: {path} is not a JSON list of rows")
    return rows


def load_students_config(path: str, **overrides: Any) -> StudentsConfig:
    """The YAML, with the CLI's overrides (n, num_train_epochs, seeds, student, compare.test_limit) on top, checked
    whole; one line naming the key."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if (limit := overrides.pop("test_limit", None)) is not None:  # checked with the rest, as compare.test_limit
        compare = read_mapping(path, CompareError).get("compare") or {}
        overrides["compare"] = {**compare, "test_limit": limit} if isinstance(compare, dict) else compare
    return load_config_file(path, StudentsConfig, overrides, error=CompareError)
