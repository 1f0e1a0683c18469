"""`python -m distill generate`: run the pipeline over a dialogue split and append traces to a run dir.

    python -m distill generate --config configs/teacher/local.yaml --dialogues <dataset dir> --split train \
        --out runs/local-train [--limit N] [--index <index dir>] [--chunk-size 32] [--reflection] [--gold-emotion]

The YAML holds `backend: {type: ..., ...}` and `pipeline: {PipelineConfig fields}`; flags override
the pipeline keys. Dialogues go through the pipeline a chunk at a time and each chunk's traces are
appended durably, so an interrupted run loses at most one chunk and a rerun with the same command
skips every dialogue already stored. Bad input ends with one line naming the file and field.

The run is a stage under the project's reuse rule (distill.pipeline.stage_key): its key is the pipeline
settings, the backend, the prompt version and rendered prompts, what its adapters hold, the base model's
weights and the dtype they run in, and the index (`generate_inputs`), stored in `stage-key.json` before the
first trace. A rerun under the same key resumes; a run made from other inputs is made again, saying which input
changed, where a local model makes it (its traces cost nothing but time), and is refused, untouched, where an
API made it (its traces cost money).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tqdm.auto import tqdm

from data_prep.config_file import first_error, read_mapping
from distill.pipeline.config import PipelineConfig

# Every on/off setting of the pipeline is a flag: the role switches (from the registry) and the rest.
_SWITCHES = tuple(name for name, f in PipelineConfig.model_fields.items() if f.annotation is bool)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML with `backend:` and `pipeline:` sections")
    parser.add_argument("--dialogues", required=True, help="dataset dir written by `python -m data_prep dialogues`")
    parser.add_argument("--split", default="train", help="split to run (train / validation / test)")
    parser.add_argument("--out", required=True, help="run directory (traces.jsonl + run.json); reruns resume it")
    parser.add_argument("--limit", type=int, default=None, help="only the first N dialogues of the split")
    parser.add_argument("--index", default=None, help="exemplar index dir (`python -m data_prep index`) for srp/ers")
    parser.add_argument(
        "--chunk-size", type=int, default=32, help="dialogues per pipeline batch; a crash loses at most one"
    )
    parser.add_argument(
        "--max-cost", type=float, default=None, help="stop before an API run spends more than this many USD"
    )
    parser.add_argument(
        "--adapters", default=None, help="local backend: <dir>/<role>/ adapters (implies --use-adapters)"
    )
    add_pipeline_flags(parser)


def add_pipeline_flags(parser: argparse.ArgumentParser) -> None:
    """The flags over the YAML's `pipeline:` keys (gold guidance, role switches, prompt style), which
    `distill batch submit` takes too, so both routes to a trace run take the same pipeline."""
    parser.add_argument(
        "--prompt-style",
        choices=("teacher", "student"),
        default=None,
        help=PipelineConfig.model_fields["prompt_style"].description,
    )
    for name in _SWITCHES:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=PipelineConfig.model_fields[name].description,
        )


def load_config(path: str) -> dict[str, Any]:
    """The YAML as a dict with a `backend` mapping and an optional `pipeline` mapping."""
    data = read_mapping(path)
    if not isinstance(data.get("backend"), dict):
        raise ValueError(f"{path}: field 'backend' must be a mapping with a 'type'")
    unknown = set(data) - {"backend", "pipeline"}
    if unknown:
        raise ValueError(
            f"{path}: unknown top-level field(s) {', '.join(sorted(unknown))} (expected backend, pipeline)"
        )
    return data


def pipeline_config(path: str, section: Any, args: argparse.Namespace) -> PipelineConfig:
    """PipelineConfig from the YAML's `pipeline:` section with the CLI's flags on top."""
    values = dict(section or {})
    for name in _SWITCHES:
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    if getattr(args, "prompt_style", None):
        values["prompt_style"] = args.prompt_style
    if getattr(args, "adapters", None):
        values["use_adapters"] = True
    try:
        return PipelineConfig(**values)
    except ValidationError as exc:
        raise ValueError(f"{path}: {first_error(exc, prefix='pipeline.')}") from None


def build_backend(path: str, backend_cfg: dict[str, Any], args: argparse.Namespace):
    from distill.backends import make_backend

    cfg = dict(backend_cfg)
    extra: dict[str, Any] = {}
    if getattr(args, "adapters", None):
        if cfg.get("type") != "local":
            raise ValueError(f"{path}: --adapters needs backend.type local (got {cfg.get('type')})")
        cfg["adapters"] = args.adapters
    if getattr(args, "max_cost", None) is not None:
        if cfg.get("type") != "openai":
            raise ValueError(f"{path}: --max-cost applies to API backends (backend.type is {cfg.get('type')})")
        from distill.backends.pricing import CostGuard, price_table

        extra["cost_guard"] = CostGuard(max_cost=args.max_cost, table=price_table(cfg.get("prices")))
    try:
        return make_backend(cfg, **extra)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


USER_ERRORS = (ValueError,)  # DataError and StoreError among them: one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    from distill.backends.pricing import CostLimitReached

    try:
        return _generate(args)
    except CostLimitReached as exc:  # --max-cost: finished chunks are already stored
        print(str(exc), file=sys.stderr)
        return 3


def _generate(args: argparse.Namespace) -> int:
    from data_prep.commands import not_a_directory
    from data_prep.loaders import limit_leaves_out, load_split
    from distill.pipeline.pipeline import Pipeline
    from distill.pipeline.store import TraceStore

    if args.chunk_size < 1 or (args.limit is not None and args.limit < 1):
        raise ValueError(f"--chunk-size and --limit must be >= 1 (got {args.chunk_size}, {args.limit})")
    if problem := not_a_directory(args.out):
        raise ValueError(f"{args.out}: --out must be a directory, but {problem}")
    data = load_config(args.config)
    config = pipeline_config(args.config, data.get("pipeline"), args)
    dialogues = load_split(args.dialogues, args.split)
    if args.limit is not None:
        whole, dialogues = dialogues, dialogues[: args.limit]
        if warning := limit_leaves_out(dialogues, whole, f"--limit {args.limit} on the {args.split} split"):
            print(warning, file=sys.stderr)
    index = _load_index(args.index) if args.index else None
    store = TraceStore(args.out)
    backend = build_backend(args.config, data["backend"], args)
    pipeline = Pipeline(config, backend, index=index)
    source = {"dialogues": str(Path(args.dialogues).resolve()), "index": args.index}
    inputs = generate_inputs(config, data["backend"], args, index)
    claim_run(store, pipeline.run_info(split=args.split, source=source), inputs, free=backend.name == "local")
    stored = store.keys()
    estimate = cost_estimate(pipeline, [d for d in dialogues if pipeline.key(d) not in stored])
    if estimate:
        print(estimate, file=sys.stderr, flush=True)
    return _run_with_progress(pipeline, store, dialogues, args.chunk_size)


def generate_inputs(config: PipelineConfig, backend: dict[str, Any], args: argparse.Namespace, index) -> dict:
    """Everything the run's traces are computed from, besides its dialogues (`--adapters` over the YAML's)."""
    from distill.adapters.adapters import adapter_fingerprint
    from distill.backends.adapter_switch import adapter_dirs
    from distill.pipeline.stage_key import generation_inputs

    backend = {**backend, **({"adapters": args.adapters} if getattr(args, "adapters", None) else {})}
    adapters = {role: adapter_fingerprint(path) for role, path in adapter_dirs(backend.get("adapters")).items()}
    return {"backend": backend.get("type"), **generation_inputs(config, backend, adapters, index)}


def claim_run(store, info, inputs: dict[str, Any], free: bool) -> None:
    """Make --out this run's, under its key (written before any trace: a killed run resumes under the key it was
    started with). A run made from other inputs is removed, saying why, when it is `free` to make again (a local
    model's); otherwise refused (StoreError naming the input, nothing removed). A run made before keys were
    recorded resumes while its run.json names this run."""
    from distill.pipeline.stage_key import KEY_FILE, regenerating, stale, write_key
    from distill.pipeline.store import RUN_FILE, TRACES_FILE, StoreError, first_difference, remove_files
    from distill.quality.report import QUALITY_FILE

    stored = store.run_info()
    if stored is not None:

        def same_run():  # a run made before keys: its run.json's identity is all it says
            old, new = stored.identity(), info.identity()
            return None if old == new else f"its run.json differs ({first_difference(old, new)})"

        why = stale(store.run_dir, inputs, migrate=same_run)
        if why is not None and not free:
            raise StoreError(
                f"{store.run_dir}: made from other inputs ({why}); its traces cost money, so it is kept: delete "
                f"{store.run_dir} to make it again, or pass another --out"
            )
        if why is not None:
            regenerating(str(store.run_dir), why)
            remove_files(store.run_dir, [KEY_FILE, RUN_FILE, TRACES_FILE, QUALITY_FILE])
    store.claim(info)
    write_key(store.run_dir, inputs)


def cost_estimate(pipeline, dialogues) -> str | None:
    """The up-front line of an API run with a known price; None for a free (self-hosted or local) one."""
    from distill.backends.pricing import estimate_prompt_tokens, known_price, worst_case_cost
    from distill.roles.roles import RoleInput

    guard, model = getattr(pipeline.backend, "cost_guard", None), pipeline.backend.model
    if guard is None or known_price(model, guard.table) is None or not dialogues:
        return None
    style, stages = pipeline.config.prompt_style, [pipeline.roles[s] for s in pipeline.stages]
    calls = [
        (estimate_prompt_tokens(spec.render(RoleInput(dialogue=d), style)), spec.max_new_tokens)
        for d in dialogues
        for spec in stages
    ]
    usd = worst_case_cost(model, calls, guard.table)
    line = (
        f"cost estimate: about ${usd:.2f} for {len(dialogues)} dialogues x {len(stages)} stages of {model} "
        "(prompts at ~4 characters a token, before retrieved cases and earlier answers are added; every answer "
        "at its token limit; retries and reflection reruns cost more)"
    )
    if guard.max_cost is not None and usd > guard.max_cost:
        line += f"; above --max-cost ${guard.max_cost:.2f}, so the run will stop early and can resume"
    return line


def _load_index(path: str):
    from data_prep.retrieval import ExemplarIndex

    try:
        return ExemplarIndex.load(path)
    except (OSError, KeyError) as exc:
        raise ValueError(f"{path}: cannot load exemplar index ({exc})") from None


def _run_with_progress(pipeline, store, dialogues, chunk_size: int) -> int:
    stored = store.keys()
    already = sum(1 for d in dialogues if pipeline.key(d) in stored)
    counts = {"ok": 0, "failed": 0}
    # A whole chunk lands at once, so tqdm's default (recent-rate) smoothing swings the ETA wildly;
    # smoothing=0 estimates from the run's average rate.
    with tqdm(total=len(dialogues), initial=already, desc="traces", unit="dialogue", smoothing=0) as bar:
        guard = getattr(pipeline.backend, "cost_guard", None)  # API runs: the spend so far lives there

        def show() -> None:
            spent = {"spent": f"${guard.spent:.4f}"} if guard is not None else {}
            bar.set_postfix(done=already + counts["ok"] + counts["failed"], failed=counts["failed"], **spent)

        show()

        first_failure: list[str] = []

        def on_trace(trace) -> None:
            counts[trace.status] += 1
            if trace.failure and not first_failure:
                first_failure.append(f"{trace.key}: {trace.failure}")
            bar.update(1)
            show()

        # progress=True adds a bar per stage under this one: a chunk takes minutes on a CPU, and
        # the dialogue count only moves when a whole chunk is stored.
        summary = pipeline.run_into(store, dialogues, chunk_size=chunk_size, on_trace=on_trace, progress=True)
    print(
        f"wrote {summary.written} traces ({summary.failed} failed), skipped {summary.skipped} already in "
        f"{store.path}; store holds {len(store)}"
    )
    if summary.written and summary.failed == summary.written:
        # a dead server or a refused key fails every dialogue: a script must not read that as success
        print(
            f"distill generate: every trace of this run failed; the first: {(first_failure or ['?'])[0]}",
            file=sys.stderr,
        )
        return 1
    return 0
