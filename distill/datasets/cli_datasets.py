"""`python -m distill datasets`: turn a trace run into one SFT dataset per role (and push them)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from distill.datasets.sft_data import (
    SPLITS,
    BuildReport,
    DatasetOptions,
    build_role_datasets,
    save_role_datasets,
    with_validation_run,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", required=True, help="trace run directory (holds traces.jsonl and run.json)")
    parser.add_argument("--out", required=True, help="output directory; each role is saved to <out>/<role>/")
    parser.add_argument("--roles", default="all", help="comma-separated roles, or 'all' (the core roles, as in train)")
    add_row_filters(parser)
    parser.add_argument(
        "--joint",
        action="store_true",
        help="also write <out>/joint: every built role's rows in one dataset, for one adapter that serves all "
        "roles (train --roles joint)",
    )
    parser.add_argument(
        "--eval-fraction", type=float, default=0.1, help="share of conversations held out as validation"
    )
    parser.add_argument(
        "--validation-traces",
        default=None,
        help="a trace run whose rows are every role's validation split (e.g. an import of the data's own validation "
        "file); every --traces row then trains, and --eval-fraction is not used",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the conversation-level split")
    parser.add_argument("--split", default=None, help="use only traces of this dialogue split (if the run records one)")
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="use only the traces of the first N dialogues of the run's split, as `distill generate --limit N` "
        "picks them (a run extended to more dialogues still trains on N)",
    )
    parser.add_argument(
        "--push-to-hub",
        default=None,
        metavar="REPO_ID",
        help="also push every role as one hub dataset with a config per role (staged in <out>/hub/ first)",
    )
    parser.add_argument("--hub-license", default="cc-by-nc-4.0", help="license on the hub card (EmpatheticDialogues')")
    parser.add_argument("--hub-private", action="store_true", help="create the hub dataset as private")


USER_ERRORS = (ValueError,)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    from distill.datasets.dataset_card import read_run

    if not 0 <= args.eval_fraction < 1:
        raise ValueError(f"--eval-fraction must be in [0, 1), got {args.eval_fraction}")
    if not 0 < args.rationale_share <= 1:
        raise ValueError(f"--rationale-share must be in (0, 1], got {args.rationale_share}")
    traces, info, problems = read_run(Path(args.traces))
    if args.limit is not None:
        traces = first_dialogues(traces, info, args.limit, args.traces)
    roles = None if args.roles == "all" else [r.strip() for r in args.roles.split(",") if r.strip()]
    options = DatasetOptions(
        require_gold_emotion=args.require_gold_emotion,
        ers_target=args.ers_target,
        dedup=not args.no_dedup,
        eval_fraction=0.0 if args.validation_traces else args.eval_fraction,
        seed=args.seed,
        split=args.split,
        balance_emotions=args.balance_emotions,
        inputs=args.inputs,
        rationale=args.rationale,
        rationale_share=args.rationale_share,
        quality=args.quality,
        quality_thresholds=_changed_thresholds(args.quality_thresholds),
        keep_unfiltered_when_empty=args.keep_unfiltered_when_empty,
    )
    report = BuildReport(problems=list(problems))
    built = build_role_datasets(traces, roles, options, report, info)
    if args.validation_traces and built:
        held_traces, held_info, _ = read_run(Path(args.validation_traces))
        built = with_validation_run(built, held_traces, held_info, options, report, args.validation_traces)
    for line in report.lines():
        print(line, file=sys.stderr)
    if report.emptied:  # before anything is saved: no role of this build sits beside an older build's
        thresholds = f"the thresholds of {args.quality_thresholds}" if args.quality_thresholds else "the thresholds"
        failed = "; ".join(f"role {role}: {why}" for role, why in report.emptied.items())
        raise ValueError(
            f"{args.traces}: {failed}; nothing saved: loosen {thresholds}, fix the teacher, or pass "
            "--keep-unfiltered-when-empty to train on the rows unfiltered"
        )
    out = Path(args.out)
    save_role_datasets(built, out, traces, info, options, report, Path(args.traces))
    if args.joint and built:
        from distill.datasets.sft_tasks import JOINT, joint_dataset

        joint_dataset(built, args.seed).save_to_disk(str(out / JOINT), num_shards={s: 1 for s in SPLITS})
    if not built:
        print(f"error: no role dataset built from {len(traces)} traces in {args.traces}", file=sys.stderr)
        return 1
    print(json.dumps({role: str(out / role) for role in built}))
    return push_hub_dataset(out, list(built), args) if args.push_to_hub else 0


def first_dialogues(traces: list, info, limit: int, run_dir: str) -> list:
    """The traces of the first `limit` dialogues of the split the run records, each on the very dialogue the
    split holds today (a trace of an older version of it is left out)."""
    from data_prep.loaders import load_split

    if limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    if info is None or not info.split or not info.source.get("dialogues"):
        raise ValueError(f"{run_dir}: run.json records no dialogues and split; --limit needs them")
    wanted = {d.id: d for d in load_split(info.source["dialogues"], info.split)[:limit]}
    return [t for t in traces if wanted.get(t.dialogue.id) == t.dialogue]


def _changed_thresholds(path: str | None) -> dict:
    """The QualityThresholds fields a file changes (checked here, so a bad file fails before any work)."""
    from distill.quality.thresholds import QualityThresholds

    return QualityThresholds.from_file(path).model_dump(exclude_defaults=True)


def add_row_filters(parser: argparse.ArgumentParser) -> None:
    """The options that choose which rows a role's dataset keeps and what their targets and inputs are."""
    parser.add_argument(
        "--require-gold-emotion",
        action="store_true",
        help="keep only traces whose asi emotion equals the gold Ekman label",
    )
    parser.add_argument(
        "--ers-target",
        choices=("teacher", "gold"),
        default="teacher",
        help="ers completion: the teacher's reply or the human gold reply",
    )
    parser.add_argument(
        "--balance-emotions",
        action="store_true",
        help="asi train split: repeat rows of rarer emotions until each emotion has as many as the commonest",
    )
    parser.add_argument(
        "--inputs",
        choices=("pipeline", "direct"),
        default="pipeline",
        help="direct: the fine-tuning baseline, the dialogue in and the data's gold answer out (asi, ers), "
        "no teacher rationale and no upstream role output",
    )
    parser.add_argument(
        "--rationale",
        choices=("teacher", "situation"),
        default=None,
        help="asi/srp train rows gain a rationale-task twin (Distilling step-by-step): the teacher's reasoning, "
        "or ED's situation text as a human-written stand-in; the student still answers the label task alone",
    )
    parser.add_argument(
        "--rationale-share", type=float, default=1.0, help="share of label rows that get a rationale twin (seeded)"
    )
    parser.add_argument(
        "--quality",
        choices=("filter", "report", "off"),
        default="filter",
        help="the trace quality checks (docs/quality.md) on each row's own role output: filter drops a row that "
        "fails one, report keeps it and counts, off runs none",
    )
    parser.add_argument(
        "--quality-thresholds", default=None, help="YAML of QualityThresholds fields to change (docs/quality.md)"
    )
    parser.add_argument(
        "--keep-unfiltered-when-empty",
        action="store_true",
        help="when the quality filter would leave a role no rows to train on, keep its rows unfiltered (the card "
        "says so) instead of failing the role",
    )
    parser.add_argument("--no-dedup", action="store_true", help="keep duplicate (prompt, completion) pairs")


def push_hub_dataset(out: Path, roles: list[str], args: argparse.Namespace) -> int:
    """Stage the saved role datasets as one hub dataset in `<out>/hub/` and upload it."""
    from datasets import load_from_disk

    from distill.datasets import hub_dataset
    from distill.datasets.dataset_card import read_build_record

    saved = {role: load_from_disk(str(out / role)) for role in roles}
    records = {role: read_build_record(out / role) for role in roles}
    staged = hub_dataset.stage(saved, records, out / "hub", args.hub_license)
    try:
        url = hub_dataset.push(staged, args.push_to_hub, private=args.hub_private)
    except Exception as err:  # the hub raises many types (offline, auth, HTTP); all end the same way
        first_line = (str(err).strip().splitlines() or [""])[0]
        print(
            f"error: push of {staged} to {args.push_to_hub} failed: {type(err).__name__}: {first_line}", file=sys.stderr
        )
        return 1
    print(f"pushed {staged} to {url}", file=sys.stderr)
    return 0
