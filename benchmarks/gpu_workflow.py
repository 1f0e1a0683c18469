"""The README's GPU workflow, then `eval students` on ESD-CoT, as one timed run with its log, stage table and records.

    python benchmarks/gpu_workflow.py --device cuda --esdcot DIR --out OUT     # what gpu_check.sh runs on a GPU
    python benchmarks/gpu_workflow.py --device cpu --model TINY ...            # tests/test_gpu_workflow.py

Each stage is the command a user types, in its own process, from the repository root, on `--device`:

1. `data_prep dialogues` and `index` on `--source` (the shipped sample, as the README);
2. teacher traces: `distill generate` with configs/teacher/local.yaml (the local backend on the device): the train
   split gold-guided (`--train-limit`), then the test split (`--test-limit`);
3. `distill datasets`, then per role `accelerate launch --config_file configs/accelerate/single.yaml --no_python
   trace-distill train --config configs/train/qwen0.5b-gpu.yaml --model_name_or_path <model>` (`--train-flag`s
   after it; FlashAttention 2 where installed, else sdpa, as train's own refusal advises);
4. `eval compare` with configs/eval/qwen0.5b-gpu.yaml on the device (its model, paths and test limit replaced);
5. `eval students` with configs/eval/escot-students.yaml on the device (ESD-CoT from `--esdcot`; the GPU train
   config), once per growing seed list (42, then 42 43, ...): every run reuses the seeds before it, so a run cut by
   the budget still leaves the record of the seeds that finished;
6. `eval records write` of the compare and of each students run, into <out>/records, naming `--machine`.

The derived configs are written to <out>/configs. <out>/stages.json holds each stage's command, exit status, seconds,
peak GPU memory (nvidia-smi's memory.used on the device, sampled every 0.5 s; null without nvidia-smi) and peak RSS
of its process tree; <out>/log.txt every line the stages printed. `--budget-s` bounds the whole run: a stage gets
what is left (less a reserve for the records) and is stopped, and recorded as cut, when it runs out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
# Progress bars would fill the log with carriage returns: the stages' own lines say where each is.
QUIET = {"PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
RECORDS_RESERVE_S = 30  # what the records at the end take; no compute stage may spend it
ROLES = ("asi", "cae", "srp", "ers")  # the datasets the README's `distill datasets` writes, in pipeline order


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--out", type=Path, required=True, help="run folder")
    add("--device", choices=("cuda", "cpu"), default="cuda")
    add("--model", default="smollm2-135m", help="the base: the embedded model's alias, or a model folder")
    add("--source", default="data_prep/sample/ed_sample.csv", help="the dialogues (`data_prep dialogues --source`)")
    add("--train-limit", type=int, default=None, help="train dialogues the teacher traces (default: all)")
    add("--test-limit", type=int, default=None, help="test dialogues the teacher traces and the compare scores")
    add("--train-flag", action="append", default=[], metavar="KEY=VALUE", help="a train flag for the launches")
    add("--attn-implementation", default="auto", help="auto: flash_attention_2 where installed on cuda, else sdpa")
    add("--esdcot", type=Path, default=REPO.parent / "shared" / "data" / "esd-cot", help="ESD-CoT's folder")
    add("--students-config", type=Path, default=CONFIGS / "eval" / "escot-students.yaml")
    add("--students-n", type=int, default=1195, help="`eval students --n`")
    add("--seeds", type=int, nargs="+", default=[42, 43, 44], help="run once per growing seed list")
    add("--epochs", type=int, default=1, help="`eval students --epochs` (the config's 5 to convergence is hours)")
    add("--student", nargs="+", default=["traces", "direct"], help="`eval students --student`: the primary's pair")
    add("--students-limit", type=int, default=None, help="`eval students --limit` (default: all 341 test)")
    add("--students-flag", action="append", default=[], metavar="KEY=VALUE", help="a students train_flag")
    add("--budget-s", type=float, default=540.0, help="seconds the whole run may take")
    add("--machine", default=None, help="the records' machine line (default: the GPU's name, else the CPU's)")
    add("--commit", default=None, help="the records' commit (default: the checkout's HEAD)")


def key_values(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE flags, each value read as YAML (2 is an int, false a bool)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"gpu_workflow: expected KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def flag(value: Any) -> str:
    """A value as the train command line spells it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def attention(args: argparse.Namespace) -> str:
    """The attention the launches name: the GPU config's FlashAttention 2 where it can run, else sdpa."""
    if args.attn_implementation != "auto":
        return args.attn_implementation
    from importlib.util import find_spec

    return "flash_attention_2" if args.device == "cuda" and find_spec("flash_attn") else "sdpa"


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def teacher_config(args: argparse.Namespace) -> Path:
    config = yaml.safe_load((CONFIGS / "teacher" / "local.yaml").read_text(encoding="utf-8"))
    config["backend"].update(model=args.model, device=args.device)
    return write_yaml(args.out / "configs" / "teacher.yaml", config)


