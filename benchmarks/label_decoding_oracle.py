"""The label-only oracle of `benchmarks/label_decoding.py --label-only`: ESD-CoT's `re` adapter on the test split
given ChatGPT's emotion and the gold strategy name alone (no reason), beside `re` given ChatGPT's whole `em` and `sr`
answers, both scored against the reference reply with BERTScore and ROUGE-L and paired: what a right label is worth
without the content of the reason.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.label_decoding_passes import decode, emptied_store, timing


def _label_only_pipeline(pipeline: Path) -> dict:
    """The declared pipeline with sr answering its strategy alone, so re's prompt has no reason line."""
    from distill.roles.declared import load_pipeline

    data = load_pipeline(pipeline).model_dump(mode="json")  # a variant (`extends`) read as its whole declaration
    sr = next(role for role in data["roles"] if role["name"] == "sr")
    sr.update(answer={"strategy": sr["answer"]["strategy"]}, student_answer=None)
    return data


def label_only(args: argparse.Namespace, backend: Any, base: dict, teacher: list, runs: Path) -> dict:
    """re's replies on the test split given ChatGPT's em and the gold strategy alone, beside re given the full
    oracle (em and sr with its reason), both against the reference reply: what the reason text adds."""
    from distill.pipeline.config import PipelineConfig
    from eval.metrics.bertscore import bertscore
    from eval.metrics.overlap import score_rouge_l
    from eval.metrics.stats import paired_bootstrap

    derived = runs / "test-label-only"  # the oracle's run: each trace's sr answer cut to the gold strategy
    store = emptied_store(derived)
    for t in teacher:
        store.append(t.model_copy(update={"outputs": {**t.outputs, "sr": {"strategy": t.dialogue.labels["strategy"]}}}))
    base = {**base, "skip": ["es", "ia"]}
    oracle = {"em": "teacher", "sr": "teacher"}
    systems = {
        "full": {**base, "oracle": oracle, "oracle_traces": str(runs / "test")},
        "label_only": {
            **base,
            "pipeline": _label_only_pipeline(args.pipeline),
            "oracle": oracle,
            "oracle_traces": str(derived),
        },
    }
    references = [t.dialogue.gold_response for t in teacher]
    result: dict[str, Any] = {
        "split": "test",
        "reference": "the data's reply (ChatGPT's)",
        # the same in both pipelines: re samples, from one seed
        "re_temperature": PipelineConfig(**systems["full"]).roles["re"].temperature,
        "seed": args.seed,
    }
    items = {}
    for name, settings in systems.items():
        config = PipelineConfig(**settings)
        keep = args.work / "decodings" / f"test-re-{name}"
        out, seconds = decode(backend, config, [t.dialogue for t in teacher], args.chunk, f"test re {name}", keep)
        replies = [t.response or "" for t in out]
        bert = bertscore(replies, references, model=args.bertscore_model, keep_items=True)
        rouge = score_rouge_l(replies, references)
        items[name] = (bert.pop("items"), rouge.pop("items"))
        result[name] = {
            "bertscore_f1": bert["f1"],
            "bertscore_model": bert["model"],
            "rouge_l": rouge,
            "failed": sum(t.status == "failed" for t in out),
            **timing(seconds, len(out)),
        }
    for i, metric in enumerate(("bertscore_f1", "rouge_l")):
        a, b = items["label_only"][i], items["full"][i]
        kept = [j for j in range(len(a)) if a[j] is not None and b[j] is not None]
        result[f"label_only_minus_full_{metric}"] = paired_bootstrap([a[j] for j in kept], [b[j] for j in kept])
    return result
