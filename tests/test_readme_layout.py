"""The layout table (docs/architecture.md) names every module and config in the tree, and nothing that is gone;
the README stays a user's page: under 250 lines of its own text (record blocks, rendered from records, aside), a
table of contents, no line over 120 characters, its docs links resolve, and its test command is the one CI runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("data_prep", "distill", "train", "eval", "benchmarks", "configs")
RECORD_BLOCK = re.compile(r"<!-- record: .*?<!-- /record -->", re.S)


def _layout_rows() -> dict[str, str]:
    """folder -> its files' cell; a row with an empty folder cell goes on with the folder above (cells stay short)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    folder = None
    for m in re.finditer(r"^\| (?:`([^`]+)/`)? +\| (.+) \|$", text[text.index("## Layout") :], re.M):
        folder = m.group(1) or folder
        if folder:
            rows[folder] = f"{rows.get(folder, '')}, {m.group(2)}".lstrip(", ")
    return rows


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
        while folder not in rows and "/" in folder:  # eval/metrics/modules/dist/dist.py is listed under eval/metrics/
            folder = folder.rsplit("/", 1)[0]
        rel = path.relative_to(folder)
        named = {path.name, path.stem, str(rel), str(rel.parent)} - {"."}
        if folder not in rows or not any(
            re.search(rf"(?<![\w./-]){re.escape(n)}(?![\w-])", rows[folder]) for n in named
        ):
            missing.append(str(path))
    assert not missing, f"docs/architecture.md layout lacks: {missing}"


def test_layout_names_no_file_that_is_gone():
    rows = _layout_rows()
    for folder, cell in rows.items():
        if folder in ("configs",):
            continue
        for name in re.findall(r"`([\w/.]+\.(?:py|csv))`", cell):
            assert (REPO / folder / name).is_file(), f"layout names {folder}/{name}, which is not there"


def test_readme_is_a_users_page():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    # the README's own text; a record block is rendered from its record (eval/records/blocks.py), not written here
    own = RECORD_BLOCK.sub("", text).splitlines()
    assert len(own) < 250, len(own)
    # a table row rendered from a record (eval/records/curve.py) holds every figure with its interval: it may be longer
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 120 and not line.startswith("| ")]
    assert not long, f"README lines over 120 characters: {long}"
    assert "## Contents" in text
    for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|cff)|LICENSE|NOTICE)\)", text):
        assert (REPO / link).is_file(), f"README links {link}, which is not there"
    for doc in (REPO / "docs").glob("*.md"):
        assert f"(docs/{doc.name})" in text, f"README does not link {doc.name}"


def test_readme_test_command_is_the_one_ci_runs():
    ci_last = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    assert any(ci_last in block.splitlines() for block in blocks), ci_last
