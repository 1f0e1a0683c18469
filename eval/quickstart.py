"""`trace-distill quickstart`: the whole loop on the embedded default, offline, on a CPU.

1. prepare the shipped sample   2. build the exemplar index (train split)
3. gold-guided teacher traces   4. per-role SFT datasets   5. four LoRA adapters
6. teacher vs student vs untuned base on the test split   7. summary table + report.md path

Each stage calls the same command a user would run by hand, in this process. A rerun reuses
finished stages and says so: the trace store skips finished dialogues, and the index, the datasets and
each adapter are kept exactly while their stage key holds (`distill.pipeline.stage_key`: everything they
read). So Ctrl-C or a kill leaves a run the next invocation resumes, a larger --train-limit extends one,
and a smaller one trains on the traces of its first dialogues alone.

This module owns the command: its flags, the stage recipe (`STEPS`) and the run folder's checks. The lines it
prints after the report (the paired result, the teacher's quality) are `eval.quickstart_report`'s.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from data_prep.config_file import read_mapping
from distill.roles.roles import DEFAULT_STAGES
from distill.roles.trace_data import QUICKSTART_BUDGETS, QUICKSTART_LEARNING_RATES
from eval.quickstart_report import headline, teacher_quality

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _positive(text: str) -> int:
    """An argparse type: sizes are checked when parsed, before any stage runs (a bad one used to fail
    only after data prep and indexing, in a message about another command's flag)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


# where the training goes, per role: distill.roles.trace_data says why
ROLE_BUDGETS = dict(QUICKSTART_BUDGETS)
ROLE_LEARNING_RATES = dict(QUICKSTART_LEARNING_RATES)
# The shipped sample is split with a larger test share than a corpus needs (51 test dialogues against 14 at
# 0.8,0.1,0.1), so that the student-vs-teacher difference can be told from noise.
SAMPLE_SPLIT_RATIOS = "0.6,0.1,0.3"


def _budgets(text: str) -> dict[str, int]:
    """`asi=12000,ers=8000`: the named roles' budgets over the defaults (checked when parsed)."""
    budgets = dict(ROLE_BUDGETS)
    for item in filter(None, text.split(",")):
        role, _, tokens = item.partition("=")
        if role.strip() not in ROLE_BUDGETS:
            raise argparse.ArgumentTypeError(f"unknown role {role.strip()!r} (roles: {', '.join(ROLE_BUDGETS)})")
        budgets[role.strip()] = _positive(tokens)
    return budgets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/quickstart", help="run folder; rerunning resumes it")
    parser.add_argument(
        "--source",
        default=None,
        help="dialogues to run on (any `data_prep dialogues --source`); default: the shipped sample. "
        "The real-data experiment passes ../shared/data/ed_ekman_dev.csv",
    )
    parser.add_argument(
        "--split-ratios",
        default=None,
        metavar="TRAIN,VAL,TEST",
        help=f"split of a source without splits; the shipped sample's is {SAMPLE_SPLIT_RATIOS} "
        "(the real-data experiment uses 0.8,0,0.2)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of that split")
    parser.add_argument(
        "--require-gold-emotion",
        action="store_true",
        help="SFT datasets keep only traces whose asi emotion is the gold label (STaR filter)",
    )
    parser.add_argument("--train-limit", type=_positive, default=48, help="train dialogues the teacher annotates")
    parser.add_argument(
        "--test-limit", type=_positive, default=48, help="test dialogues every system is scored on (the sample has 51)"
    )
    parser.add_argument(
        "--max-tokens-budget",
        type=_positive,
        default=None,
        help="training tokens for every role, in place of --role-budgets' (a 2-core CPU trains a few hundred/s)",
    )
    parser.add_argument(
        "--role-budgets",
        type=_budgets,
        default=dict(ROLE_BUDGETS),
        metavar="ROLE=TOKENS,...",
        help="training tokens per role; default "
        + ",".join(f"{r}={n}" for r, n in ROLE_BUDGETS.items())
        + ": most where the student has the most to learn (the emotion and the reply); learning rates "
        + ",".join(f"{r}={x:g}" for r, x in ROLE_LEARNING_RATES.items()),
    )
    parser.add_argument(
        "--judge",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="pairwise judge (the embedded model) of the student against the teacher; off by default, since a 135M "
        "judge calls nearly every pair a tie",
    )
    parser.add_argument(
        "--card-example",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each adapter's model card shows its answer to a validation prompt (one greedy decode per role)",
    )


def _stage(n: int, title: str) -> float:
    print(f"\n== [{n}/7] {title}", flush=True)
    return time.perf_counter()


def _check(rc: int, what: str) -> None:
    if rc == 2:  # a refusal (data_prep.commands): its line above says why, and a rerun meets it again
        raise SystemExit(f"quickstart: {what} refused its input (the line above says why and what to change)")
    if rc:
        raise SystemExit(f"quickstart: {what} failed (exit {rc}); rerun to resume from here")


SAMPLE_EVAL = CONFIGS / "eval" / "sample.yaml"
# sample.yaml's run folders, and where the quickstart keeps them
_SAMPLE_PATHS = {"runs/sample/": "", "runs/adapters": "adapters"}


def _in_run(value, out: Path):
    """`value` (a config tree) with sample.yaml's run folders moved under `out`."""
    if isinstance(value, dict):
        return {k: _in_run(v, out) for k, v in value.items()}
    if isinstance(value, list):
        return [_in_run(v, out) for v in value]
    for old, new in _SAMPLE_PATHS.items():
        if isinstance(value, str) and value.startswith(old):
            return str(out / new / value[len(old) :])
    return value


def _eval_config(out: Path, test_limit: int, judge: bool) -> Path:
    """configs/eval/sample.yaml itself, its folders under `out`, `--test-limit` and `--no-judge` applied."""
    cfg = _in_run(read_mapping(SAMPLE_EVAL), out)
    cfg["limit"] = test_limit
    cfg["judge"] = cfg["judge"] if judge else None
    # The untuned base with the teacher's prompts is the control, and here the teacher *is* that model with
    # those prompts and decoding: a base row would repeat the teacher's outputs, so the teacher is the control.
    about = {"teacher": TEACHER_ABOUT, "student": STUDENT_ABOUT}
    cfg["systems"] = [{**s, "about": about[s["name"]]} for s in cfg["systems"] if s["name"] in about]
    path = out / "eval-config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


TEACHER_ABOUT = (
    "the untuned embedded model with TRACE's full prompts and retrieved exemplars, not told the emotion: "
    "the teacher as it runs at test time, and so also the untuned base"
)
STUDENT_ABOUT = (
    "the same model with one LoRA adapter per role and compact prompts, trained on the teacher's train traces: "
    "emotions from the teacher told the true emotion (gold-guided, STaR), causes and strategies from the "
    "teacher, replies from the human listeners"
)


def _check_same_data(out: Path, source: str, split_ratios: str | None, seed: int, default: str) -> None:
    """A run folder belongs to one source (its content too) and split: refuse to resume it with different ones.
    A quickstart.json from before the content was recorded gets it (the file it names is taken as it is)."""
    from distill.pipeline.stage_key import content_fingerprint

    stamp = out / "quickstart.json"
    want = {"source": source, "split_ratios": split_ratios, "seed": seed, "source_content": content_fingerprint(source)}
    if stamp.is_file():
        have = json.loads(stamp.read_text())
        have.setdefault("source_content", want["source_content"])
        if have != want:
            diff = ", ".join(f"{k} {have.get(k)!r} -> {v!r}" for k, v in want.items() if have.get(k) != v)
            raise SystemExit(f"quickstart: {out} was made with other data ({diff}); pass a new --out")
    elif (out / "dialogues").exists() and (source, split_ratios, seed) != (default, SAMPLE_SPLIT_RATIOS, 0):
        raise SystemExit(f"quickstart: {out} holds dialogues from an unknown source; pass a new --out")
    stamp.write_text(json.dumps(want, indent=2))


def _datasets_inputs(out: Path, args: argparse.Namespace) -> dict:
    """Everything the datasets are built from: the teacher's train run (traces, record, quality checks), the
    dialogues whose traces they read (the first --train-limit), the options and the student prompts."""
    from distill.pipeline.stage_key import content_fingerprint, prompt_fingerprint

    return {
        "teacher traces": content_fingerprint(out / "teacher-train"),
        "train limit": args.train_limit,
        "dialogues": content_fingerprint(out / "dialogues"),
        "options": {"require_gold_emotion": args.require_gold_emotion, "ers_target": "gold"},
        "student prompts": prompt_fingerprint("student"),
    }


def _run_cli(package: str, argv: list[str], what: str) -> None:
    """Run `python -m <package> <argv>` in this process: the command a user would type."""
    import shlex

    from data_prep.__main__ import main as data_prep_main
    from distill.__main__ import main as distill_main
    from eval.__main__ import main as eval_main

    mains = {"data_prep": data_prep_main, "distill": distill_main, "eval": eval_main}
    print(f"$ python -m {package} {shlex.join(argv)}", flush=True)
    _check(mains[package](argv), what)


# Each step returns why it ran, or None when it reused what a finished run left (the runner's `Stage.run`).


def step_dialogues(out: Path, args: argparse.Namespace, source: str) -> Optional[str]:
    if (out / "dialogues" / "dataset_dict.json").is_file():
        print(f"reusing {out / 'dialogues'}")
        return None
    ratios = ["--split-ratios", args.split_ratios] if args.split_ratios else []
    argv = ["dialogues", "--source", source, "--out", str(out / "dialogues"), "--seed", str(args.seed), *ratios]
    _run_cli("data_prep", argv, "dialogues")
    return "not prepared yet"


def step_index(out: Path, args: argparse.Namespace, source: str) -> Optional[str]:
    from distill.pipeline.stage_key import content_fingerprint, regenerating, stale, write_key

    inputs = {"dialogues": content_fingerprint(out / "dialogues")}
    built = (out / "index" / "index.json").is_file()
    why = stale(out / "index", inputs, migrate=lambda: None) if built else "not built yet"  # built before keys: kept
    if why is None:
        print(f"reusing {out / 'index'}")
        return None
    if built:
        regenerating(str(out / "index"), why)
    argv = ["index", "--dialogues", str(out / "dialogues"), "--split", "train", "--out", str(out / "index")]
    _run_cli("data_prep", argv, "index")
    write_key(out / "index", inputs)
    return why


def step_traces(out: Path, args: argparse.Namespace, source: str) -> str:
    for split, limit in (("train", args.train_limit), ("test", args.test_limit)):
        gold = ["--gold-emotion"] if split == "train" else []  # the test-split teacher is scored: no gold hints
        argv = ["generate", "--config", str(CONFIGS / "teacher" / "local.yaml"), "--dialogues", str(out / "dialogues")]
        argv += ["--split", split, "--limit", str(limit), "--index", str(out / "index")]
        _run_cli("distill", [*argv, "--out", str(out / f"teacher-{split}"), *gold], f"generate {split}")
    # the quality checks over the traces the students learn from (of the quickstart's roles, only cae's
    # failures drop rows: asi and srp learn the label alone and ers the human reply, which no check reads)
    _run_cli("distill", ["inspect", str(out / "teacher-train")], "inspect")
    return "each trace store adds the dialogues it lacks"


def step_datasets(out: Path, args: argparse.Namespace, source: str) -> Optional[str]:
    from distill.pipeline.stage_key import regenerating, stale, write_key

    inputs = _datasets_inputs(out, args)
    built = all((out / "datasets" / r / "dataset_dict.json").is_file() for r in DEFAULT_STAGES)
    why = stale(out / "datasets", inputs) if built else "not built yet"
    if why is None:
        print(f"reusing {out / 'datasets'}")
        return None
    if built:
        regenerating(str(out / "datasets"), why)
    argv = ["datasets", "--traces", str(out / "teacher-train"), "--out", str(out / "datasets")]
    # the teacher's traces of the first --train-limit dialogues: a run made with a larger limit keeps more
    argv += ["--roles", ",".join(DEFAULT_STAGES), "--limit", str(args.train_limit)]
    # the student's replies are learnt from the human ones: a 135M teacher's replies are often
    # fragments, and those would be its targets
    argv += ["--ers-target", "gold", *(["--require-gold-emotion"] if args.require_gold_emotion else [])]
    _run_cli("distill", argv, "datasets")
    write_key(out / "datasets", inputs)
    return why


def step_adapters(out: Path, args: argparse.Namespace, source: str) -> Optional[str]:
    from eval.curve.adapter_runs import train_stale

    options = {
        r: {
            "max_tokens_budget": args.max_tokens_budget or args.role_budgets[r],
            "learning_rate": ROLE_LEARNING_RATES[r],
        }
        for r in DEFAULT_STAGES
    }
    if not train_stale(out / "datasets", out / "adapters", options, card_example=args.card_example):
        print(f"reusing {out / 'adapters'}")
        return None
    return "a role's adapter was missing or stale (the lines above name it)"


def step_eval(out: Path, args: argparse.Namespace, source: str) -> str:
    config = _eval_config(out, args.test_limit, args.judge)
    _run_cli("eval", ["compare", "--config", str(config), "--out", str(out / "eval")], "eval compare")
    _cards_with_eval(out)
    return "eval compare reuses each system's stored replies and scores while their keys hold"


# The whole loop: each step runs the command a user would type, and skips what a rerun can reuse. Each is a
# stage of the one runner (eval.runner): name, output folder, title, step.
STEPS = (
    ("prepare", "dialogues", "prepare the dialogues", step_dialogues),
    ("index", "index", "exemplar index over the train split", step_index),
    ("traces", "teacher-train", "gold-guided teacher traces (train and test splits)", step_traces),
    ("datasets", "datasets", "per-role SFT datasets", step_datasets),
    ("train", "adapters", "LoRA adapters, one per role", step_adapters),
    ("eval", "eval", "evaluate teacher, student and untuned base on the test split", step_eval),
)


def run(args: argparse.Namespace) -> int:
    from data_prep.loaders import SAMPLE_PATH

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    source = str(Path(args.source).resolve()) if args.source else str(SAMPLE_PATH)
    if not args.source and args.split_ratios is None:
        args.split_ratios = SAMPLE_SPLIT_RATIOS
    _check_same_data(out, source, args.split_ratios, args.seed, default=str(SAMPLE_PATH))
    timings = _run_steps(out, args, source)
    report_md = out / "eval" / "report.md"
    print(report_md.read_text() if report_md.is_file() else "(no report.md)")
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    print(f"report: {report_md}")
    print(headline(out / "eval" / "report.json"))
    print(teacher_quality(out / "teacher-train"))
    return 0


def _run_steps(out: Path, args: argparse.Namespace, source: str) -> dict[str, float]:
    """Every step through the runner (its seconds and peak RSS in `<out>/stages.json`); this invocation's seconds."""
    from eval.runner import Runner, Stage

    runner, timings = Runner(out), {}
    t0 = time.perf_counter()
    for n, (name, folder, title, step) in enumerate(STEPS, 1):
        t = _stage(n, title + (" (the shipped sample)" if name == "prepare" and not args.source else ""))
        runner.run(Stage(name, out / folder, functools.partial(step, out, args, source)))
        timings[name] = time.perf_counter() - t
    _stage(7, "summary")
    timings["total"] = time.perf_counter() - t0
    return timings


def _cards_with_eval(out: Path) -> None:
    """The adapters' model cards gain the student's figures from this run's report."""
    from distill.adapters.adapters import find_adapters
    from eval.compare.report import system_figures
    from train.adapter_card import write_adapter_card

    figures = system_figures(json.loads((out / "eval" / "report.json").read_text()), "student")
    for folder in find_adapters(out / "adapters").values():
        write_adapter_card(folder, figures=figures)


def main(argv: list[str] | None = None, prog: str = "trace-distill quickstart") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
