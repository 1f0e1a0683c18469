"""The README's layout table names every module and config in the tree, and nothing that is gone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("data_prep", "distill", "train", "eval", "benchmarks", "configs")


def _layout_rows() -> dict[str, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Layout") : text.index("## The real workflow")]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)/` \| (.+) \|$", section, re.M)}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", *FOLDERS], cwd=REPO, capture_output=True, text=True, check=True)
    return [Path(p) for p in out.stdout.split()]


def test_every_module_and_config_is_in_the_layout():
    rows = _layout_rows()
    missing = []
    for path in _tracked():
        if path.name == "__init__.py":
            continue
        folder = str(path.parent)
        while folder not in rows and "/" in folder:  # eval/modules/dist/dist.py is listed under eval/
            folder = folder.rsplit("/", 1)[0]
        rel = path.relative_to(folder)
        named = {path.name, path.stem, str(rel), str(rel.parent)} - {"."}
        if folder not in rows or not any(
            re.search(rf"(?<![\w./-]){re.escape(n)}(?![\w-])", rows[folder]) for n in named
        ):
            missing.append(str(path))
    assert not missing, f"README layout lacks: {missing}"


def test_layout_names_no_file_that_is_gone():
    rows = _layout_rows()
    for folder, cell in rows.items():
        if folder in ("configs",):
            continue
        for name in re.findall(r"`([\w/.]+\.(?:py|csv))`", cell):
            assert (REPO / folder / name).is_file(), f"README layout names {folder}/{name}, which is not there"
