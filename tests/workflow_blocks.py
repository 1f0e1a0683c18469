"""Run a page's bash blocks as a reader would: every command, in order, in a scratch folder, on the shipped sample.

The scratch folder sees the repository's `data_prep/` and `benchmarks/`, a copy of its `configs/` and the venv the
suite runs in as `.venv`, so every `runs/...` path is made by an earlier command of the page or the test fails:
nothing is edited by hand but sizes (and a train's card example, a sample answer decoded for the adapter card). Each
command that runs is started as a reader starts it: in a new bash whose PATH does not hold the venv, after the page's
own activation line, by the program it names (`python`, `trace-distill`).
A command that needs an API key, a GPU, a server left running or hours of CPU is not run: its `--help` is, and
every input path it names (and every path in the YAML it reads) must already exist, or be the output of an
earlier command treated the same way. A command that reads such an output is treated the same way. An install
command is not run: the files, make targets and extras it names must exist, and its torch be the Makefile's.
`make quickstart` runs the Makefile's recipe (`trace-distill quickstart --out runs/quickstart`) in the venv.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Why a command is shown its --help instead of run: matched against the joined command line.
NOT_RUN = {
    "configs/teacher/gpt4o.yaml": "needs an OpenAI API key",
    "configs/teacher/vllm-qwen.yaml": "needs a vLLM server",
    "configs/teacher/ollama-qwen.yaml": "needs an Ollama server",
    "configs/accelerate/single.yaml": "needs a GPU",
    "configs/accelerate/multi-gpu-ddp.yaml": "needs several GPUs",
    "configs/accelerate/fsdp.yaml": "needs several GPUs",
    "configs/accelerate/deepspeed-zero2.yaml": "needs several GPUs",
    "configs/eval/qwen0.5b-gpu.yaml": "needs a GPU (device: cuda)",
    "configs/eval/student-openai.yaml": "needs the server the command before it starts",
    "distill serve": "serves until stopped",
    "serve_vllm.sh": "needs a GPU and vLLM",
    "vllm serve": "needs a GPU and vLLM",
    "eval curve": "trains a dozen adapters (tests/test_curve.py runs a curve end to end)",
    "eval students": "trains three students to early stopping (tests/test_students*.py run them)",
    "benchmarks/ed_curve.sh": "trains and scores 400 real ED conversations (hours)",
    "distill batch": "needs an OpenAI API key",
}
# Smaller sizes for the commands that run (sizes only, never paths): the pages' own are for a reader.
SMALLER = {"--max_tokens_budget": "800", "--limit": "4"}
EVAL_LIMIT = "4"
# ... and in the shipped configs they read (copied, then edited): an eval scores 4 test dialogues, not all, and a
# CPU training step is 2 rows (an ESD-CoT row of ~400 tokens made a step of 8 the guide test's longest wait),
SMALLER_IN_CONFIGS = {
    "eval/sample.yaml": [("\nlimit: null", f"\nlimit: {EVAL_LIMIT}")],
    "eval/external-adapters.yaml": [("\nlimit: null", "\nlimit: 2")],
    "eval/escot-adapters.yaml": [("\nlimit: null", "\nlimit: 2")],
    "train/smollm2-cpu.yaml": [
        ("\nmax_tokens_budget: 60000", "\nmax_tokens_budget: 800"),
        ("\nper_device_train_batch_size: 8", "\nper_device_train_batch_size: 2"),
    ],
}
# ... a `train` writes no card example (it decodes up to the role's cap; tests/test_adapter_card.py checks it),
TRAIN, NO_CARD_EXAMPLE = ["trace-distill", "train"], ["--card_example", "false"]
# ... the quickstart runs tests/test_quickstart.py's sizes,
QUICKSTART_SMALL = ["--train-limit", "4", "--test-limit", "2", "--no-judge", "--no-card-example"]
QUICKSTART_SMALL += ["--role-budgets", "asi=400,cae=300,srp=300,ers=300"]
# ... a `generate` with no --limit (the teacher's test traces) traces only EVAL_LIMIT dialogues,
GENERATE = ["python", "-m", "distill", "generate"]
# ... and `distill datasets` holds out 1% as validation (an import's 1,195 chains: 12 conversations, not 119).
DATASETS, EVAL_FRACTION = ["python", "-m", "distill", "datasets"], "0.01"
ACTIVATE = [".", ".venv/bin/activate"]  # the pages' line: what makes `python` and `trace-distill` the venv's
INSTALLS = (["pip"], ["make", "clean-venv"], ["python3", "-m", "venv"], ["sudo"])
MAKE_QUICKSTART = ["trace-distill", "quickstart", "--out", "runs/quickstart"]  # the Makefile's recipe, OUT its default
INPUT_FLAGS = ("--config", "--config_file", "--dialogues", "--index", "--traces", "--adapters", "--dataset_name")
INPUT_FLAGS += ("--data", "--mapping", "--pipeline", "--responses", "--source")
OUTPUT_FLAGS = ("--out", "--output_dir")


def bash_commands(text: str) -> list[list[str]]:
    """Every command of the text's bash blocks, in order, continuation lines joined and `&&` chains split."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            while "&&" in argv:
                commands.append(argv[: argv.index("&&")])
                argv = argv[argv.index("&&") + 1 :]
            if argv:
                commands.append(argv)
    return commands


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def python_argv(argv: list[str]) -> list[str]:
    """The command as this interpreter runs it: `python` and the `trace-distill` console entry."""
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if argv[0] == "trace-distill":
        return [sys.executable, "-m", "eval.console", *argv[1:]]
    if argv[:2] == ["accelerate", "launch"]:  # the launched command, after --no_python
        return python_argv(argv[argv.index("--no_python") + 1 :])
    raise AssertionError(f"workflow command with an unknown program: {shlex.join(argv)}")


