"""`python -m distill import`: turn an external chain dataset into a trace run, as if the pipeline had written it.

    python -m distill import --data ../shared/data/esd-cot/train_em_sr_re.json \\
        --mapping configs/import/esdcot-instruction.yaml --split train --out runs/esdcot-train

The mapping (distill.imports.mapping) names the declared pipeline and where each role's answer is. Every row is
read and checked before anything is written; then the traces go to the run's `traces.jsonl` and `run.json` says
where they came from (the data file and the mapping, with their hashes). `distill inspect` and `distill datasets`
read the run like any other.

The import is a stage under the project's reuse rule (distill.pipeline.stage_key): its key is the data's content,
the mapping as validated, the split and the pipeline, stored in `stage-key.json` once every trace is written. A
rerun with the same key adds nothing; an --out holding an import made from other inputs is made again, saying
which input changed (`regenerating <out>: its <input> changed`), so one run never holds two files, splits or
mappings. An --out holding anything but an import (a generated run: its traces cost money) is refused, untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", required=True, help="a file `datasets` loads (json, jsonl, csv, parquet) or a saved dataset"
    )
    parser.add_argument("--mapping", required=True, help="YAML: the pipeline and which field feeds which role")
    parser.add_argument("--out", required=True, help="run directory (traces.jsonl + run.json)")
    parser.add_argument(
        "--pipeline",
        default=None,
        help="import as this declared pipeline instead of the mapping's: a variant of it (`extends: <the mapping's>`, "
        "e.g. a student answer in another order)",
    )
    parser.add_argument("--split", default=None, help="the dialogue split these rows are (train / validation / test)")
    parser.add_argument(
        "--max-failed-share",
        type=float,
        default=0.05,
        help="refuse the whole import, writing nothing, when more than this share of examples lack a link; "
        "below it the failed examples are stored as failed traces and counted",
    )


USER_ERRORS = (ValueError,)  # MappingError and StoreError among them: one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    from data_prep.commands import not_a_directory
    from distill.imports import chains
    from distill.imports.mapping import load_mapping
    from distill.pipeline.store import TraceStore

    if args.split is not None and not args.split.strip():
        raise ValueError(
            "--split: blank; name the dialogue split these rows are (train, validation, test) or leave it out"
        )
    if not 0 <= args.max_failed_share <= 1:
        raise ValueError(f"--max-failed-share must be in [0, 1], got {args.max_failed_share}")
    if problem := not_a_directory(args.out):
        raise ValueError(f"{args.out}: --out must be a directory, but {problem}")
    start = time.perf_counter()
    mapping = load_mapping(args.mapping)
    if args.pipeline is not None:
        mapping = chains.as_variant(mapping, args.pipeline, args.mapping)
    config = chains.pipeline_config(mapping, args.mapping)
    chains.check_mapping(mapping, config, args.mapping)
    rows = chains.load_rows(args.data, mapping.format, args.split)
    chains.check_data(mapping, rows, args.mapping, args.data)
    chains.check_ids(mapping, rows, args.data)
    report = chains.ImportReport(rows=len(rows))
    numbered = [(n, row, chains.to_trace(mapping, config, row, n, report)) for n, row in enumerate(rows, start=1)]
    traces = chains.one_per_id([(n, row, t) for n, row, t in numbered if t is not None], args.data)
    failed = sum(report.failures.values())
    for line in report.lines():
        print(line, file=sys.stderr)
    if failed > args.max_failed_share * len(rows):
        raise ValueError(
            f"{args.data}: {failed} of {len(rows)} examples lack a link the pipeline declares (more than "
            f"--max-failed-share {args.max_failed_share}), the first: {report.lines()[0]}; nothing written"
        )
    store = TraceStore(args.out)
    inputs = import_inputs(mapping, config, Path(args.data), args.split)
    info = chains.run_info(mapping, config, Path(args.mapping), Path(args.data), args.split)
    written = store_import(store, info, inputs, traces)
    summary = {
        "rows": len(rows),
        "ok": report.ok,
        "failed": failed,
        "written": written,
        "already_stored": len(traces) - written,
        "roles": config.stages(),
        "seconds": round(time.perf_counter() - start, 2),
        "out": str(store.path),
    }
    print(json.dumps(summary))
    return 0


def import_inputs(mapping, config, data: Path, split) -> dict[str, Any]:
    """Everything an import's traces are computed from, in the order a rerun names a change: the data's content
    (a saved dataset folder's files), the mapping as validated (an edit that changes nothing it reads, a comment,
    changes nothing), the split and the pipeline settings (a declared pipeline's roles among them)."""
    from distill.pipeline.stage_key import content_fingerprint

    return {
        "data": content_fingerprint(data),
        "mapping": mapping.model_dump(mode="json"),
        "split": split,
        "pipeline": config.key_dict(),
    }


def store_import(store, info, inputs: dict[str, Any], traces) -> int:
    """Write the traces into --out under this import's key; how many were new. A read-only or unwritable --out
    ends in one line naming the path (StoreError), as does a run.json that cannot be read."""
    from distill.pipeline.stage_key import write_key
    from distill.pipeline.store import StoreError, remove_files
    from distill.quality.report import QUALITY_FILE

    try:
        reused = claim_out(store, info, inputs)
        written = sum(store.append(t) for t in traces)
        if written and reused:  # traces an earlier import of the same key lost: inspect's counts are stale
            remove_files(store.run_dir, [QUALITY_FILE])
        write_key(store.run_dir, inputs)  # last: a killed import has no key, so its rerun makes it again
    except OSError as exc:
        where = exc.filename or store.run_dir
        raise StoreError(f"{where}: cannot store the import in {store.run_dir} ({exc.strerror or exc})") from None
    return written


# Why an import with no key is made again: it could only be trusted as far as its run.json tells, and an earlier
# version appended other files' and splits' traces to one run without saying so in it.
_NO_KEY = "no stage key recorded (an earlier version's import, or one that did not finish)"


def claim_out(store, info, inputs: dict[str, Any]) -> bool:
    """Make --out this import's run: True when it already is (same key: reused as it is). An earlier import from
    other inputs is removed first, saying why; a folder holding any other run, or traces without a run.json, is
    refused (StoreError naming the file) with nothing removed."""
    from distill.pipeline.stage_key import KEY_FILE, changed_input, read_key, regenerating, stage_key
    from distill.pipeline.store import RUN_FILE, TRACES_FILE, StoreError, remove_files
    from distill.quality.report import QUALITY_FILE

    existing = store.run_info()  # StoreError, one line, when run.json is not a run record
    if existing is None and store.path.exists() and store.path.stat().st_size:
        raise StoreError(f"{store.path}: traces without a {RUN_FILE}, not an import; refusing to replace them "
                         "(pass another --out)")  # fmt: skip
    if existing is not None and existing.backend_name != info.backend_name:
        raise StoreError(
            f"{store.run_path}: a run of backend '{existing.backend_name}' (model {existing.model}), not an import; "
            "refusing to replace its traces (pass another --out)"
        )
    if existing is not None:
        stored = read_key(store.run_dir)
        why = changed_input(stored, stage_key(inputs)) if stored else _NO_KEY
        if why is None:
            return True
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the summary line a script reads
            regenerating(str(store.run_dir), why)
    # the key goes first: a removal cut short leaves no key, so the next run makes the import again
    remove_files(store.run_dir, [KEY_FILE, RUN_FILE, TRACES_FILE, QUALITY_FILE])
    store.claim(info)
    return False
