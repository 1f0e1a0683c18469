"""`benchmarks/label_decoding.py --emotion`: TRACE's emotion role `asi` decoded three ways in two passes.

The untuned base with the teacher prompts on the ED dev file (`oracle: {ers: gold}` so no reply is generated):
`asi`'s teacher answer (reasoning, then the emotion) is decoded greedily, then with `label_decoding: {asi:
rank-calibrated}`, whose raw and calibrated rankings give the other two decodings (label_decoding.run_decodings).
I-ACC (Ekman's six) with CI, beside the majority class and the emotion probe, both cross-fitted over `--folds`
conversation folds of the file. The command line, its checks and the record's common keys are label_decoding's.
"""

from __future__ import annotations

import argparse
from collections import Counter

from benchmarks.label_decoding import _strict, label_figures
from benchmarks.label_decoding_passes import DERIVATION, decode, run_decodings


def _folds(dialogues: list, k: int) -> list[int]:
    """Each dialogue's fold, whole conversations together, conversations dealt round in file order."""
    order = list(dict.fromkeys(d.conv_id for d in dialogues))
    fold = {conv: i % k for i, conv in enumerate(order)}
    return [fold[d.conv_id] for d in dialogues]


def emotion_record(args: argparse.Namespace) -> dict:
    from data_prep.loaders import load_dialogues
    from data_prep.taxonomy import EKMAN, to_ekman
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig
    from eval.compare.probe import fit_and_predict
    from eval.metrics.accuracy import ekman_or_invalid, majority_class

    loaded = next(iter(load_dialogues(args.emotion_data).splits.values()))
    dialogues = [d for d in loaded if (d.gold_response or "").strip()][: args.limit]
    gold = [to_ekman(d.emotion) for d in dialogues]
    labels = tuple(EKMAN)
    backend = LocalBackend(args.model, dtype=args.dtype, batch_size=args.batch_size)
    base = {
        "use_cae": False,
        "use_srp": False,
        "rag": False,
        "oracle": {"ers": "gold"},
        "prompt_style": "teacher",
        "max_attempts": args.max_attempts,
        "seed": args.seed,
    }
    decode(backend, PipelineConfig(**base), dialogues[:1], 1, "warm-up (untimed)")
    decodings = run_decodings(
        backend,
        base,
        dialogues,
        ("asi", "emotion"),
        lambda predicted: {"i_acc": label_figures([ekman_or_invalid(e) for e in predicted], gold, labels)},
        args,
        "emotion",
    )
    # no train split in the file: the majority class and the probe are each fitted on the other folds
    folds = _folds(dialogues, args.folds)
    majority, probe, probe_info = [None] * len(dialogues), [None] * len(dialogues), {}
    texts = [d.render_context() for d in dialogues]
    for k in range(args.folds):
        fit = [i for i, f in enumerate(folds) if f != k]
        held = [i for i, f in enumerate(folds) if f == k]
        if not held or not fit:
            continue
        label = _strict(majority_class([gold[i] for i in held], [gold[i] for i in fit])["label"], labels)
        predicted, probe_info = fit_and_predict(
            [texts[i] for i in fit], [gold[i] for i in fit], [texts[i] for i in held], label_set=labels
        )
        for i, p in zip(held, predicted):
            majority[i], probe[i] = label, p
    probe_info.pop("seconds_per_dialogue", None)
    return {
        "task": "emotion",
        "dtype_resolved": str(backend.torch_dtype).removeprefix("torch."),
        "role": "asi",
        "data": str(args.emotion_data),
        "dialogues": len(dialogues),
        "prompt_style": "teacher (untuned base, no adapters)",
        "oracle": {"ers": "gold"},
        "gold_counts": dict(Counter(gold).most_common()),
        "decodings": decodings,
        "decodings_derived": DERIVATION,
        "majority": {
            "from": f"the other {args.folds - 1} of {args.folds} conversation folds",
            "i_acc": label_figures(majority, gold, labels),
        },
        "probe": {
            **probe_info,
            "train_dialogues": None,
            "folds": args.folds,
            "i_acc": label_figures(probe, gold, labels),
        },
    }
