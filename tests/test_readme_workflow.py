"""The README's three workflows, run as written: every command of their bash blocks, in order, on the shipped sample.

The commands run in a scratch folder that sees the repository's `data_prep/`, a copy of its `configs/` and the
venv the suite runs in as `.venv`, so every `runs/...` path is made by an earlier command of the README or the
test fails: nothing is edited by hand but the sizes named below. Each command that runs is started as a reader
starts it: in a new bash whose PATH does not hold the venv, after the README's own activation line, by the
program it names (`python`, `trace-distill`).
A command that needs an API key, a GPU or a server left running is not run: its `--help` is, and every
input path it names (and, for an eval config, every path in that YAML) must already exist, or be the
output of an earlier command that was treated the same way.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from report_checks import assert_teacher_student_base_report

REPO = Path(__file__).resolve().parents[1]

# Why a command is shown its --help instead of run: matched against the joined command line.
NOT_RUN = {
    "configs/teacher/gpt4o.yaml": "needs an OpenAI API key",
    "configs/teacher/vllm-qwen.yaml": "needs a vLLM server",
    "configs/teacher/ollama-qwen.yaml": "needs an Ollama server",
    "configs/accelerate/single.yaml": "needs a GPU",
    "configs/accelerate/multi-gpu-ddp.yaml": "needs several GPUs",
    "configs/accelerate/fsdp.yaml": "needs several GPUs",
    "configs/accelerate/deepspeed-zero2.yaml": "needs several GPUs",
    "configs/eval/student-openai.yaml": "needs the server the command before it starts",
    "distill serve": "serves until stopped",
    "serve_vllm.sh": "needs a GPU and vLLM",
    "esd-cot": "needs ESD-CoT in ../shared/data (tests/test_import.py imports it)",
}
# Smaller sizes for the commands that run (sizes only, never paths): the README's own are for a reader.
SMALLER = {"--max_tokens_budget": "800", "--limit": "4"}
# ... and in the shipped configs they read (copied, then edited): the eval scores 4 test dialogues, not 14,
EVAL_LIMIT = "4"
SMALLER_IN_CONFIGS = {"eval/sample.yaml": ("\nlimit: null", f"\nlimit: {EVAL_LIMIT}")}
# ... so a `generate` with no --limit (the teacher's test traces) traces only those.
GENERATE = ["python", "-m", "distill", "generate"]
ACTIVATE = [".", ".venv/bin/activate"]  # the README's line: what makes `python` and `trace-distill` the venv's
INPUT_FLAGS = ("--config", "--config_file", "--dialogues", "--index", "--traces", "--adapters", "--dataset_name")
OUTPUT_FLAGS = ("--out", "--output_dir")


def workflow_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The three workflows") : text.index("## Results")]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                commands.append(argv)
    return commands


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def _python_argv(argv: list[str]) -> list[str]:
    """The command as this interpreter runs it: `python` and the `trace-distill` console entry."""
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if argv[0] == "trace-distill":
        return [sys.executable, "-m", "eval.console", *argv[1:]]
    if argv[:2] == ["accelerate", "launch"]:  # the launched command, after --no_python
        return _python_argv(argv[argv.index("--no_python") + 1 :])
    raise AssertionError(f"README workflow command with an unknown program: {shlex.join(argv)}")


def _fresh_shell(tmp_path: Path) -> dict[str, str]:
    """The environment of a new shell: the suite's venv linked as the scratch folder's `.venv`, and a PATH
    without it (as `make test` and an activated shell have it), so a command finds the venv only by activating."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").is_file():
        pytest.skip(f"{venv} is no virtualenv: the README's commands run in make's .venv (`make setup-dev`)")
    (tmp_path / ".venv").symlink_to(venv)
    bins = {str(venv / "bin"), str(Path(sys.executable).parent)}
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p not in bins)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "PATH": path, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))}


def _in_shell(argv: list[str], activated: bool) -> list[str]:
    """The command as a reader types it in a new shell, after the README's activation line where it had one."""
    return ["bash", "-c", " && ".join([shlex.join(ACTIVATE)] * activated + [shlex.join(argv)])]


