"""The `student-forced` student of `eval students` (scheduled sampling, DAgger; issue 79): its reply role learns from
the upstream answers the student itself gives on the train dialogues, not the teacher's, cross-fitted so that no
upstream adapter answers a dialogue it learnt from. At test it runs as the per-role student does.

Per seed, each a stage of the recipe's runner (`eval.runner`), keyed by content:

- **folds** (`fold_split`): the conversations of the student's train rows, shuffled by the seed and dealt into
  `forced.folds` folds; `forced.json` records them;
- **fold k: datasets**: the upstream roles' datasets less fold k's conversations (their train split; validation as
  it is), keyed by the datasets they are cut from, the fold and its conversations;
- **fold k: train**: those roles' adapters, trained as any role is (`train_stale`: their rows and every setting,
  the seed among them);
- **fold k: answers**: those adapters run the student's own pipeline (its student prompts, its label decoding) up to
  the reply on fold k's train dialogues, keyed by what the adapters hold, the dialogues and the pipeline;
- **datasets**: what the student trains on at this seed: its upstream roles' datasets as built for it (the rows of
  the per-role student with its pipeline and mapping, so `train_adapters` copies those adapters, never trains them
  twice), and the reply's train rows rendered with each dialogue's fold answers as its upstream (a seeded `share`
  of the dialogues keeps the teacher's), keyed by the fold answers' content. A role whose fold answer failed keeps
  the teacher's answer there, counted in `forced.json`. The reply's validation rows keep the teacher's upstream:
  early stopping reads the per-role student's validation rows.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from eval.compare.systems import CompareError
from eval.runner import Runner, Stage
from eval.students.config import StudentsConfig, StudentSpec

FORCED_JSON, ANSWERS_FILE = "forced.json", "answers.jsonl"


def upstream_roles(student: StudentSpec) -> list[str]:
    """The roles whose answers the reply reads: every role it trains but the reply."""
    return [role for role in student.roles if role != student.reply_role]


def fold_split(conv_ids: Sequence[str], folds: int, seed: int) -> list[list[str]]:
    """The conversations, shuffled by `seed` and dealt into `folds` folds (sizes differ by one at most): each
    conversation in exactly one."""
    ids = sorted(set(conv_ids))
    if len(ids) < folds:
        raise ValueError(f"forced.folds: {folds} folds of {len(ids)} train conversations; name fewer folds or more "
                         "rows (n)")  # fmt: skip
    random.Random(seed).shuffle(ids)
    return [sorted(ids[k::folds]) for k in range(folds)]


def train_conversations(datasets: Path, roles: Sequence[str]) -> list[str]:
    """The conversations of the roles' train rows (held-out ones are validation's)."""
    from datasets import load_from_disk

    return sorted({conv for role in roles for conv in load_from_disk(str(datasets / role))["train"]["conv_id"]})


def fingerprints(dataset: Path) -> dict[str, str]:
    """Each split's fingerprint (a content hash `datasets` keeps with the saved rows)."""
    from datasets import load_from_disk

    return {split: rows._fingerprint for split, rows in load_from_disk(str(dataset)).items()}


def forced_root(out: Path, student: StudentSpec, seed: int) -> Path:
    """The folder of the student's stages at this seed: each fold's, and the datasets it trains on."""
    return out / "forced" / student.name / f"seed-{seed}"


def fold_adapters(out: Path, student: StudentSpec, seed: int) -> list[Path]:
    """Where each fold's upstream adapters of the student at this seed are."""
    return [forced_root(out, student, seed) / f"fold-{k}" / "adapters" for k in range(student.forced.folds)]


def forced_datasets(runner: Runner, student: StudentSpec, train: Path, base: Path, seed: int,
                    config: StudentsConfig, out: Path, flags: Mapping[str, Mapping[str, Any]]) -> Path:  # fmt: skip
    """The student's datasets at this seed, its `base` datasets' reply rows given the fold answers as upstream
    (`train`: its train import; `flags`: each upstream role's train flags at this seed)."""
    try:
        folds = fold_split(train_conversations(base, student.roles), student.forced.folds, seed)
    except ValueError as err:
        raise CompareError(f"students ({student.name}): {err}") from None
    answers = []
    for k, (held, adapters) in enumerate(zip(folds, fold_adapters(out, student, seed))):
        name, fold = f"{student.name} seed {seed}: fold {k}", adapters.parent
        data = fold_datasets(runner, name, base, fold / "datasets", upstream_roles(student), held, k)
        adapters = fold_train(runner, name, data, adapters, flags, config)
        answers.append(fold_answers(runner, name, student, adapters, train, held, fold / "answers", config))
    datasets = forced_root(out, student, seed) / "datasets"
    return forced_reply(runner, student, train, base, answers, datasets, seed, config)


