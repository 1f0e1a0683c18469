"""Load EmpatheticDialogues from any of its forms, split it, save it, and read it back.

A source is one of:

- a CSV file: the original ED release layout or the TRACE-prepared layout (see ``ed_formats``);
- a directory of ED CSVs ``train.csv`` / ``valid.csv`` / ``test.csv``, which give the splits;
- a ``datasets`` directory written by ``save_to_disk`` (a split-less ``Dataset`` or a ``DatasetDict``);
- a Hugging Face hub id such as ``facebook/empathetic_dialogues`` (needs network).

Everything becomes ``Dialogue`` records. ``save_dialogues`` writes them as a ``DatasetDict`` with
``train``/``validation``/``test`` splits, and ``load_split`` reads one back: the pipeline, the
retrieval index and the eval all take their dialogues from there.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from data_prep.dialogues import Dialogue
from data_prep.ed_formats import (
    FORMATS,
    DataError,
    Row,
    SizeLimits,
    SkippedRecord,
    check_columns,
    detect_format,
    ed_dialogues,
    id_problem,
    read_csv_rows,
    trace_dialogues,
)

SPLITS: tuple[str, ...] = ("train", "validation", "test")
# ED names its validation file `valid.csv`; other copies use `validation` or `dev`.
_SPLIT_ALIASES = {
    "train": "train",
    "valid": "validation",
    "validation": "validation",
    "dev": "validation",
    "test": "test",
}
DEFAULT_RATIOS: tuple[float, float, float] = (0.8, 0.1, 0.1)
SAMPLE_PATH = Path(__file__).resolve().parent / "sample" / "ed_sample.csv"
# a dialogues folder holds no `labels` (gold labels beyond the emotion come with an imported trace run)
_DIALOGUE_COLUMNS = tuple(f for f in Dialogue.model_fields if f != "labels")


@dataclass
class LoadedSource:
    """What a source held: its own splits (``has_splits``) or everything under the key ``"all"``."""

    splits: dict[str, list[Dialogue]]
    skipped: list[SkippedRecord] = field(default_factory=list)

    @property
    def has_splits(self) -> bool:
        return "all" not in self.splits


def _progress(rows, desc: str):
    # delay: small files (the shipped sample, tests) finish before a bar would be worth drawing.
    return tqdm(rows, desc=desc, unit="row", leave=False, mininterval=0.5, delay=1.0)


def _rows_to_dialogues(
    header: Sequence[str], rows, fmt: str, file: str, skipped: Optional[list], limits: SizeLimits = SizeLimits()
) -> list[Dialogue]:
    if fmt == "auto":
        fmt = detect_format(header, file)
    elif fmt not in FORMATS:
        raise DataError(file, None, None, f"unknown format '{fmt}' (expected auto, {', '.join(FORMATS)})")
    check_columns(header, fmt, file)
    rows = _progress(rows, f"reading {Path(file).name}")
    if fmt == "ed":
        return ed_dialogues(rows, file, skipped, limits)
    return trace_dialogues(rows, file, skipped, limits)


def read_csv(
    path: str | Path, fmt: str = "auto", skipped: Optional[list] = None, limits: SizeLimits = SizeLimits()
) -> list[Dialogue]:
    """Dialogues from one ED-release or TRACE CSV; with a ``skipped`` list, bad rows go there instead of raising."""
    path = Path(path)
    if not path.is_file():
        raise DataError(str(path), None, None, "no such file")
    header, rows = read_csv_rows(path)
    return _rows_to_dialogues(header, rows, fmt, str(path), skipped, limits)


def _split_csvs(directory: Path) -> dict[str, Path]:
    found = {}
    for stem, split in _SPLIT_ALIASES.items():
        if (directory / f"{stem}.csv").is_file():
            found.setdefault(split, directory / f"{stem}.csv")
    return found


def _dataset_rows(ds) -> list[Row]:
    # Row numbers count records from 1, so an error points at the n-th example of that split.
    return [(number, row) for number, row in enumerate(ds, start=1)] if ds.num_rows else []


def _from_datasets(
    obj, name: str, fmt: str, skipped: Optional[list], limits: SizeLimits = SizeLimits()
) -> dict[str, list[Dialogue]]:
    from datasets import DatasetDict

    parts = dict(obj) if isinstance(obj, DatasetDict) else {"all": obj}
    splits: dict[str, list[Dialogue]] = {}
    for split_name, ds in parts.items():
        split = _SPLIT_ALIASES.get(split_name, split_name)
        label = f"{name}[{split_name}]" if split_name != "all" else name
        if set(_DIALOGUE_COLUMNS) <= set(ds.column_names):  # already normalised by `data_prep dialogues`
            splits[split] = _records(ds, label)
        else:
            splits[split] = _rows_to_dialogues(ds.column_names, _dataset_rows(ds), fmt, label, skipped, limits)
    return splits


def _from_hub(source: str, fmt: str, skipped: Optional[list], limits: SizeLimits) -> dict[str, list[Dialogue]]:
    from datasets import load_dataset

    # With no network huggingface_hub logs each of its retries; the one sentence below says it all.
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        try:
            obj = load_dataset(source)
        except RuntimeError as err:
            if "scripts are no longer supported" not in str(err):
                raise
            # Script-based copies (facebook/empathetic_dialogues was one) still load from the
            # Parquet export the hub keeps of every public dataset.
            obj = load_dataset(source, revision="refs/convert/parquet")
    except Exception as err:  # noqa: BLE001 - any hub/network failure becomes one sentence
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(
            source,
            None,
            None,
            f"not a local file or directory, and loading it from the Hugging Face "
            f"hub failed ({type(err).__name__}: {first_line[:160]})",
        ) from None
    finally:
        hub_logger.setLevel(level)
    return _from_datasets(obj, source, fmt, skipped, limits)


def load_dialogues(
    source: str | Path, fmt: str = "auto", skip_invalid: bool = False, limits: SizeLimits = SizeLimits()
) -> LoadedSource:
    """Read any supported source; bad rows (and dialogues over `limits`) raise DataError unless
    ``skip_invalid`` records them instead."""
    skipped: Optional[list] = [] if skip_invalid else None
    path = Path(source)
    if path.is_file():
        splits = {"all": read_csv(path, fmt, skipped, limits)}
    elif path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        from datasets import load_from_disk

        splits = _from_datasets(load_from_disk(str(path)), str(path), fmt, skipped, limits)
    elif path.is_dir():
        files = _split_csvs(path)
        if not files:
            raise DataError(
                str(path),
                None,
                None,
                "directory holds neither train.csv/valid.csv/test.csv nor a `datasets` save_to_disk copy",
            )
        splits = {split: read_csv(p, fmt, skipped, limits) for split, p in files.items()}
    elif str(source).endswith(".csv") or str(source).startswith((".", "/", "~")):
        raise DataError(str(source), None, None, "no such file or directory")
    else:
        splits = _from_hub(str(source), fmt, skipped, limits)
    return LoadedSource(splits=splits, skipped=skipped or [])


def split_dialogues(
    dialogues: Sequence[Dialogue], seed: int = 0, ratios: Sequence[float] = DEFAULT_RATIOS
) -> dict[str, list[Dialogue]]:
    """Seeded train/validation/test split by conversation, stratified by emotion.

    Whole conversations move together, so two examples of one conv_id never land in different
    splits; stratifying keeps every emotion in the small validation and test splits.
    """
    if len(ratios) != 3 or any(r < 0 for r in ratios) or sum(ratios) <= 0:
        raise ValueError(f"ratios must be three non-negative numbers, got {tuple(ratios)}")
    by_conv: dict[str, list[Dialogue]] = defaultdict(list)
    for d in dialogues:
        by_conv[d.conv_id].append(d)
    by_emotion: dict[str, list[str]] = defaultdict(list)
    for conv_id in sorted(by_conv):
        by_emotion[by_conv[conv_id][0].emotion].append(conv_id)
    rng = random.Random(seed)
    assignment: dict[str, str] = {}
    total = sum(ratios)
    for emotion in sorted(by_emotion):
        conv_ids = by_emotion[emotion]
        rng.shuffle(conv_ids)
        n_train = round(len(conv_ids) * ratios[0] / total)
        n_val = round(len(conv_ids) * ratios[1] / total)
        for i, conv_id in enumerate(conv_ids):
            assignment[conv_id] = "train" if i < n_train else "validation" if i < n_train + n_val else "test"
    splits: dict[str, list[Dialogue]] = {name: [] for name in SPLITS}
    for d in dialogues:  # keep the source order inside each split
        splits[assignment[d.conv_id]].append(d)
    return splits


def limit_leaves_out(picked: Sequence[Dialogue], split: Sequence[Dialogue], what: str) -> Optional[str]:
    """A warning when a limited pick of a split misses emotions the split has, else None.

    A limit takes the split's first dialogues; in a source ordered by emotion those can be one or two
    classes, and a student trained on them learns to answer only those.
    """
    missing = sorted({d.emotion for d in split} - {d.emotion for d in picked})
    if not missing:
        return None
    return (
        f"warning: {what} leaves out {len(missing)} of the split's emotions ({', '.join(missing)}): "
        "a student trained or scored on it never sees them"
    )


def _features():
    from datasets import Features, List, Value

    text = Value("string")
    return Features(
        {
            "id": text,
            "conv_id": text,
            "turns": List({"speaker": text, "text": text}),
            "situation": text,
            "emotion": text,
            "emotion_fine": text,
            "gold_response": text,
        }
    )


def save_dialogues(splits: dict[str, list[Dialogue]], out: str | Path):
    """Write splits as a DatasetDict (every name in SPLITS present, possibly empty); returns it."""
    from datasets import Dataset, DatasetDict

    features = _features()
    parts = {}
    for name in dict.fromkeys([*SPLITS, *splits]):
        rows = [d.model_dump() for d in splits.get(name, [])]
        columns = {col: [r[col] for r in rows] for col in features}
        parts[name] = Dataset.from_dict(columns, features=features)
    dataset = DatasetDict(parts)
    # An empty split would be saved as zero shards, which load_from_disk then fails on (datasets 5.2);
    # one shard per split always holds (dialogue text is far below the 500 MB shard size anyway).
    dataset.save_to_disk(str(out), num_shards={name: 1 for name in parts})
    return dataset


def load_split(dataset_dir: str | Path, split: str) -> list[Dialogue]:
    """The dialogues of one split of a directory written by `python -m data_prep dialogues`."""
    from datasets import load_from_disk

    dataset_dir = Path(dataset_dir)
    if not (dataset_dir / "dataset_dict.json").is_file():
        raise DataError(
            str(dataset_dir), None, None, "not a dialogues directory (run `python -m data_prep dialogues --out` first)"
        )
    dataset = load_from_disk(str(dataset_dir))
    split = _SPLIT_ALIASES.get(split, split)
    if split not in dataset:
        raise DataError(str(dataset_dir), None, None, f"no split '{split}' (has: {', '.join(dataset)})")
    return _records(dataset[split], f"{dataset_dir}[{split}]")


def _records(ds, name: str) -> list[Dialogue]:
    """The rows of a split `data_prep dialogues` wrote (or one in its columns), their ids printable."""
    dialogues = [Dialogue.model_validate(row) for row in ds] if ds.num_rows else []
    for number, dialogue in enumerate(dialogues, start=1):
        for column in ("id", "conv_id"):
            if problem := id_problem(getattr(dialogue, column)):
                raise DataError(name, number, column, problem)
    return dialogues


def load_sample() -> list[Dialogue]:
    """Every example of the shipped sample (written for this project, ED release format)."""
    return read_csv(SAMPLE_PATH, "ed")
