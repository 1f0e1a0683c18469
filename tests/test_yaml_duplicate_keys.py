"""A key given twice in any YAML the toolkit reads is refused in one line naming the file, the key and both lines
(data_prep/config_file.py's loader), where PyYAML would keep the last value silently. The config files' commands are
in tests/test_config_file.py; here the loader itself, the import mapping and the declared pipeline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from data_prep.config_file import ConfigFileError, read_mapping
from distill.__main__ import main as distill
from distill.imports.mapping import load_mapping
from distill.roles.declared import load_pipeline

REPO = Path(__file__).resolve().parents[1]
MAPPING = REPO / "configs" / "import" / "esdcot-direct.yaml"
PIPELINE = REPO / "configs" / "pipelines" / "escot-direct.yaml"


def repeat_line(text: str, pattern: str) -> tuple[str, int, str]:
    """`text` with its first line matching `pattern` written twice; that line's number and key."""
    lines = text.splitlines()
    number = next(n for n, line in enumerate(lines, start=1) if re.match(pattern, line))
    key = lines[number - 1].split(":")[0].strip(" -")
    return "\n".join([*lines[:number], lines[number - 1], *lines[number:]]) + "\n", number, key


@pytest.mark.parametrize(
    ("text", "key", "where"),
    [
        ("answers: 1\nteacher: x\nanswers: 2\n", "answers", "lines 1 and 3"),
        ("a:\n  b:\n    c: 1\n    d: 2\n    c: 3\n", "c", "lines 3 and 5"),  # nested two deep
        ("systems:\n  - name: a\n    name: b\n", "name", "lines 2 and 3"),  # in a list's item
        ("backend: {type: local, model: m, type: openai}\n", "type", "both on line 1"),  # flow style
    ],
    ids=["top", "nested", "list-item", "flow"],
)
def test_the_loader_names_the_key_and_both_lines(tmp_path, text, key, where):
    path = tmp_path / "x.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigFileError) as err:
        read_mapping(path)
    assert str(err.value) == f"{path}: key '{key}' given twice ({where})"


def test_a_merged_anchor_may_still_be_overridden(tmp_path):
    """`<<: *base` then a key of base's is YAML's override, not a repeat (shipped configs use anchors)."""
    path = tmp_path / "x.yaml"
    path.write_text("base: &b {type: local, model: m}\nother:\n  <<: *b\n  model: n\n", encoding="utf-8")
    assert read_mapping(path)["other"] == {"type": "local", "model": "n"}


def _written(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_mapping_with_a_repeated_key_is_refused(tmp_path):
    text, line, key = repeat_line(MAPPING.read_text(encoding="utf-8"), r"^teacher: ")
    path = _written(tmp_path / "m.yaml", text)
    with pytest.raises(ValueError, match=rf"^{path}: key '{key}' given twice \(lines {line} and {line + 1}\)$"):
        load_mapping(path)


def test_a_pipeline_with_a_repeated_nested_key_is_refused(tmp_path):
    text, line, key = repeat_line(PIPELINE.read_text(encoding="utf-8"), r"^    temperature: ")  # inside a role
    path = _written(tmp_path / "p.yaml", text)
    with pytest.raises(ValueError, match=rf"^{path}: key '{key}' given twice \(lines {line} and {line + 1}\)$"):
        load_pipeline(path)


@pytest.mark.parametrize("which", ["mapping", "pipeline"])
def test_the_import_command_refuses_a_repeated_key_in_one_line(which, tmp_path, capsys):
    pipeline_text = PIPELINE.read_text(encoding="utf-8")
    if which == "pipeline":
        pipeline_text, line, key = repeat_line(pipeline_text, r"^    context_turns: ")
    pipeline = _written(tmp_path / "p.yaml", pipeline_text)
    mapping_text = yaml.safe_dump({**yaml.safe_load(MAPPING.read_text(encoding="utf-8")), "pipeline": str(pipeline)})
    if which == "mapping":
        mapping_text, line, key = repeat_line(mapping_text, r"^teacher: ")
    mapping = _written(tmp_path / "m.yaml", mapping_text)
    out = tmp_path / "run"
    # the data is never read: the mapping and its pipeline are refused first
    assert distill(["import", "--data", str(tmp_path / "d.json"), "--mapping", str(mapping), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    named = pipeline if which == "pipeline" else mapping
    assert err.endswith(f"{named}: key '{key}' given twice (lines {line} and {line + 1})"), err
    assert not out.exists()
