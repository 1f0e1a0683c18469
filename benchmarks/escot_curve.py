"""Do ChatGPT's reasoning chains pay? ESCoT's learning curve, from nothing, as one resumable command.

    python benchmarks/escot_curve.py --data ../shared/data/esd-cot --out runs/escot 150 400 1195 --full-chain

ESD-CoT's files (../shared/data/esd-cot/README.md) go through the toolkit's own path, nothing else: `distill
import` (one trace run per student's pipeline), `distill datasets`, `train`, `eval compare`. At each point N (the
first N train dialogues) three students learn from ChatGPT's chains, at equal training tokens summed over their
adapters (`--tokens-per-dialogue` x N, split evenly over a student's roles):

- `traces`: one adapter per link of the chain (em, sr, re; configs/pipelines/escot.yaml);
- `direct`: one adapter, the dialogue to the reply alone (escot-direct.yaml);
- `joint`: one adapter writing the whole chain as one answer, as ESCoT trains its 7B model (escot-joint.yaml).

`--full-chain` adds the point `fc200`: `full-chain` (em, es, ia, sr, re) on the 200 train dialogues that have every
link, against `traces` on the same 200. Every point's compare scores its students on the 341 test dialogues
beside ChatGPT's own chains (the reference: imported from test.json, with the gold strategy) and the prompted
pipeline (the untuned base with escot's teacher prompts, generated once).

Each stage is one subprocess, logged with its seconds and peak RSS (`os.wait4`) and recorded in
<out>/stages/<stage>.json; a rerun reuses a stage whose record names the same command (and, for a compare, the
same config), and the tools' own reuse covers a stage cut short (import adds only what is missing, train resumes
from its checkpoint, compare keeps the systems it stored). So a killed run resumes by running the same command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from data_prep.config_file import read_mapping

REPO = Path(__file__).resolve().parents[1]
INSTRUCTION_FILE, FULL_CHAIN_FILE, TEST_FILE = "train_em_sr_re.json", "train_full_chain_200.json", "test.json"
PIPELINES, MAPPINGS = "configs/pipelines", "configs/import"
TRAIN_CONFIG = "configs/train/smollm2-cpu.yaml"
FULL_CHAIN_POINT = "fc200"
TEACHER_PRICE = "gpt-3.5-turbo"  # ChatGPT's API: what the reference chains would cost (`eval.compare.cost`)


@dataclass(frozen=True)
class Student:
    name: str
    pipeline: str  # the declared pipeline it runs
    mapping: str  # how the train file becomes its trace run
    learns: str  # what its adapters learned, from whom (report.md and the record show it)
    full_chain: bool = False  # trained on train_full_chain_200.json, not on the instruction file


STUDENTS = {
    s.name: s
    for s in (
        Student(
            "traces", "escot.yaml", "esdcot-instruction.yaml", "em, sr, re: one adapter per link of ChatGPT's chain"
        ),
        Student("direct", "escot-direct.yaml", "esdcot-direct.yaml", "reply: the dialogue's reference reply alone"),
        Student("joint", "escot-joint.yaml", "esdcot-joint.yaml", "chain: ChatGPT's whole chain as one answer"),
        Student(
            "full-chain",
            "escot.yaml",
            "esdcot-full-chain.yaml",
            "em, es, ia, sr, re: one adapter per link of ChatGPT's full chain",
            full_chain=True,
        ),
    )
}
CURVE_STUDENTS = ("traces", "direct", "joint")
FULL_CHAIN_STUDENTS = ("traces", "full-chain")
ANSWERS = {  # the strategy and the emotion, wherever a student's pipeline answers them; the gold from test.json
    "label": ["sr.strategy", "chain.strategy"],
    "gold_label": "labels.strategy",
    "text": ["em.emotion", "chain.emotion"],
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- stages ----------------------------------------------------------------------------------------


def run_stage(out: Path, name: str, command: list[str], config: Optional[Path] = None) -> dict[str, Any]:
    """Run one stage's command (reused when its record names the same command and `config` holds the same text),
    timed, with its peak RSS."""
    record_path = out / "stages" / f"{name}.json"
    config_sha = hashlib.sha256(config.read_bytes()).hexdigest() if config else None
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if record["command"] == command and record.get("config_sha256") == config_sha:
            log(f"{name}: reused ({record['seconds']} s, peak RSS {record['peak_rss_mb']} MiB when it ran)")
            return record
    log(f"{name}: {shlex.join(command)}")
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = round(time.perf_counter() - start, 1)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"stage {name} failed (exit {code}) after {seconds} s: {shlex.join(command)}")
    record = {"stage": name, "command": command, "seconds": seconds, "peak_rss_mb": round(usage.ru_maxrss / 1024),
              "config_sha256": config_sha, "finished": round(time.time())}  # fmt: skip
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    log(f"{name}: {seconds} s, peak RSS {record['peak_rss_mb']} MiB")
    return record


def python(*args: Any) -> list[str]:
    return [sys.executable, *map(str, args)]


def import_run(data: Path, mapping: str, out: Path, split: str) -> list[str]:
    return python("-m", "distill", "import", "--data", data, "--mapping", f"{MAPPINGS}/{mapping}", "--split", split,
                  "--out", out)  # fmt: skip


# --- the train files of a point --------------------------------------------------------------------


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """A subset of a train file, written once: its content is fixed by the point, so a rerun finds it as it was."""
    text = json.dumps(rows, ensure_ascii=False)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path


def point_files(data: Path, out: Path, point: str) -> tuple[dict[str, Path], int]:
    """Each student's train file at a point, and its number of dialogues: the first N rows of the instruction file;
    at `fc200` the instruction rows of the 200 full-chain dialogues for `traces`, and the full-chain file itself
    for `full-chain`."""
    rows = json.loads((data / INSTRUCTION_FILE).read_text(encoding="utf-8"))
    if point != FULL_CHAIN_POINT:
        n = int(point)
        if not 0 < n <= len(rows):
            raise SystemExit(f"point {n}: the train file {data / INSTRUCTION_FILE} has {len(rows)} rows")
        return {"instruction": write_rows(rows[:n], out / "data" / f"train-{n}.json")}, n
    ids = {str(r["id"]) for r in json.loads((data / FULL_CHAIN_FILE).read_text(encoding="utf-8"))}
    subset = [r for r in rows if str(r["dialog_id"]) in ids]
    files = {"instruction": write_rows(subset, out / "data" / "train-fc200.json"), "full_chain": data / FULL_CHAIN_FILE}
    return files, len(ids)


# --- one student ------------------------------------------------------------------------------------


def roles_of(student: Student) -> list[str]:
    """The roles a student trains: its pipeline's, less those its mapping skips."""
    pipeline = read_mapping(REPO / PIPELINES / student.pipeline)
    skip = set(read_mapping(REPO / MAPPINGS / student.mapping).get("skip") or [])
    return [r["name"] for r in pipeline["roles"] if r["name"] not in skip]


