"""Imports run one way, data_prep < distill < train < eval, and no module imports itself round a circle.

Every module of the four packages is parsed, not imported: `import`, `from ... import`, a string given to
`importlib.import_module`, and any string that is exactly a module's dotted name (a command table that a
dispatcher loads) all count, inside functions as well as at the top.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOORS = {"data_prep": 0, "distill": 1, "train": 2, "eval": 3}
LOADERS = ("import_module", "__import__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in FLOORS:
        for path in sorted((REPO / package).rglob("*.py")):
            if "modules" not in path.relative_to(REPO).parts:  # eval/metrics/modules: `evaluate` scripts
                found[_module_name(path)] = path
    return found


def _named(node: ast.AST, here: str, is_package: bool) -> list[str]:
    """The dotted names one AST node imports or names as a module to load."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = here.split(".")[: len(here.split(".")) - node.level + (1 if is_package else 0)]
            base = ".".join([*anchor, base] if base else anchor)
        return [base] + [f"{base}.{a.name}" for a in node.names]
    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in LOADERS:
        return [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
        return [node.value]  # a dotted module name in a table; a bare word such as "train" is too often a split
    return []


@functools.cache
def _imports() -> dict[str, set[str]]:
    """module -> the project modules it imports (a `from pkg import name` counts pkg.name when it is a module)."""
    modules = _modules()
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for node in ast.walk(tree):
            for dotted in _named(node, name, path.name == "__init__.py"):
                if dotted in modules and dotted != name:
                    targets.add(dotted)
        edges[name] = targets
    return edges


def _top(module: str) -> str:
    return module.split(".")[0]


def test_no_import_runs_up_a_floor():
    edges = _imports()
    upward = sorted(
        f"{src} -> {dst}" for src, dsts in edges.items() for dst in dsts if FLOORS[_top(dst)] > FLOORS[_top(src)]
    )
    assert not upward, "imports from a lower package to a higher one:\n" + "\n".join(upward)


def _cycle_from(start: str, edges: dict[str, set[str]]) -> list[str] | None:
    """A path start -> ... -> start through the import graph, found depth first; None when there is none."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(edges.get(node, ())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_cycle():
    edges = _imports()
    # a package's __init__ is loaded with each of its modules; only its own imports make it part of a cycle
    cycles = {" -> ".join(c) for m in edges if (c := _cycle_from(m, edges))}
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def test_the_checker_sees_every_kind_of_import(tmp_path):
    source = "import importlib\nfrom . import b\nimportlib.import_module('train')\nTABLE = {'x': 'eval.metrics.x'}\n"
    tree = ast.parse(source)
    names = {n for node in ast.walk(tree) for n in _named(node, "distill.pkg.a", False)}
    assert {"importlib", "distill.pkg.b", "train", "eval.metrics.x"} <= names
