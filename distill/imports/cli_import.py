"""`python -m distill import`: turn an external chain dataset into a trace run, as if the pipeline had written it.

    python -m distill import --data ../shared/data/esd-cot/train_em_sr_re.json \\
        --mapping configs/import/esdcot-instruction.yaml --split train --out runs/esdcot-train

The mapping (distill.imports.mapping) names the declared pipeline and where each role's answer is. Every row is
read and checked before anything is written; then the traces go to the run's `traces.jsonl` and `run.json` says
where they came from (the data file and the mapping, with their hashes). A rerun with the same inputs adds
nothing; `distill inspect` and `distill datasets` read the run like any other.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", required=True, help="a file `datasets` loads (json, jsonl, csv, parquet) or a saved dataset"
    )
    parser.add_argument("--mapping", required=True, help="YAML: the pipeline and which field feeds which role")
    parser.add_argument("--out", required=True, help="run directory (traces.jsonl + run.json)")
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

    if not 0 <= args.max_failed_share <= 1:
        raise ValueError(f"--max-failed-share must be in [0, 1], got {args.max_failed_share}")
    if problem := not_a_directory(args.out):
        raise ValueError(f"{args.out}: --out must be a directory, but {problem}")
    start = time.perf_counter()
    mapping = load_mapping(args.mapping)
    config = chains.pipeline_config(mapping, args.mapping)
    chains.check_mapping(mapping, config, args.mapping)
    rows = chains.load_rows(args.data, mapping.format, args.split)
    chains.check_data(mapping, rows, args.mapping, args.data)
    report = chains.ImportReport(rows=len(rows))
    traces = [t for n, row in enumerate(rows, start=1) if (t := chains.to_trace(mapping, config, row, n, report))]
    failed = sum(report.failures.values())
    for line in report.lines():
        print(line, file=sys.stderr)
    if failed > args.max_failed_share * len(rows):
        raise ValueError(
            f"{args.data}: {failed} of {len(rows)} examples lack a link the pipeline declares (more than "
            f"--max-failed-share {args.max_failed_share}), the first: {report.lines()[0]}; nothing written"
        )
    store = TraceStore(args.out)
    store.claim(chains.run_info(mapping, config, Path(args.mapping), Path(args.data), args.split))
    written = sum(store.append(t) for t in traces)
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
