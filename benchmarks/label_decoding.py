"""The strategy link: how often the per-role student's `sr` picks ESD-CoT's gold strategy, decoded three ways.

    python benchmarks/label_decoding.py --adapters runs/escot-students-200/adapters/traces/seed-42 \
        --out benchmarks/label_decoding.json
    python benchmarks/label_decoding.py --emotion --out benchmarks/label_decoding_emotion.json

The `sr` role runs on ESD-CoT's val (172) and test (341) dialogues with ChatGPT's own `em` answer fed in
(`oracle: {em: teacher}`, from `distill import` of that split), so only the strategy link is measured, in three
decodings: greedy JSON, `label_decoding: {sr: rank}` and `rank-calibrated` (distill.backends.label_rank), from
two passes per split: a greedy one, and a ranked one in which the ranker drafts the whole answer greedily, then
scores every label after the drafted reason, each answer's `label scores:` event holding the drafted label, the
raw and the content-free scores, so rank is the best raw score, rank-calibrated the best calibrated one. Each has
strategy accuracy and macro-F1 with seeded bootstrap 95% CIs and its seconds per dialogue, each from a stopwatch:
greedy its pass's, rank-calibrated the ranked pass's, rank that less the content-free scoring the ranker timed
(the ranking's own seconds stated apart). Beside them: the train
split's majority class and a probe (logistic regression on MiniLM embeddings of the dialogue text `sr` sees,
eval.compare.probe) fitted on the train split's strategies. The decoding with the best val macro-F1 is `chosen`
and its test figures are reported: no setting is chosen on test. `--label-only` adds the re role given ChatGPT's
emotion and the gold strategy name alone (no reason) beside it given the full oracle, both scored against the
reference reply.

`--emotion` measures TRACE's emotion role `asi` instead (benchmarks/label_decoding_emotion.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.label_decoding_passes import (  # noqa: E402
    DECODINGS,
    DERIVATION,
    BenchError,
    decode,
    imported,
    label_answer,
    run_decodings,
)
from benchmarks.machine import cpu_flags, cpu_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
PIPELINE = REPO / "configs" / "pipelines" / "escot.yaml"
TRAIN_MAPPING = REPO / "configs" / "import" / "esdcot-instruction.yaml"
SPLIT_MAPPING = REPO / "configs" / "import" / "esdcot-full-chain-em-sr-re.yaml"  # em, sr, re: the student's links
SPLITS = {"val": ("val.json", "validation"), "test": ("test.json", "test")}  # name -> (file, its import's split)
TRAIN_FILE = "train_em_sr_re.json"


# --- figures ------------------------------------------------------------------------------------------


def label_figures(predicted: list[Optional[str]], gold: list[str], labels: tuple[str, ...]) -> dict:
    """Strict accuracy and macro-F1, each with its bootstrap CI (eval.metrics), and the invalid answers."""
    from eval.metrics.accuracy import classification_report, macro_f1_with_ci

    keys = [label.lower() for label in labels]  # the metrics compare labels stripped and lowercased
    report = classification_report(predicted, gold, keys)
    return {
        "accuracy": report["accuracy"],
        "macro_f1": macro_f1_with_ci(predicted, gold, keys),
        "n_invalid": report["n_invalid"],
    }


def _strict(label: Optional[str], labels: tuple[str, ...]) -> Optional[str]:
    """`label` in the set's own spelling (the metrics compare lowercased), or None."""
    return next((x for x in labels if x.lower() == (label or "").strip().lower()), None)


def majority_figures(train_labels: list[str], splits: dict[str, list[str]], labels: tuple[str, ...]) -> dict:
    from eval.metrics.accuracy import majority_class

    first = next(iter(splits.values()))
    label = _strict(majority_class(first, train_labels)["label"], labels)
    return {
        "label": label,
        "from": "train labels",
        **{name: label_figures([label] * len(gold), gold, labels) for name, gold in splits.items()},
    }


# --- the strategy link --------------------------------------------------------------------------------


