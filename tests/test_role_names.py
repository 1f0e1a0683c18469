"""Generic code learns a role's duty from what its pipeline declares, never from its name (issue 77): no product
module outside distill/roles/ names one of TRACE's roles (tests/test_role_duties.py: what it reads instead)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("data_prep", "distill", "train", "eval")
TRACE_ROLE = re.compile(r"""["'](asi|cae|srp|ers)["']|CORE_ROLES""")
ROLES_HOME = "distill/roles/"  # the one place that knows TRACE's roles


def _named_roles(allowed: tuple[str, ...]) -> list[str]:
    hits = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(allowed):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if TRACE_ROLE.search(line):
                    hits.append(f"{rel}:{number}: {line.strip()}")
    return hits


def test_no_product_module_outside_roles_names_a_trace_role():
    hits = _named_roles((ROLES_HOME,))
    assert not hits, "TRACE role names outside distill/roles/ (read them from the role specs):\n" + "\n".join(hits)


def test_the_name_check_finds_a_role_name():
    # distill/roles/ names every TRACE role: the check above can fail
    assert any(hit.startswith(ROLES_HOME) for hit in _named_roles(()))
