"""docs/reference/ is what the code writes (`python -m eval.reference write`): every config key of every model the
config loader validates against and every flag of every command, each with a description. A key or flag added
without its doc line (a description, and the page written again with `python -m eval.reference write`) fails
here."""

from __future__ import annotations

from typing import Optional

import pytest
from pydantic import Field, create_model

from eval import reference
from eval.compare.systems import CompareConfig


def test_the_reference_pages_are_what_the_code_writes():
    assert not reference.stale_pages(), "run `python -m eval.reference write` and commit docs/reference/"


def test_every_key_and_flag_has_a_description():
    assert not reference.undescribed()


@pytest.mark.parametrize("description", ["how many times to say it", None])
def test_a_new_key_changes_the_page_and_needs_a_description(monkeypatch, description):
    grown = create_model(
        "CompareConfig", __base__=CompareConfig, new_key=(Optional[int], Field(None, description=description))
    )
    before = reference.config_page()
    monkeypatch.setattr("eval.compare.systems.CompareConfig", grown)
    after = reference.config_page()
    assert after != before and f"- `new_key` (int | null), default `null`: {description or ''}".rstrip() in after
    assert ("compare.new_key" in reference.undescribed()) is (description is None)


def test_a_new_command_is_on_the_page(monkeypatch):
    import eval.__main__ as commands

    monkeypatch.setitem(commands.COMMANDS, "again", ("eval.compare.cli_compare", "compare, once more"))
    page = reference.commands_page()
    assert "## `python -m eval again`" in page and "compare, once more." in page


def test_the_check_command_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    for name, page in reference.PAGES.items():
        (tmp_path / name).write_text(page(), encoding="utf-8")
    monkeypatch.setattr(reference, "REFERENCE", tmp_path)
    assert reference.main(["write", "--check"]) == 0
    (tmp_path / "commands.md").write_text("# hand-edited\n", encoding="utf-8")
    assert reference.main(["write", "--check"]) == 1
    assert "commands.md differs from the code" in capsys.readouterr().out
