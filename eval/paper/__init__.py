"""Published results to hold a report against, shipped as JSON beside this file (`trace-table1.json`).

Each file carries the paper's rows as printed and the human replies' figures on the paper's own test set,
so a row's Dist/EAD can be read as a share of the human replies (`eval.metrics.diversity.human_ratios`): the one
form of those corpus-level figures that compares across test sets of different sizes. The rows are the
paper's numbers, never re-run here, and every report that shows them says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval.metrics.diversity import human_ratios

SHIPPED = {p.stem: p for p in Path(__file__).parent.glob("*.json")}


class PaperReferenceError(ValueError):
    """An unknown paper reference, or a file that is not one; the message names it."""


def load_paper_reference(name: str) -> dict[str, Any]:
    """A shipped reference by name (e.g. `trace-table1`) or a JSON file of the same shape, with each
    row's `human_ratio` filled in from the file's `human_on_test_set`."""
    path = SHIPPED.get(name) or Path(name)
    if not path.is_file():
        shipped = ", ".join(SHIPPED)
        raise PaperReferenceError(f"paper_reference: '{name}' is neither a shipped table ({shipped}) nor a file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        human, rows = data["human_on_test_set"], data["rows"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise PaperReferenceError(f"{path}: not a paper reference (needs rows and human_on_test_set): {err}") from None
    for row in rows:
        row["human_ratio"] = human_ratios(row, human)
    return data