def fold_datasets(runner: Runner, name: str, base: Path, folder: Path, roles: Sequence[str], held: Sequence[str],
                  fold: int) -> Path:  # fmt: skip
    """The roles' datasets of `base` less the held-out fold's conversations (their train split alone)."""
    from datasets import DatasetDict, load_from_disk

    def key() -> dict[str, Any]:
        return {"datasets": {role: fingerprints(base / role) for role in roles}, "fold": fold, "held out": list(held)}

    def build() -> None:
        out = set(held)
        for role in roles:
            splits = load_from_disk(str(base / role), keep_in_memory=True)
            train = splits["train"]
            train = train.select([i for i, conv in enumerate(train["conv_id"]) if conv not in out])
            if not len(train):
                raise CompareError(f"{name}: role {role} has no train rows outside fold {fold}; name fewer folds")
            kept = DatasetDict({"train": train, "validation": splits["validation"]})
            kept.save_to_disk(str(folder / role), num_shards={split: 1 for split in kept})

    return runner.run(Stage(f"{name}: datasets", folder, build, key))


def fold_train(runner: Runner, name: str, datasets: Path, adapters: Path, flags: Mapping[str, Mapping[str, Any]],
               config: StudentsConfig) -> Path:  # fmt: skip
    """The fold's upstream adapters, each trained (`train_stale`) only where its own key changed."""
    from eval.curve.adapter_runs import train_stale

    def train() -> Optional[str]:
        trained = train_stale(datasets, adapters, flags, Path(config.train_config), card_example=False)
        return "; ".join(f"{role}: {why}" for role, why in trained.items()) or None

    return runner.run(Stage(f"{name}: train", adapters, train))


def upstream_pipeline(student: StudentSpec, config: StudentsConfig):
    """The student's pipeline as it runs at test (`student_pipeline`), its reply skipped (a `PipelineConfig`)."""
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.label_decoding import split_key
    from eval.students.systems import student_pipeline

    pipeline = student_pipeline(student, config)
    pipeline["skip"] = [*pipeline["skip"], student.reply_role]
    decoding = pipeline.pop("label_decoding", {})
    decoding = {key: mode for key, mode in decoding.items() if split_key(key)[0] != student.reply_role}
    return PipelineConfig(**pipeline, **({"label_decoding": decoding} if decoding else {}))


def fold_answers(runner: Runner, name: str, student: StudentSpec, adapters: Path, train: Path, held: Sequence[str],
                 folder: Path, config: StudentsConfig) -> Path:  # fmt: skip
    """The fold adapters' answers up to the reply on the held-out fold's train dialogues, one JSON line each
    (`answers.jsonl`: the dialogue, its conversation, the answers that validated, why it failed)."""
    from distill.datasets.dataset_card import read_run
    from distill.pipeline.stage_key import digest, generation_inputs
    from eval.compare.reuse import adapter_fingerprints

    out = set(held)
    dialogues = [t.dialogue for t in read_run(train)[0] if t.dialogue.conv_id in out]
    pipeline = upstream_pipeline(student, config)
    backend = {**config.backend.model_dump(), "adapters": str(adapters)}

    def key() -> dict[str, Any]:
        inputs = generation_inputs(pipeline, backend, adapter_fingerprints(backend), None)
        return {"dialogues": digest([d.model_dump(mode="json") for d in dialogues]), **inputs}

    def answer() -> None:
        from distill.backends import make_backend
        from distill.pipeline.pipeline import Pipeline

        made = Pipeline(pipeline, make_backend(dict(backend)), None).run(dialogues, progress=False)
        lines = [{"dialogue_id": t.dialogue.id, "conv_id": t.dialogue.conv_id, "outputs": t.outputs,
                  "failure": t.failure} for t in made]  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        (folder / ANSWERS_FILE).write_text(text, encoding="utf-8")

    return runner.run(Stage(f"{name}: answers", folder, answer, key))


def read_answers(folders: Sequence[Path]) -> dict[str, tuple[int, dict[str, Any]]]:
    """dialogue id -> (its fold, the answers its fold's adapters gave), from each fold's `answers.jsonl`."""
    given = {}
    for fold, folder in enumerate(folders):
        for line in (folder / ANSWERS_FILE).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            given[row["dialogue_id"]] = (fold, row["outputs"])
    return given


