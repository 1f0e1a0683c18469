"""`trace-distill quickstart`: the whole loop on the embedded default, offline, on a CPU.

1. prepare the shipped sample   2. build the exemplar index (train split)
3. gold-guided teacher traces   4. per-role SFT datasets   5. four LoRA adapters
6. teacher vs student vs untuned base on the test split   7. summary table + report.md path

Each stage calls the same command a user would run by hand, in this process. A rerun reuses
finished stages (the trace store skips finished dialogues, datasets and adapters that exist are
kept) and says so, so Ctrl-C or a kill leaves a run the next invocation resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CORE = ("asi", "cae", "srp", "ers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/quickstart", help="run folder; rerunning resumes it")
    parser.add_argument("--train-limit", type=int, default=48, help="train dialogues the teacher annotates")
    parser.add_argument("--test-limit", type=int, default=16, help="test dialogues every system is scored on")
    parser.add_argument("--max-tokens-budget", type=int, default=6000,
                        help="training tokens per role (the CPU trains ~50-100 tokens/s)")
    parser.add_argument("--judge", action=argparse.BooleanOptionalAction, default=True,
                        help="pairwise judge (the embedded model) of student and base against the teacher")


def _stage(n: int, title: str) -> float:
    print(f"\n== [{n}/7] {title}", flush=True)
    return time.perf_counter()


def _check(rc: int, what: str) -> None:
    if rc:
        raise SystemExit(f"quickstart: {what} failed (exit {rc}); rerun to resume from here")


def _eval_config(out: Path, test_limit: int, judge: bool) -> Path:
    local = {"type": "local", "model": "smollm2-135m", "dtype": "auto", "batch_size": 16}
    cfg = {
        "dialogues": str(out / "dialogues"), "split": "test", "limit": test_limit,
        "index": str(out / "index"), "reference": "teacher",
        "systems": [
            {"name": "teacher", "traces": str(out / "teacher-test")},
            {"name": "student", "backend": {**local, "adapters": str(out / "adapters")},
             "pipeline": {"prompt_style": "student", "use_adapters": True, "max_attempts": 2}},
            {"name": "base", "backend": local, "pipeline": {"prompt_style": "teacher", "max_attempts": 2}},
        ],
        "judge": {"backend": local, "against": "teacher", "aspects": ["empathy", "informativity", "fluency", "consistency"]} if judge else None,
        "ppl": {"model": "smollm2-135m", "context": "response"},
        "bertscore": {"model": "minilm"},
    }
    path = out / "eval-config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run(args: argparse.Namespace) -> int:
    from data_prep.__main__ import main as data_main
    from data_prep.loaders import SAMPLE_PATH
    from distill.__main__ import main as distill_main
    from eval.__main__ import main as eval_main
    from train.__main__ import main as train_main

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    t = _stage(1, "prepare the shipped sample")
    if (out / "dialogues" / "dataset_dict.json").is_file():
        print(f"reusing {out / 'dialogues'}")
    else:
        _check(data_main(["dialogues", "--source", str(SAMPLE_PATH), "--out", str(out / "dialogues")]), "dialogues")
    timings["prepare"] = time.perf_counter() - t

    t = _stage(2, "exemplar index over the train split")
    if (out / "index" / "index.json").is_file():
        print(f"reusing {out / 'index'}")
    else:
        _check(data_main(["index", "--dialogues", str(out / "dialogues"), "--split", "train", "--out", str(out / "index")]), "index")
    timings["index"] = time.perf_counter() - t

    t = _stage(3, "gold-guided teacher traces (train and test splits)")
    for split, limit in (("train", args.train_limit), ("test", args.test_limit)):
        gold = ["--gold-emotion"] if split == "train" else []  # the test-split teacher is scored: no gold hints
        _check(distill_main(["generate", "--config", str(CONFIGS / "teacher" / "local.yaml"), "--dialogues",
                             str(out / "dialogues"), "--split", split, "--limit", str(limit), "--index",
                             str(out / "index"), "--out", str(out / f"teacher-{split}"), *gold]), f"generate {split}")
    timings["traces"] = time.perf_counter() - t

    t = _stage(4, "per-role SFT datasets")
    if all((out / "datasets" / r / "dataset_dict.json").is_file() for r in CORE):
        print(f"reusing {out / 'datasets'}")
    else:
        _check(distill_main(["datasets", "--traces", str(out / "teacher-train"), "--out", str(out / "datasets"),
                             "--roles", ",".join(CORE)]), "datasets")
    timings["datasets"] = time.perf_counter() - t

    t = _stage(5, "LoRA adapters, one per role")
    todo = [r for r in CORE if not (out / "adapters" / r / "trace_distill_adapter.json").is_file()]
    if not todo:
        print(f"reusing {out / 'adapters'}")
    else:
        print(f"training {', '.join(todo)}" + (f" (reusing {', '.join(r for r in CORE if r not in todo)})" if len(todo) < 4 else ""))
        _check(train_main(["--config", str(CONFIGS / "train" / "all-roles.yaml"), "--datasets", str(out / "datasets"),
                           "--output_dir", str(out / "adapters"), "--roles", ",".join(todo),
                           "--max_tokens_budget", str(args.max_tokens_budget)]), "train")
    timings["train"] = time.perf_counter() - t

    t = _stage(6, "evaluate teacher, student and untuned base on the test split")
    _check(eval_main(["compare", "--config", str(_eval_config(out, args.test_limit, args.judge)), "--out", str(out / "eval")]), "eval compare")
    timings["eval"] = time.perf_counter() - t

    _stage(7, "summary")
    timings["total"] = time.perf_counter() - t0
    (out / "timings.json").write_text(json.dumps({k: round(v, 1) for k, v in timings.items()}, indent=2))
    report_md = out / "eval" / "report.md"
    print(report_md.read_text() if report_md.is_file() else "(no report.md)")
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    print(f"report: {report_md}")
    return 0


def main(argv: list[str] | None = None, prog: str = "trace-distill quickstart") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