def train_student(args, out: Path, point: str, student: Student, data: Path, budget: int) -> Path:
    """Import, datasets and train for one student; returns its adapters folder."""
    here = out / point
    traces, datasets, adapters = (here / kind / student.name for kind in ("imports", "datasets", "adapters"))
    roles = roles_of(student)
    run_stage(out, f"{point}-{student.name}-import", import_run(data, student.mapping, traces, "train"))
    run_stage(
        out,
        f"{point}-{student.name}-datasets",
        python("-m", "distill", "datasets", "--traces", traces, "--out", datasets, "--eval-fraction", "0"),
    )
    run_stage(out, f"{point}-{student.name}-train", python(
        "-m", "train", "--config", TRAIN_CONFIG, "--model_name_or_path", args.model,
        "--pipeline", f"{PIPELINES}/{student.pipeline}", "--dataset_name", datasets, "--roles", ",".join(roles),
        "--output_dir", adapters, "--max_tokens_budget", budget // len(roles), "--max_length", args.max_length,
        "--card_example", "false", "--resume", "true", "--save_steps", "0.5",
    ))  # fmt: skip
    return adapters


def student_system(args, student: Student, adapters: Path, n: int) -> dict[str, Any]:
    skip = read_mapping(REPO / MAPPINGS / student.mapping).get("skip") or []
    return {
        "name": student.name,
        "about": f"{student.learns}; trained on {n} train dialogues",
        "backend": {"type": "local", "model": args.model, "adapters": str(adapters), "batch_size": args.batch_size},
        "pipeline": {"pipeline": f"{PIPELINES}/{student.pipeline}", "skip": skip, "prompt_style": "student",
                     "use_adapters": True, "max_attempts": 1},
    }  # fmt: skip