def forced_traces(traces: Sequence, given: Mapping[str, tuple[int, dict]], roles: Sequence[str], share: float,
                  seed: int) -> tuple[list, dict[str, Any]]:  # fmt: skip
    """The train traces with each answered dialogue's upstream `roles` replaced by its fold's answers (a role the
    fold failed keeps the teacher's), but for a seeded `share` of the dialogues, which keep the teacher's; and what
    each dialogue's reply reads (`forced.json`'s `dialogues`)."""
    answered = sorted({t.dialogue.id for t in traces if t.dialogue.id in given})
    teacher = set(random.Random(seed).sample(answered, round(share * len(answered))))
    out, record = [], {}
    for trace in traces:
        if trace.dialogue.id not in given:
            out.append(trace)
            continue
        fold, outputs = given[trace.dialogue.id]
        source = "teacher" if trace.dialogue.id in teacher else "student"
        own = {role: outputs[role] for role in roles if role in outputs} if source == "student" else {}
        out.append(trace.model_copy(update={"outputs": {**trace.outputs, **own}}))
        lacking = [role for role in roles if role not in own]
        record[trace.dialogue.id] = {"fold": fold, "upstream": source, "teacher_for": lacking, "answers": own}
    return out, record


def forced_reply(runner: Runner, student: StudentSpec, train: Path, base: Path, answers: Sequence[Path],
                 folder: Path, seed: int, config: StudentsConfig) -> Path:  # fmt: skip
    """The upstream roles' datasets of `base`, copied, and the reply's with its train rows read the fold answers."""
    from distill.pipeline.stage_key import content_fingerprint, prompt_fingerprint
    from distill.pipeline.store import TRACES_FILE

    def key() -> dict[str, Any]:
        return {
            "datasets": {role: fingerprints(base / role) for role in student.roles},
            "traces": content_fingerprint(train / TRACES_FILE),
            "fold answers": [content_fingerprint(a / ANSWERS_FILE) for a in answers],
            "share": student.forced.share,
            "seed": seed,
            "student prompts": prompt_fingerprint("student"),
        }

    def build() -> None:
        for role in upstream_roles(student):  # a copy keeps the rows' fingerprints: the same key as base's
            shutil.rmtree(folder / role, ignore_errors=True)
            shutil.copytree(base / role, folder / role)
        record = build_reply(student, train, base, answers, folder, seed, config)
        (folder / FORCED_JSON).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    return runner.run(Stage(f"{student.name} seed {seed}: datasets", folder, build, key))


def build_reply(student: StudentSpec, train: Path, base: Path, answers: Sequence[Path], folder: Path, seed: int,
                config: StudentsConfig) -> dict[str, Any]:  # fmt: skip
    """The reply's dataset in `folder`: its train rows from the forced traces, its validation rows base's; returns
    `forced.json`'s record."""
    from datasets import DatasetDict, load_from_disk

    from distill.datasets.dataset_card import read_run
    from distill.datasets.sft_data import BuildReport, build_role_datasets, save_role_datasets

    traces, info, _ = read_run(train)
    roles, reply, options = upstream_roles(student), student.reply_role, config.dataset_options()
    forced, dialogues = forced_traces(traces, read_answers(answers), roles, student.forced.share, seed)
    report = BuildReport()
    built = build_role_datasets(forced, [reply], options, report, info)
    if reply not in built or not len(built[reply]["train"]):
        raise CompareError(f"student {student.name} seed {seed}: its reply role has no train rows "
                           f"({'; '.join(report.lines())})")  # fmt: skip
    validation = load_from_disk(str(base / reply))["validation"]
    built[reply] = DatasetDict({"train": built[reply]["train"], "validation": validation})
    report.counts[reply].rows = {split: len(rows) for split, rows in built[reply].items()}
    save_role_datasets(built, folder, forced, info, options, report, train)
    rows = dialogues.values()
    return {
        "folds": student.forced.folds,
        "share": student.forced.share,
        "seed": seed,
        "upstream": {source: sum(r["upstream"] == source for r in rows) for source in ("student", "teacher")},
        # per role, the student-forced dialogues whose fold answer failed there: the teacher's answer kept
        "failed": {role: sum(role in r["teacher_for"] for r in rows if r["upstream"] == "student") for role in roles},
        "dialogues": dialogues,
    }
