"""Every config file is read by one loader (data_prep/config_file.py): a bad key, a file that is not YAML or not a
mapping, is one line that names the file and the key, through each command that reads that kind of file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from data_prep.config_file import ConfigFileError, load_config, read_mapping

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _with_key(tmp_path: Path, shipped: str, section: str | None) -> Path:
    """A shipped config with `nonsense_key: 1` added at the top, or inside `section`."""
    data = yaml.safe_load((CONFIGS / shipped).read_text(encoding="utf-8"))
    (data[section] if section else data)["nonsense_key"] = 1
    path = tmp_path / Path(shipped).name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _run(main, argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# (the command, the shipped config it is given, the section the bad key goes in, the key's name in the message)
CASES = {
    "compare": ("eval", ["compare", "--out", "OUT"], "eval/sample.yaml", None, "nonsense_key"),
    "curve": ("eval", ["curve", "--out", "OUT"], "eval/curve.yaml", None, "nonsense_key"),
    "teacher": ("distill", ["generate", "--dialogues", "D", "--split", "train", "--out", "OUT"],
                "teacher/local.yaml", "pipeline", "pipeline.nonsense_key"),
    "train": ("train", [], "train/smollm2-cpu.yaml", None, "nonsense_key"),
}  # fmt: skip


@pytest.mark.parametrize("kind", CASES)
def test_a_bad_key_is_one_line_naming_the_file_and_the_key(kind, tmp_path, capsys):
    import importlib

    package, argv, shipped, section, key = CASES[kind]
    path = _with_key(tmp_path, shipped, section)
    main = importlib.import_module(f"{package}.__main__").main
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in argv] + ["--config", str(path)]
    err = _run(main, argv, capsys)
    assert str(path) in err and f"'{key}'" in err, err
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_quality_thresholds_name_the_file_and_the_key(tmp_path):
    from distill.quality.thresholds import QualityThresholds

    path = tmp_path / "thresholds.yaml"
    path.write_text("loop_word_repeats: 3\nloop_typo: 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{path}: field 'loop_typo': Extra inputs are not permitted$"):
        QualityThresholds.from_file(path)


@pytest.mark.parametrize(
    ("text", "reason"),
    [("a: [1,\n", "not valid YAML"), ("- 1\n- 2\n", "expected a mapping of key: value, got list")],
)
def test_a_file_that_is_not_a_mapping_is_one_line(tmp_path, text, reason):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigFileError) as err:
        read_mapping(path)
    assert str(err.value).startswith(f"{path}: {reason}") and "\n" not in str(err.value)
    with pytest.raises(ConfigFileError, match="no such config file"):
        read_mapping(tmp_path / "missing.yaml")


def test_a_nested_key_is_named_by_its_path(tmp_path):
    from eval.compare.systems import CompareConfig

    data = yaml.safe_load((CONFIGS / "eval" / "sample.yaml").read_text(encoding="utf-8"))
    data["systems"][1]["nme"] = "typo"
    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigFileError, match=rf"^{path}: field 'systems\.1\.nme': Extra inputs are not permitted$"):
        load_config(path, CompareConfig)


def _repeated(tmp_path: Path, shipped: str, pattern: str) -> tuple[Path, str, int]:
    """A shipped config with its first line matching `pattern` written twice; the copy, the key and its line."""
    lines = (CONFIGS / shipped).read_text(encoding="utf-8").splitlines()
    number = next(n for n, line in enumerate(lines, start=1) if re.match(pattern, line))
    path = tmp_path / Path(shipped).name
    path.write_text("\n".join([*lines[:number], *lines[number - 1 :]]) + "\n", encoding="utf-8")
    return path, lines[number - 1].split(":")[0].strip(), number


@pytest.mark.parametrize("kind", CASES)
def test_a_repeated_key_is_one_line_naming_the_file_the_key_and_both_lines(kind, tmp_path, capsys):
    """PyYAML keeps a repeated key's last value silently; every command's config refuses it instead."""
    import importlib

    package, argv, shipped, _, _ = CASES[kind]
    path, key, line = _repeated(tmp_path, shipped, r"^\w+:")  # the first top-level key
    main = importlib.import_module(f"{package}.__main__").main
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in argv] + ["--config", str(path)]
    err = _run(main, argv, capsys)
    assert err.endswith(f"{path}: key '{key}' given twice (lines {line} and {line + 1})"), err
    assert not (tmp_path / "out").exists()


def test_a_repeated_nested_key_is_refused_too(tmp_path, capsys):
    from distill.__main__ import main

    path, key, line = _repeated(tmp_path, "teacher/local.yaml", r"^  rag: ")  # inside `pipeline:`
    argv = ["generate", "--dialogues", "D", "--split", "train", "--out", str(tmp_path / "out"), "--config", str(path)]
    err = _run(main, argv, capsys)
    assert err.endswith(f"{path}: key 'rag' given twice (lines {line} and {line + 1})"), err


def test_a_repeated_key_in_a_quality_thresholds_file_is_refused(tmp_path):
    from distill.quality.thresholds import QualityThresholds

    path = tmp_path / "thresholds.yaml"
    path.write_text("loop_word_repeats: 3\nloop_word_repeats: 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{path}: key 'loop_word_repeats' given twice \(lines 1 and 2\)$"):
        QualityThresholds.from_file(path)