def compare_config(args: argparse.Namespace) -> Path:
    config = yaml.safe_load((CONFIGS / "eval" / "qwen0.5b-gpu.yaml").read_text(encoding="utf-8"))
    out = args.out.resolve()
    config.update(dialogues=str(out / "dialogues"), index=str(out / "index"), limit=args.test_limit)
    for system in config["systems"]:
        if "traces" in system:
            system["traces"] = str(out / "teacher-test")
        if "backend" in system:
            system["backend"].update(model=args.model, device=args.device)
            if "adapters" in system["backend"]:
                system["backend"]["adapters"] = str(out / "adapters")
    return write_yaml(args.out / "configs" / "compare.yaml", config)


def students_config(args: argparse.Namespace, attn: str) -> Path:
    """The students config on the device, the GPU train config and ESD-CoT's files from `--esdcot`."""
    config = yaml.safe_load(args.students_config.read_text(encoding="utf-8"))
    for split, path in (config.get("data") or {}).items():
        if path and args.esdcot.is_dir():
            config["data"][split] = str((args.esdcot / Path(path).name).resolve())
    config["backend"] = {**(config.get("backend") or {}), "model": args.model, "device": args.device}
    config["train_config"] = str(CONFIGS / "train" / "qwen0.5b-gpu.yaml")
    flags = {**(config.get("train_flags") or {}), "attn_implementation": attn, **key_values(args.students_flag)}
    config["train_flags"] = flags
    return write_yaml(args.out / "configs" / "students.yaml", config)


def workflow_stages(args: argparse.Namespace, attn: str) -> list[tuple[str, list[str]]]:
    """The README's GPU workflow: (stage name, command) in order."""
    out, py = args.out.resolve(), sys.executable
    teacher = str(teacher_config(args))
    limit = lambda n: ["--limit", str(n)] if n else []  # noqa: E731
    generate = [py, "-m", "distill", "generate", "--config", teacher, "--dialogues", str(out / "dialogues"),
                "--index", str(out / "index")]  # fmt: skip
    stages = [
        ("dialogues", [py, "-m", "data_prep", "dialogues", "--source", args.source, "--out", str(out / "dialogues")]),
        ("index", [py, "-m", "data_prep", "index", "--dialogues", str(out / "dialogues"), "--split", "train",
                   "--out", str(out / "index")]),
        ("teacher train traces", [*generate, "--split", "train", "--out", str(out / "teacher-train"), "--gold-emotion",
                                  *limit(args.train_limit)]),
        ("teacher test traces", [*generate, "--split", "test", "--out", str(out / "teacher-test"),
                                 *limit(args.test_limit)]),
        ("datasets", [py, "-m", "distill", "datasets", "--traces", str(out / "teacher-train"), "--out",
                      str(out / "datasets")]),
    ]  # fmt: skip
    launch = [py, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / "accelerate" / "single.yaml"),
              "--no_python", console_script(), "train", "--config",
              str(CONFIGS / "train" / "qwen0.5b-gpu.yaml"), "--model_name_or_path", args.model, "--dataset_name",
              str(out / "datasets"), "--output_dir", str(out / "adapters"), "--use_cpu", flag(args.device == "cpu"),
              "--attn_implementation", attn]  # fmt: skip
    flags = [x for key, value in key_values(args.train_flag).items() for x in (f"--{key}", flag(value))]
    stages += [(f"train {role}", [*launch, "--roles", role, *flags]) for role in ROLES]
    stages.append(("eval compare", [py, "-m", "eval", "compare", "--config", str(compare_config(args)), "--out",
                                    str(out / "eval")]))  # fmt: skip
    return stages


def students_stages(args: argparse.Namespace, attn: str) -> list[tuple[str, list[str]]]:
    """`eval students` once per growing seed list, each followed by its record."""
    out, py, config = args.out.resolve(), sys.executable, str(students_config(args, attn))
    stages = []
    for n in range(1, len(args.seeds) + 1):
        seeds = [str(s) for s in args.seeds[:n]]
        command = [
            py,
            "-m",
            "eval",
            "students",
            "--config",
            config,
            "--out",
            str(out / "students"),
            "--n",
            str(args.students_n),
            "--epochs",
            str(args.epochs),
            "--seeds",
            *seeds,
            "--student",
            *args.student,
        ]
        command += ["--limit", str(args.students_limit)] if args.students_limit else []
        stages.append((f"eval students (seeds {' '.join(seeds)})", command))
        stages.append(
            (
                f"record students (seeds {' '.join(seeds)})",
                record_command(args, "--students", str(out / "students"), f"gpu-students-{n}seed", command),
            )
        )
    return stages  # fmt: skip


def console_script() -> str:
    """This interpreter's `trace-distill` (a venv's bin), else the one on PATH."""
    beside = Path(sys.executable).parent / "trace-distill"
    return str(beside) if beside.is_file() else shutil.which("trace-distill") or "trace-distill"


