"""`python -m data_prep <command>`: normalise EmpatheticDialogues and build the exemplar index.

    python -m data_prep dialogues --source <csv | dir | hub id> --out data/ed [--format auto] [--seed 0]
    python -m data_prep index --dialogues data/ed --split train --out data/ed-index [--embedder minilm]

Each command lives in its own module; `data_prep.commands.dispatch` runs it.
"""

from __future__ import annotations

import sys

from data_prep.commands import package_main

COMMANDS = {
    "dialogues": ("data_prep.cli_dialogues", "normalise an ED source into train/validation/test"),
    "index": ("data_prep.cli_index", "embed one split's situations into an exemplar index"),
}

main = package_main(COMMANDS, "python -m data_prep", __doc__)


if __name__ == "__main__":
    sys.exit(main())