def is_install(argv: list[str]) -> bool:
    """pip, a new venv, or make with another torch (`TORCH_INDEX=`): it reinstalls before its target runs."""
    torch_index = argv[0] == "make" and any(a.startswith("TORCH_INDEX=") for a in argv)
    return torch_index or any(argv[: len(prefix)] == prefix for prefix in INSTALLS)


def make_target(argv: list[str]) -> list[str]:
    """`make quickstart` as the Makefile runs it (its venv is the suite's): `trace-distill quickstart --out $(OUT)`."""
    if argv != ["make", "quickstart"]:
        return argv
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "\ttrace-distill quickstart --out $(OUT) $(ARGS)" in makefile.replace("$(IN_VENV) ", "")
    assert "\nOUT := runs/quickstart\n" in makefile, "the Makefile's quickstart no longer writes runs/quickstart"
    return MAKE_QUICKSTART


def check_install(argv: list[str]) -> None:
    """An install line names files that exist, make targets, extras the package declares, and the Makefile's torch."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([\w-]+) = \[", section, re.M))
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = [a for a in argv[1:] if "=" not in a] if argv[0] == "make" else []
    assert all(re.search(rf"^{t}:", makefile, re.M) for t in targets), f"{shlex.join(argv)}: no such make target"
    for arg in argv:
        if arg.endswith(".txt"):
            assert (REPO / arg).is_file(), f"{shlex.join(argv)}: {arg} is not in the repository"
        if m := re.fullmatch(r"\.\[(.+)\]", arg):
            missing = set(m.group(1).split(",")) - extras
            assert not missing, f"{shlex.join(argv)}: no extra {sorted(missing)} in pyproject.toml"
        if arg.startswith("TORCH_INDEX="):
            assert "\nTORCH_INDEX ?=" in makefile, f"{shlex.join(argv)}: the Makefile has no TORCH_INDEX"
        if arg.startswith("torch=="):  # the torch `make setup` installs
            assert f"\nTORCH := {arg}\n" in makefile, f"{shlex.join(argv)}: the Makefile installs another torch"


def fresh_shell(cwd: Path) -> dict[str, str]:
    """The environment of a new shell: the suite's venv linked as the scratch folder's `.venv`, and a PATH
    without it (as `make test` and an activated shell have it), so a command finds the venv only by activating."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").is_file():
        pytest.skip(f"{venv} is no virtualenv: the pages' commands run in make's .venv (`make setup-dev`)")
    (cwd / ".venv").symlink_to(venv)
    bins = {str(venv / "bin"), str(Path(sys.executable).parent)}
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p not in bins)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "PATH": path, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))}


def in_shell(argv: list[str], activated: bool) -> list[str]:
    """The command as a reader types it in a new shell, after the page's activation line where it had one."""
    return ["bash", "-c", " && ".join([shlex.join(ACTIVATE)] * activated + [shlex.join(argv)])]


def _yaml(cwd: Path, path: str | None) -> dict:
    if not path or not path.endswith(".yaml") or not (cwd / path).is_file():
        return {}
    return yaml.safe_load((cwd / path).read_text(encoding="utf-8")) or {}


def is_script(argv: list[str]) -> bool:
    return argv[0] in ("bash", "sh")


def outputs_of(argv: list[str], cwd: Path) -> set[str]:
    if is_script(argv):  # a script's `runs/` arguments are the folders it writes
        return {a for a in argv[1:] if a.startswith("runs/") and not a.endswith(".sh")}
    outs = {v for f in OUTPUT_FLAGS if (v := flag(argv, f))}
    if "train" in argv and "export" not in argv and "--output_dir" not in argv:  # a train YAML names its output_dir
        outs.add(str(_yaml(cwd, flag(argv, "--config")).get("output_dir")))
    return outs