def strategy_record(args: argparse.Namespace) -> dict:
    from benchmarks.label_decoding_oracle import label_only  # it imports this module's decoding helpers
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig
    from distill.roles.declared import label_set

    runs = args.work / "imports"
    train = [t for t in imported(args.data / TRAIN_FILE, TRAIN_MAPPING, "train", runs / "train") if t.status == "ok"]
    teacher = {
        name: imported(args.data / file, SPLIT_MAPPING, split, runs / name)[: args.limit]
        for name, (file, split) in SPLITS.items()
    }
    base = {
        "pipeline": str(args.pipeline),
        "skip": ["es", "ia", "re"],
        "prompt_style": "student",
        "use_adapters": True,
        "max_attempts": args.max_attempts,
        "seed": args.seed,
    }
    sr = PipelineConfig(**base).roles["sr"]  # the label set and sr's context come from the pipeline
    labels, turns = label_set(sr, "strategy"), sr.context_turns
    gold = {name: [t.dialogue.labels["strategy"] for t in traces] for name, traces in teacher.items()}
    train_labels = [label_answer(t, "sr", "strategy") for t in train]

    backend = LocalBackend(args.model, adapters=str(args.adapters), dtype=args.dtype, batch_size=args.batch_size)
    warm = PipelineConfig(**base, oracle={"em": "teacher"}, oracle_traces=str(runs / "val"))
    decode(backend, warm, [teacher["val"][0].dialogue], 1, "warm-up (adapters load, untimed)")
    splits = {
        name: run_decodings(
            backend,
            {**base, "oracle": {"em": "teacher"}, "oracle_traces": str(runs / name)},
            [t.dialogue for t in traces],
            ("sr", "strategy"),
            lambda predicted, name=name: label_figures(predicted, gold[name], labels),
            args,
            name,
        )
        for name, traces in teacher.items()
    }
    probe = probe_figures(turns, [t.dialogue.render_context(turns) for t in train], train_labels, teacher, gold, labels)
    best = max(DECODINGS, key=lambda mode: splits["val"][mode]["macro_f1"]["value"] or -1.0)  # ties: the first
    record = {
        "task": "strategy",
        "dtype_resolved": str(backend.torch_dtype).removeprefix("torch."),
        "adapters": str(args.adapters),
        "pipeline": str(args.pipeline.relative_to(REPO) if args.pipeline.is_relative_to(REPO) else args.pipeline),
        "mappings": {"train": str(TRAIN_MAPPING.relative_to(REPO)), "splits": str(SPLIT_MAPPING.relative_to(REPO))},
        "oracle": {"em": "teacher"},
        "labels": list(labels),
        "train_dialogues": len(train),
        "dialogues": {name: len(traces) for name, traces in teacher.items()},
        "gold_counts": {name: dict(Counter(g).most_common()) for name, g in gold.items()},
        "decodings": splits,
        "decodings_derived": DERIVATION,
        "majority": majority_figures(train_labels, gold, labels),
        "probe": {**probe, "text": f"the dialogue's last {turns} turns, as sr's prompt shows them"},
        "chosen": {
            "decoding": best,
            "by": "val macro-F1 (ties: the first of greedy, rank, rank-calibrated)",
            "val": splits["val"][best],
            "test": splits["test"][best],
        },
        "label_only_oracle": label_only(args, backend, base, teacher["test"], runs) if args.label_only else None,
    }
    return record


def probe_figures(
    turns: Optional[int], train_texts: list[str], train_labels: list, teacher: dict, gold: dict, labels: tuple
) -> dict:
    """The probe fitted once on the train split, each split's dialogues (as sr sees them: its last `turns`)
    answered in one pass."""
    from eval.compare.probe import fit_and_predict

    texts = [t.dialogue.render_context(turns) for traces in teacher.values() for t in traces]
    predicted, info = fit_and_predict(train_texts, train_labels, texts, label_set=labels)
    per_dialogue, at = round(info.pop("seconds_per_dialogue"), 4), 0
    for name, traces in teacher.items():
        info[name] = {**label_figures(predicted[at : at + len(traces)], gold[name], labels),
                      "seconds_per_dialogue": per_dialogue}  # fmt: skip
        at += len(traces)
    return info


# --- command ------------------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> None:
    if args.emotion:
        if not args.emotion_data.is_file():
            raise BenchError(f"{args.emotion_data}: no such file (pass --emotion-data, an ED CSV)")
        return
    if args.adapters is None:
        raise BenchError("--adapters: needed (a per-role student's adapters folder with sr/ and em/)")
    if not args.adapters.is_dir():
        raise BenchError(f"{args.adapters}: no such adapters folder (pass --adapters, a folder holding sr/ and em/)")
    for role in ("sr", *(("re",) if args.label_only else ())):
        if not (args.adapters / role / "adapter_config.json").is_file():
            raise BenchError(f"{args.adapters}: holds no {role}/ adapter (no {role}/adapter_config.json)")
    for file in (TRAIN_FILE, *(file for file, _ in SPLITS.values())):
        if not (args.data / file).is_file():
            raise BenchError(f"{args.data / file}: no such file (pass --data, the ESD-CoT folder)")
    if not args.pipeline.is_file():
        raise BenchError(f"{args.pipeline}: no such pipeline file")