# --- compare ----------------------------------------------------------------------------------------


def compare_config(args, out: Path, systems: list[dict[str, Any]]) -> dict[str, Any]:
    """A compare over the test dialogues (the imported test chains: they carry the gold strategy)."""
    about = "ChatGPT's chains, corrected by hand (ESD-CoT's test split, imported): the reference"
    chatgpt = {"name": "chatgpt", "traces": str(out / "imports" / "test"), "priced_as": TEACHER_PRICE, "about": about}
    return {
        "dialogues": str(out / "imports" / "test"),
        "split": "test",
        "limit": args.limit,
        "reference": "chatgpt",
        "systems": [chatgpt, *systems],
        "answers": ANSWERS,
        "ppl": {"model": args.model, "context": "response"},
        "bertscore": {"model": "minilm"},
    }


def run_compare(args, out: Path, where: Path, name: str, systems: list[dict[str, Any]]) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    config = where / "compare.yaml"
    config.write_text(yaml.safe_dump(compare_config(args, out, systems), sort_keys=False))
    run_stage(out, name, python("-m", "eval", "compare", "--config", config, "--out", where / "compare"), config)
    return where / "compare" / "report.json"


def prompted_system(args, out: Path) -> dict[str, Any]:
    """The untuned base with escot's teacher prompts (em, sr, re), generated once, then read as a trace run."""
    generated = {
        "name": "prompted",
        "about": "the untuned base with escot's teacher prompts (em, sr, re): the prompted pipeline",
        "backend": {"type": "local", "model": args.model, "batch_size": args.batch_size},
        "pipeline": {"pipeline": f"{PIPELINES}/escot.yaml", "skip": ["es", "ia"], "prompt_style": "teacher",
                     "max_attempts": 1},
    }  # fmt: skip
    run_compare(args, out, out / "prompted", "prompted-compare", [generated])
    run = out / "prompted" / "compare" / "systems" / "prompted"
    return {"name": "prompted", "about": generated["about"], "traces": str(run)}


def run_point(args, out: Path, point: str, prompted: dict[str, Any]) -> Path:
    files, n = point_files(Path(args.data), out, point)
    names = FULL_CHAIN_STUDENTS if point == FULL_CHAIN_POINT else CURVE_STUDENTS
    budget = args.tokens_per_dialogue * n
    systems = [prompted]
    for name in names:
        student = STUDENTS[name]
        data = files["full_chain" if student.full_chain else "instruction"]
        systems.append(student_system(args, student, train_student(args, out, point, student, data, budget), n))
    return run_compare(args, out, out / point, f"{point}-compare", systems)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("points", nargs="*", type=int, help="train dialogues per curve point (e.g. 150 400 1195)")
    parser.add_argument("--data", required=True, help="the esd-cot folder (../shared/data/esd-cot)")
    parser.add_argument("--out", required=True, help="where every stage writes (reused by a rerun)")
    parser.add_argument("--full-chain", action="store_true", help="also the fc200 point: full-chain vs traces")
    parser.add_argument("--model", default="smollm2-135m", help="the base model every student and the prompted run")
    parser.add_argument("--tokens-per-dialogue", type=int, default=400, help="each student's training tokens / N")
    parser.add_argument("--max-length", type=int, default=1024, help="train's max_length (tokens a row keeps)")
    parser.add_argument("--limit", type=int, default=None, help="score only the first test dialogues (a smoke run)")
    parser.add_argument("--batch-size", type=int, default=16, help="the local backend's batch size")
    args = parser.parse_args(argv)
    out, data = Path(args.out).resolve(), Path(args.data).resolve()
    args.data = str(data)
    run_stage(
        out, "import-test", import_run(data / TEST_FILE, "esdcot-full-chain.yaml", out / "imports" / "test", "test")
    )
    prompted = prompted_system(args, out)
    points = [str(n) for n in args.points]
    if args.full_chain:
        points.insert(min(1, len(points)), FULL_CHAIN_POINT)  # after the first point: it is cheap, and one of the four
    for point in points:
        report = run_point(args, out, point, prompted)
        log(f"point {point}: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
