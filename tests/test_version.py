"""One version, read from the installed package's metadata: `trace-distill --version` prints it, every
output that names its maker records it (run.json, dataset build records, adapter metadata), and the
project files (CITATION.cff, CHANGELOG.md, LICENSE) agree with pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import yaml

import distill

REPO = Path(__file__).resolve().parents[1]


def test_version_is_the_installed_packages():
    assert distill.__version__ == version("trace-distill")


def test_console_prints_the_version():
    proc = subprocess.run(
        [sys.executable, "-m", "eval.console", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"trace-distill {version('trace-distill')}"


# run.json: tests/test_batch_api.py; the dataset build record: tests/test_datasets.py; adapter metadata:
# tests/test_train.py (slow: it trains).


def test_project_files_agree_with_the_package():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0" and citation["version"] == distill.__version__
    assert citation["license"] == "Apache-2.0"  # pyproject.toml's
    cited = " ".join(ref["title"] for ref in citation["references"])
    for paper in ("TRACE", "Multimodal Empathetic", "EmoStage", "Empathetic Open-domain", "STaR", "Step-by-Step"):
        assert paper in cited, paper
    assert f"## [{distill.__version__}]" in (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "Apache License\n" in (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "CC BY-NC 4.0" in (REPO / "NOTICE").read_text(encoding="utf-8")