def _outputs_of(argv: list[str], cwd: Path) -> set[str]:
    outs = {v for f in OUTPUT_FLAGS if (v := _flag(argv, f))}
    config = _flag(argv, "--config")
    if "train" in argv and config and (cwd / config).is_file():  # a train YAML names its output_dir
        outs.add(str(yaml.safe_load((cwd / config).read_text(encoding="utf-8")).get("output_dir")))
    return outs


def _check_inputs(argv: list[str], cwd: Path, virtual: set[str]) -> None:
    """Every input a command that is not run would read exists, or an earlier not-run command writes it."""
    paths = [v for f in INPUT_FLAGS if (v := _flag(argv, f))]
    config = _flag(argv, "--config")
    if config and config.startswith("configs/eval/"):
        spec = yaml.safe_load((cwd / config).read_text(encoding="utf-8"))
        paths += [spec["dialogues"], spec.get("index")] + [s["traces"] for s in spec["systems"] if "traces" in s]
    paths += [a for a in argv if a.endswith(".sh")]
    for path in filter(None, paths):
        assert (cwd / path).exists() or path in virtual, f"{shlex.join(argv)}: {path} is not made by any step before it"


@pytest.mark.slow
def test_readme_workflow_commands_connect(tmp_path):
    (tmp_path / "data_prep").symlink_to(REPO / "data_prep")
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    for name, (size, smaller) in SMALLER_IN_CONFIGS.items():
        path = tmp_path / "configs" / name
        assert size in path.read_text(encoding="utf-8"), f"{name} no longer has {size.strip()!r}"
        path.write_text(path.read_text(encoding="utf-8").replace(size, smaller), encoding="utf-8")
    env = _fresh_shell(tmp_path)
    commands = workflow_commands()
    ran, helped, virtual, activated = [], [], set(), False
    start = time.monotonic()
    for argv in commands:
        line = shlex.join(argv)
        if argv == ACTIVATE:
            activated = True
            continue
        reason = next((why for key, why in NOT_RUN.items() if key in line), None)
        if reason is None and argv[:3] == ["python", "-m", "distill"] and argv[3] == "batch":
            reason = "needs an OpenAI API key"
        if reason is not None:
            _check_inputs(argv, tmp_path, virtual)
            virtual |= _outputs_of(argv, tmp_path)
            if argv[0] == "sh":
                continue  # a script export wrote: _check_inputs saw that it is there
            cmd = [*_python_argv(argv), "--help"]
            helped.append(line)
        else:
            cmd = [SMALLER.get(prev, arg) for prev, arg in zip(["", *argv], argv)]
            cmd += ["--limit", EVAL_LIMIT] if argv[:4] == GENERATE and "--limit" not in argv else []
            cmd = _in_shell(cmd, activated)
            ran.append(line)
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
        shown = f"{line} --help" if reason else line
        assert proc.returncode == 0, f"{shown}: exit {proc.returncode}:\n{proc.stderr[-3000:]}"
        print(f"{time.monotonic() - start:7.1f} s  {shown[:100]}")  # pytest -s shows where the time goes
    # The path the issue asks for, end to end: sample traces, adapters, an eval report, a scored CSV.
    assert (tmp_path / "runs/sample/teacher-train/traces.jsonl").is_file()
    assert (tmp_path / "runs/adapters/asi/adapter_config.json").is_file()
    # its report is the end-to-end compare's: a stored teacher, the trained student and a generated base
    assert_teacher_student_base_report(tmp_path / "runs/sample/eval", n=int(EVAL_LIMIT))
    assert (tmp_path / "runs/export/serve_vllm.sh").is_file()
    assert (tmp_path / "runs/sample/score.json").is_file()
    assert len(ran) >= 9 and len(helped) >= 6, (ran, helped)
    assert activated  # the README says how a new shell finds the venv before its first command


def test_every_workflow_command_is_run_or_shown_its_help():
    """Fast: the README's workflow blocks parse, and each command is one this test knows how to run."""
    commands = workflow_commands()
    assert len(commands) >= 15
    assert commands[0] == ACTIVATE  # a new shell activates the venv before the first command
    for argv in commands[1:]:
        if argv[0] != "sh":
            assert _python_argv(argv)
    ran = [a for a in commands if not any(k in shlex.join(a) for k in NOT_RUN) and "batch" not in a]
    assert any(a[:4] == ["python", "-m", "eval", "compare"] for a in ran)
    assert any("--gold-emotion" in a for a in commands if "batch" in a)  # the Batch API keeps the gold guidance