def inputs_of(argv: list[str], cwd: Path) -> list[str]:
    """Every path a command reads: its input flags, positional `runs/` paths, scripts, and the paths its YAML names."""
    if is_script(argv):  # the script, and the data and configs it is given
        return [a for a in argv[1:] if a.endswith(".sh") or a.startswith(("../shared/", "configs/"))]
    paths = [v for f in INPUT_FLAGS if (v := flag(argv, f))]
    paths += [a for a in argv if a.endswith(".sh") or a.startswith(("runs/", "../shared/"))]
    paths = [p for p in paths if p not in outputs_of(argv, cwd)]
    spec = _yaml(cwd, flag(argv, "--config"))
    if "train" in argv and "--dataset_name" not in argv:
        paths.append(spec.get("dataset_name"))
    if (flag(argv, "--config") or "").startswith("configs/eval/"):
        paths += [spec.get("dialogues"), spec.get("index"), spec.get("traces"), *(spec.get("data") or {}).values()]
        for system in spec.get("systems", []):
            adapters = (system.get("backend") or {}).get("adapters")
            paths += [system.get("traces"), *(adapters.values() if isinstance(adapters, dict) else [adapters])]
    return list(dict.fromkeys(p for p in paths if p))


@dataclass
class Scratch:
    """A scratch folder the commands of one or more pages run in, one after another. Its parent holds `shared`,
    a link to ../shared where the checkout has one, so a page's `../shared/data/...` paths read the real data."""

    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    not_run: dict[str, str] = field(default_factory=lambda: dict(NOT_RUN))
    virtual: set[str] = field(default_factory=set)  # what a command not run would have written
    ran: list[str] = field(default_factory=list)
    helped: list[str] = field(default_factory=list)
    activated: bool = False  # the page's activation line ran: a new shell finds the venv from here on

    @classmethod
    def make(cls, tmp_path: Path) -> Scratch:
        cwd = tmp_path / "repo"
        cwd.mkdir(parents=True)
        if SHARED.is_dir():
            (tmp_path / "shared").symlink_to(SHARED)
        for name in ("data_prep", "benchmarks"):
            (cwd / name).symlink_to(REPO / name)
        shutil.copytree(REPO / "configs", cwd / "configs")
        for name, edits in SMALLER_IN_CONFIGS.items():
            path = cwd / "configs" / name
            for size, smaller in edits:
                assert size in path.read_text(encoding="utf-8"), f"{name} no longer has {size.strip()!r}"
                path.write_text(path.read_text(encoding="utf-8").replace(size, smaller), encoding="utf-8")
        return cls(cwd, fresh_shell(cwd))

    def missing(self, argv: list[str]) -> list[str]:
        """Inputs nothing made; real data (../shared) is checked where the checkout has it."""
        real_data_absent = not SHARED.is_dir()
        paths = [p for p in inputs_of(argv, self.cwd) if not (real_data_absent and p.startswith("../shared/"))]
        return [p for p in paths if not (self.cwd / p).exists() and p not in self.virtual]

    def reason(self, argv: list[str]) -> str | None:
        """Why the command is not run, or None."""
        line = shlex.join(argv)
        if why := next((why for key, why in self.not_run.items() if key in line), None):
            return why
        path = next((p for p in inputs_of(argv, self.cwd) if p in self.virtual), None)
        return path and f"reads {path}, which a command not run writes"

    def run(self, commands: list[list[str]]) -> None:
        """Runs (or shows the --help of) every command in order, in a new shell: a page's activation line holds for
        its own commands after it."""
        self.activated, start = False, time.monotonic()
        for typed in commands:
            argv, line = make_target(typed), shlex.join(typed)
            if argv == ACTIVATE:
                self.activated = True
                continue
            if is_install(argv):
                check_install(argv)
                continue
            reason = self.reason(argv)
            if reason is not None:
                assert not self.missing(argv), f"{line}: {self.missing(argv)} not made by any step before it"
                self.virtual |= outputs_of(argv, self.cwd)
                if argv[0] not in ("python", "trace-distill", "accelerate"):
                    continue  # a script or another program: its paths were checked
                cmd, shown = [*python_argv(argv), "--help"], f"{line} --help"
                self.helped.append(line)
            else:
                # make runs its recipe in the venv (the Makefile's IN_VENV)
                cmd, shown = in_shell(smaller(argv), self.activated or typed[0] == "make"), line
                self.ran.append(line)
            proc = subprocess.run(cmd, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=1800)
            assert proc.returncode == 0, f"{shown}: exit {proc.returncode}:\n{proc.stderr[-3000:]}"
            print(f"{time.monotonic() - start:7.1f} s  {shown[:100]}")  # pytest -s shows where the time goes


def smaller(argv: list[str]) -> list[str]:
    """The command at the test's sizes: SMALLER's flags, the quickstart's, a generate's limit, a validation share,
    a train without its card example."""
    cmd = [SMALLER.get(prev, arg) for prev, arg in zip(["", *argv], argv)]
    if argv[:2] == ["trace-distill", "quickstart"]:
        cmd += QUICKSTART_SMALL
    if argv[:4] == GENERATE and "--limit" not in argv:
        cmd += ["--limit", EVAL_LIMIT]
    if argv[:4] == DATASETS and "--eval-fraction" not in argv:
        cmd += ["--eval-fraction", EVAL_FRACTION]
    if argv[:2] == TRAIN and argv[2:3] != ["export"] and "--card_example" not in argv:
        cmd += NO_CARD_EXAMPLE
    return cmd
