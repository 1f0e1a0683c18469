"""The README's three workflows, run as written: every command of their bash blocks, in order, on the shipped sample.

The machinery (a scratch folder, a new shell, what is run and what is shown its `--help`) is tests/workflow_blocks.py's,
shared with the guides' test (tests/test_guides_workflow.py): nothing is edited by hand but sizes.
"""

from __future__ import annotations

import shlex

import pytest
from report_checks import assert_teacher_student_base_report
from workflow_blocks import ACTIVATE, EVAL_LIMIT, NOT_RUN, REPO, Scratch, bash_commands, python_argv

# ESD-CoT's import reads ../shared/data: tests/test_import.py imports it, tests/test_guides_workflow.py runs its guide.
README_NOT_RUN = {**NOT_RUN, "esd-cot": "needs ESD-CoT in ../shared/data (tests/test_import.py imports it)"}


def workflow_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return bash_commands(text[text.index("## The three workflows") : text.index("## Results")])


@pytest.mark.slow
def test_readme_workflow_commands_connect(tmp_path):
    scratch = Scratch.make(tmp_path)
    scratch.not_run = README_NOT_RUN
    scratch.run(workflow_commands())
    cwd = scratch.cwd
    # The path the issue asks for, end to end: sample traces, adapters, an eval report, a scored CSV.
    assert (cwd / "runs/sample/teacher-train/traces.jsonl").is_file()
    assert (cwd / "runs/adapters/asi/adapter_config.json").is_file()
    # its report is the end-to-end compare's: a stored teacher, the trained student and a generated base
    assert_teacher_student_base_report(cwd / "runs/sample/eval", n=int(EVAL_LIMIT))
    assert (cwd / "runs/export/serve_vllm.sh").is_file()
    assert (cwd / "runs/sample/score.json").is_file()
    assert len(scratch.ran) >= 9 and len(scratch.helped) >= 6, (scratch.ran, scratch.helped)
    assert scratch.activated  # the README says how a new shell finds the venv before its first command


def test_every_workflow_command_is_run_or_shown_its_help():
    """Fast: the README's workflow blocks parse, and each command is one this test knows how to run."""
    commands = workflow_commands()
    assert len(commands) >= 15
    assert commands[0] == ACTIVATE  # a new shell activates the venv before the first command
    for argv in commands[1:]:
        if argv[0] != "sh":
            assert python_argv(argv)
    ran = [a for a in commands if not any(k in shlex.join(a) for k in README_NOT_RUN)]
    assert any(a[:4] == ["python", "-m", "eval", "compare"] for a in ran)
    assert any("--gold-emotion" in a for a in commands if "batch" in a)  # the Batch API keeps the gold guidance
