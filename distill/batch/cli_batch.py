"""`python -m distill batch submit|poll|collect`: flags, run state and exit codes of a Batch API run.

The rounds themselves (request files, replay, budget) are `distill.batch.batch_api`'s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from distill.backends.openai_backend import OpenAIBackend
from distill.backends.pricing import CostGuard, CostLimitReached, price_table
from distill.batch.batch_api import BATCH_DIR, advance, load_state, save_state
from distill.pipeline.cli_generate import add_pipeline_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=["submit", "poll", "collect"],
        help="submit: start a run; poll: advance it (--wait to the end); collect: write traces once done",
    )
    parser.add_argument("--out", required=True, help="run directory (traces.jsonl and batch/ live here)")
    parser.add_argument("--config", help="teacher YAML with backend: and pipeline: (submit only)")
    parser.add_argument("--dialogues", help="dialogues directory from `python -m data_prep dialogues` (submit only)")
    parser.add_argument("--split", default="train", help="split to run (submit only)")
    parser.add_argument("--index", default=None, help="exemplar index dir (`python -m data_prep index`) for srp/ers")
    parser.add_argument("--limit", type=int, default=None, help="only the first N dialogues")
    parser.add_argument("--wait", action="store_true", help="poll: keep polling until every stage is done")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between polls with --wait")
    parser.add_argument(
        "--max-cost",
        type=float,
        default=None,
        help="USD cap for the whole run at batch prices: a round that could pass it is not submitted "
        "(submit sets it; poll may raise it)",
    )
    add_pipeline_flags(parser)  # submit only: as `distill generate`'s, over the YAML's pipeline keys


def _inputs(state: dict[str, Any]):
    from data_prep.loaders import load_split

    dialogues = load_split(state["dialogues"], state["split"])[: state.get("limit")]
    index = None
    if state.get("index"):  # as in `distill generate`: exemplars only from an index built beforehand
        from data_prep.retrieval import ExemplarIndex

        index = ExemplarIndex.load(state["index"])
    return dialogues, index


class BatchInputError(ValueError):
    """A batch command cannot start: the message says which input and why."""


# What `data_prep.commands` reports as one line (exit 2) instead of a traceback.
USER_ERRORS = (ValueError, FileNotFoundError)


def _start_state(args: argparse.Namespace) -> dict[str, Any]:
    from distill.pipeline.cli_generate import load_config, pipeline_config

    if not (args.config and args.dialogues):
        raise BatchInputError("batch submit: --config and --dialogues are required")
    config = load_config(args.config)  # the same validated loader as `distill generate`
    # The resolved pipeline, flags included, is the run's: every later poll replays it from state.json.
    config["pipeline"] = pipeline_config(args.config, config.get("pipeline"), args).model_dump(mode="json")
    if config["backend"].get("type") != "openai":
        raise BatchInputError(f"{args.config}: field 'backend.type' must be 'openai' for the Batch API")
    if args.max_cost is not None:  # an unpriced model would count as free and never trip the cap
        CostGuard(args.max_cost, price_table(config["backend"].get("prices"))).require_price(config["backend"]["model"])
    return {
        "config": config,
        "max_cost": args.max_cost,
        "dialogues": str(Path(args.dialogues).resolve()),
        "split": args.split,
        "index": str(Path(args.index).resolve()) if args.index else None,
        "limit": args.limit,
        "pending": None,
        "history": [],
        "complete": False,
    }


def run(args: argparse.Namespace) -> int:
    import openai

    run_dir = Path(args.out)
    if args.action == "submit":
        if (run_dir / BATCH_DIR / "state.json").exists():
            raise BatchInputError(
                f"{run_dir / BATCH_DIR / 'state.json'} exists: use `batch poll --out {run_dir}` to resume"
            )
        state = _start_state(args)
        save_state(run_dir, state)
    else:
        state = load_state(run_dir)
        if args.max_cost is not None:
            state["max_cost"] = args.max_cost
    if state.get("complete"):
        print(f"complete: {run_dir / 'traces.jsonl'}")
        return 0
    backend_cfg = OpenAIBackend(**{k: v for k, v in state["config"]["backend"].items() if k != "type"}).config
    client = openai.OpenAI(api_key=_api_key(backend_cfg.api_key_env), base_url=backend_cfg.base_url)
    dialogues, index = _inputs(state)
    while True:
        try:
            message = advance(run_dir, state, client, dialogues, index)
        except CostLimitReached as exc:  # nothing was uploaded for this round; the state is saved
            print(str(exc), file=sys.stderr)
            return 3
        print(message, flush=True)
        if state.get("complete"):
            return 0
        if args.action == "collect":
            return 3  # not finished yet: a clear, non-zero status for scripts
        if not args.wait:
            return 0
        time.sleep(args.interval)


def _api_key(env: str) -> str:
    import os

    key = os.environ.get(env)
    if not key:
        raise BatchInputError(f"the Batch API needs an API key in the environment variable {env}")
    return key
