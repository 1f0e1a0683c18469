"""`python -m distill <command>`: generate or import traces, respond, inspect their quality, build datasets, serve.

Each command lives in its own module; `data_prep.commands.dispatch` runs it.
"""

from __future__ import annotations

import sys

from data_prep.commands import package_main

COMMANDS = {
    "generate": ("distill.pipeline.cli_generate", "run the pipeline over a dialogue split and write traces"),
    "respond": ("distill.pipeline.cli_respond", "run the pipeline on one dialogue and print every stage"),
    "inspect": ("distill.quality.cli_inspect", "run the quality checks over a trace run and write its quality.json"),
    "import": ("distill.imports.cli_import", "turn an external chain dataset (e.g. ESD-CoT) into a trace run"),
    "datasets": ("distill.datasets.cli_datasets", "turn a trace run into one SFT dataset per role"),
    "serve": ("distill.serving.cli_serve", "OpenAI-compatible server over the local backend and role adapters"),
    "batch": ("distill.batch.cli_batch", "generate traces through OpenAI's Batch API (submit / poll / collect)"),
}

main = package_main(COMMANDS, "python -m distill", __doc__)


if __name__ == "__main__":
    sys.exit(main())