def _print(record: dict) -> None:
    def ci(s: dict) -> str:
        return "-" if s["value"] is None else f"{s['value']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]"

    if record["task"] == "strategy":  # split -> decoding -> figures
        rows = [(split, mode, f) for split, modes in record["decodings"].items() for mode, f in modes.items()]
    else:  # decoding -> figures, I-ACC's apart
        rows = [("ed", mode, {**f, **f["i_acc"]}) for mode, f in record["decodings"].items()]
    for split, mode, f in rows:
        print(
            f"{split:5s} {mode:16s} acc {ci(f['accuracy'])}  macro-F1 {ci(f['macro_f1'])}  "
            f"{f['seconds_per_dialogue']:.3f} s/dialogue"
        )
    if record["task"] == "strategy":
        chosen = record["chosen"]
        print(
            f"chosen on val: {chosen['decoding']}; test acc {ci(chosen['test']['accuracy'])}, "
            f"macro-F1 {ci(chosen['test']['macro_f1'])}"
        )


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapters", type=Path, default=None, help="a per-role student's adapters folder (sr/, em/)")
    p.add_argument("--data", type=Path, default=SHARED / "esd-cot", help="the ESD-CoT folder (train, val, test)")
    p.add_argument("--pipeline", type=Path, default=PIPELINE, help="the declared pipeline the student was trained on")
    p.add_argument("--model", default="smollm2-135m", help="the base model (alias, folder or hub id)")
    p.add_argument(
        "--dtype",
        default="auto",
        help="auto (bf16 where the CPU runs it natively: eval students'), "
        "float32 or bfloat16; the record has what it resolved to",
    )
    p.add_argument("--batch-size", type=int, default=16, help="prompts decoded together")
    p.add_argument("--chunk", type=int, default=64, help="dialogues per pipeline call (the progress bar's step)")
    p.add_argument("--limit", type=int, default=None, help="the first N dialogues of each split; default all")
    p.add_argument("--max-attempts", type=int, default=2, help="generations per step (eval students' compare: 2)")
    p.add_argument("--seed", type=int, default=0, help="the pipeline's sampling seed (re samples at T 0.5)")
    p.add_argument(
        "--label-only",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run re on test given the gold strategy alone vs the full oracle",
    )
    p.add_argument("--bertscore-model", default="minilm", help="the label-only oracle's BERTScore encoder")
    p.add_argument("--emotion", action="store_true", help="measure TRACE's asi on the ED dev file instead")
    p.add_argument("--emotion-data", type=Path, default=SHARED / "ed_ekman_dev.csv", help="the --emotion ED CSV")
    p.add_argument("--folds", type=int, default=5, help="--emotion: conversation folds for majority and probe")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "label-decoding", help="imports go here (reused)")
    p.add_argument("--out", type=Path, default=None, help="write the record as JSON here")
    args = p.parse_args(argv)
    for name in ("adapters", "data", "pipeline", "emotion_data", "work", "out"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    try:
        _check(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import torch

    from eval.metrics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    start = time.perf_counter()
    try:
        with contextlib.chdir(REPO):  # the shipped mappings name their pipeline relative to the repository
            if args.emotion:  # its own module, which reads this one's helpers
                from benchmarks.label_decoding_emotion import emotion_record

                figures = emotion_record(args)
            else:
                figures = strategy_record(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    given = argv if argv is not None else sys.argv[1:]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    record = {
        "command": "python " + shlex.join(["benchmarks/label_decoding.py", *given]),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "cpu_flags": cpu_flags(),
            "torch_threads": torch.get_num_threads(),
        },
        "commit": commit or None,
        "seconds": round(time.perf_counter() - start, 1),
        "model": args.model,
        "dtype": args.dtype,
        "batch_size": args.batch_size,
        "chunk": args.chunk,
        "limit": args.limit,
        "max_attempts": args.max_attempts,
        "seed": args.seed,
        "data": str(args.emotion_data if args.emotion else args.data),
        "bootstrap": {"resamples": DEFAULT_RESAMPLES, "seed": DEFAULT_SEED, "level": 0.95, "method": "percentile"},
        **figures,
    }
    _print(record)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # run as the imported module, so --emotion's module shares its helpers and errors
    from benchmarks.label_decoding import main as module_main

    sys.exit(module_main())