def record_command(args: argparse.Namespace, source: str, value: str, name: str, made_by: list[str]) -> list[str]:
    shown = " ".join(Path(c).name if c == sys.executable else c for c in made_by)
    command = [sys.executable, "-m", "eval", "records", "write", source, value, "--name", name, "--command", shown,
               "--machine", machine(args), "--out", str(args.out.resolve() / "records")]  # fmt: skip
    return command + (["--commit", args.commit] if args.commit else [])


def machine(args: argparse.Namespace) -> str:
    if args.machine:
        return args.machine
    if args.device == "cuda" and shutil.which("nvidia-smi"):
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True).stdout.split("\n")  # fmt: skip
        return f"1x {names[0].strip()}" if names and names[0].strip() else "a GPU"
    from machine import cpu_flags, cpu_model  # the script directory is on sys.path

    return f"{os.cpu_count()}-core {cpu_model()} ({', '.join(cpu_flags())})"


class PeakMeter:
    """Peak GPU memory (nvidia-smi's memory.used, MiB) and peak RSS of a process tree (MiB), sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid, self.every, self.gpu, self.rss = pid, every, None, 0.0
        self.smi = shutil.which("nvidia-smi")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                root = psutil.Process(self.pid)
                tree = [root, *root.children(recursive=True)]
                self.rss = max(self.rss, sum(p.memory_info().rss for p in tree) / 2**20)
            except psutil.Error:  # the process ended between two samples
                pass
            if self.smi:
                used = subprocess.run([self.smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True).stdout.split()  # fmt: skip
                if used:
                    self.gpu = max(self.gpu or 0.0, float(used[0]))
            self._stop.wait(self.every)

    def stop(self) -> dict[str, Optional[float]]:
        self._stop.set()
        self._thread.join()
        return {"peak_gpu_mib": self.gpu, "peak_rss_mib": round(self.rss, 1)}


def run_stage(name: str, command: list[str], seconds_left: float, log) -> dict[str, Any]:
    """One stage in its own process group, its output to the console and the log; stopped when its time is up."""
    import signal

    say(log, f"== {name} ({seconds_left:.0f} s left): {' '.join(command)}")
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, **QUIET})  # fmt: skip
    meter = PeakMeter(proc.pid)
    timer = threading.Timer(max(seconds_left, 1.0), stop_group, (proc.pid, signal.SIGKILL))
    timer.start()
    for line in proc.stdout:
        log.write(line)
        print(line, end="", flush=True)
    rc = proc.wait()
    cut = not timer.is_alive() and rc != 0
    timer.cancel()
    result = {"stage": name, "command": command, "rc": rc, "seconds": round(time.monotonic() - start, 1),
              **meter.stop(), "cut_by_budget": cut}  # fmt: skip
    say(log, f"== {name}: rc {rc}, {result['seconds']} s, peak GPU {result['peak_gpu_mib']} MiB, "
             f"peak RSS {result['peak_rss_mib']} MiB" + (" (cut: the budget ran out)" if cut else ""))  # fmt: skip
    return result


def stop_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # it ended as the time ran out
        pass


def say(log, line: str) -> None:
    log.write(line + "\n")
    log.flush()
    print(line, flush=True)


def run_all(args: argparse.Namespace, stages: list[tuple[str, list[str]]], log) -> list[dict[str, Any]]:
    """Every stage in order; one whose input failed (`needs`) is skipped, as is any once the budget is spent. A
    records stage may spend the reserve the others leave it."""
    deadline = time.monotonic() + args.budget_s
    results: list[dict[str, Any]] = []
    done: dict[str, Optional[int]] = {}
    for name, command in stages:
        record = name.startswith("record")
        left = deadline - time.monotonic() - (0 if record else RECORDS_RESERVE_S)
        before = needs(name, [n for n, _ in stages])
        why = f"{before} did not finish" if before and done.get(before) != 0 else "no budget left" if left < 5 else ""
        if why:
            results.append({"stage": name, "command": command, "rc": None, "skipped": why})
            say(log, f"== {name}: skipped ({why})")
        else:
            results.append(run_stage(name, command, left, log))
        done[name] = results[-1]["rc"]
        (args.out / "stages.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def needs(name: str, order: list[str]) -> Optional[str]:
    """The stage whose output `name` reads: the one before it, except that the first students run reads none of the
    workflow's (ESD-CoT is its input) and each later one follows the students run before it, not its record."""
    earlier = order[: order.index(name)]
    if name.startswith("eval students"):
        runs = [n for n in earlier if n.startswith("eval students")]
        return runs[-1] if runs else None
    return earlier[-1] if earlier else None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    attn = attention(args)
    stages = workflow_stages(args, attn)
    out = args.out.resolve()
    stages.append(("record compare", record_command(args, "--compare", f"workflow={out / 'eval' / 'report.json'}",
                                                    "gpu-workflow", stages[-1][1])))  # fmt: skip
    stages += students_stages(args, attn)
    with open(args.out / "log.txt", "a", encoding="utf-8") as log:
        say(log, f"== gpu_workflow on {machine(args)}: device {args.device}, model {args.model}, attention {attn}, "
                 f"budget {args.budget_s:.0f} s")  # fmt: skip
        results = run_all(args, stages, log)
    (args.out / "stages.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
