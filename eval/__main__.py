"""`python -m eval <command>`: score responses from any source, or compare systems on one test split.

    python -m eval score --responses <file.csv|file.jsonl> --column <name> [...]
    python -m eval compare --config configs/eval/<name>.yaml --out <dir>
    python -m eval curve --config configs/eval/curve.yaml --out <dir>
    python -m eval students --config configs/eval/escot-students.yaml --out <dir> [--n N] [--seeds 42 43 44]
    python -m eval records render [--check]

Each command lives in its own module; `data_prep.commands.dispatch` runs it.
"""

from __future__ import annotations

import sys

from data_prep.commands import package_main

COMMANDS = {
    "score": (
        "eval.metrics.score",
        "automatic metrics (Dist, EAD, I-ACC, BERTScore, PPL) for a CSV/JSONL of responses",
    ),
    "compare": (
        "eval.compare.cli_compare",
        "run/read every system of a config on one test split and write report.json/.md + plots",
    ),
    "curve": (
        "eval.curve.cli_curve",
        "learning curves: distilled, direct and rationale-task students at N train conversations, paired",
    ),
    "students": (
        "eval.students.cli_students",
        "per-role, direct and joint students trained to early stopping or the epoch cap on one teacher's chains, "
        "then one compare",
    ),
    "records": (
        "eval.records.cli",
        "write a run's record (docs/records) or render the docs' record blocks from the records",
    ),
}

main = package_main(COMMANDS, "python -m eval", __doc__)


if __name__ == "__main__":
    sys.exit(main())
