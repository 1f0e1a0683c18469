"""The first hour: `make quickstart` from a fresh clone and a fresh HOME, timed whole, set-up included.

    python benchmarks/first_hour.py --name bf16 --out benchmarks/first_hour.json [--fp32] [--torch-index URL]
    python benchmarks/first_hour.py --name bf16 --out benchmarks/first_hour.json --summarise LOG CLONE

Clones this checkout's HEAD into a new folder, then runs `/usr/bin/time -v make quickstart` there with HOME a new
empty folder (no pip, Hugging Face or converted-model cache) and writes one row into `--out` (rows merge by
`--name`): the whole command's wall seconds, its peak RSS, the quickstart's own stages (its `stages.json`), the
rest (set-up, the model's conversion, start-up and reporting: the whole less the stages), the `result:` line, the
commit and the machine. Nothing else may run meanwhile: on 2 cores a second job changes every figure.
`--fp32` sets TRACE_DISTILL_AUTO_DTYPE=fp32, which stands in for a CPU without native bf16 (AVX2 only).
`--torch-index ''` searches no PyTorch index beside PyPI (a machine that reaches only PyPI and local wheels);
the row records the value. `--summarise` reads a log and clone made by hand with the same commands.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_flags, cpu_model  # noqa: E402
from eval.runner import Runner  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INDEX = "https://download.pytorch.org/whl/cpu"  # the Makefile's TORCH_INDEX
RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def fresh_run(torch_index: str, fp32: bool, work: Path) -> tuple[Path, Path, float]:
    """Clone HEAD into `work`, run `make quickstart` there with a fresh HOME; the log, the clone and the wall s."""
    clone, home, log = work / "clone", work / "home", work / "make-quickstart.log"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("TRACE_DISTILL_AUTO_DTYPE", None)
    if fp32:
        env["TRACE_DISTILL_AUTO_DTYPE"] = "fp32"
    command = ["/usr/bin/time", "-v", "make", "quickstart", f"TORCH_INDEX={torch_index}"]
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"make quickstart failed ({done.returncode}): see {log}")
    return log, clone, wall


def summarise(log: Path, clone: Path, wall: float) -> dict[str, Any]:
    """The row: the whole, its stages (the quickstart's stages.json), the rest, peak RSS and the result line."""
    text = log.read_text()
    stages = Runner(clone / "runs" / "quickstart").records  # its stages.json, read by the runner that writes it
    seconds = {name: round(stage["seconds"], 1) for name, stage in stages.items()}
    rss = RSS.findall(text)
    result = [line.strip() for line in text.splitlines() if line.strip().startswith("result:")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
    return {
        "commit": commit.stdout.strip(),
        "wall_s": round(wall, 1),
        "stages_s": round(sum(seconds.values()), 1),
        "rest_s": round(wall - sum(seconds.values()), 1),
        "stages": seconds,
        "peak_rss_gb": round(int(rss[-1]) / 1e6, 2) if rss else None,
        "result": result[-1] if result else None,
    }


def write_row(out: Path, name: str, row: dict[str, Any]) -> None:
    data = json.loads(out.read_text()) if out.is_file() else {"command": "python benchmarks/first_hour.py", "runs": []}
    data["runs"] = [run for run in data["runs"] if run["name"] != name] + [{"name": name, **row}]
    out.write_text(json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the row's name, e.g. bf16 or fp32-as-avx2")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fp32", action="store_true", help="TRACE_DISTILL_AUTO_DTYPE=fp32 (an AVX2 CPU's dtype)")
    parser.add_argument("--torch-index", default=DEFAULT_INDEX, help="the Makefile's TORCH_INDEX ('' for none)")
    parser.add_argument("--summarise", nargs=2, type=Path, metavar=("LOG", "CLONE"), help="a run made by hand")
    parser.add_argument("--wall", type=float, help="with --summarise: the hand run's wall seconds")
    args = parser.parse_args(argv)
    if args.summarise:
        if args.wall is None:
            parser.error("--summarise needs --wall")
        log, clone, wall = *args.summarise, args.wall
    else:
        log, clone, wall = fresh_run(args.torch_index, args.fp32, Path(tempfile.mkdtemp(prefix="first-hour-")))
    row = summarise(log, clone, wall)
    flags = cpu_flags()
    row.update(
        date=date.today().isoformat(), dtype="fp32" if args.fp32 or "avx512_bf16" not in flags else "bf16",
        fp32_stands_in_for_avx2=args.fp32, torch_index=args.torch_index,
        machine={"cpu": cpu_model(), "flags": flags, "cores": os.cpu_count()},
    )  # fmt: skip
    if args.summarise:
        row["by_hand"] = True  # the same commands, typed rather than started by this script
    write_row(args.out, args.name, row)
    print(json.dumps({args.name: row}, indent=2))


if __name__ == "__main__":
    main()
