"""BERTScore of each response against its gold reply.

Runs offline on local weights (`data_prep.models.resolve_model`): the default encoder is all-MiniLM-L6-v2.
Neither TRACE's code nor MERG's text names an encoder (bert-score's English default is roberta-large), so
every result names the model it was computed with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from eval.metrics.stats import mean_with_ci

DEFAULT_BERTSCORE_MODEL = "minilm"


def bertscore(
    candidates: Sequence[str],
    references: Sequence[Optional[str]],
    model: str = DEFAULT_BERTSCORE_MODEL,
    num_layers: Optional[int] = None,
    batch_size: int = 32,
    keep_items: bool = False,
) -> dict:
    """BERTScore P/R/F1 (Zhang et al. 2020) of each candidate vs its gold reply, with bootstrap CIs.

    Uses ``bert_score.score`` with a local encoder directory as ``model_type`` (no hub), no IDF and no
    baseline rescaling. ``num_layers`` defaults to all of the encoder's layers (6 for MiniLM); bert-score's
    own default for English is roberta-large at layer 17. Pairs without a reference are skipped; n counts the rest;
    an empty candidate scores 0. ``keep_items`` adds each candidate's F1 (None without a reference),
    for paired comparisons.
    """
    from transformers import AutoConfig

    from data_prep.models import resolve_model

    has_ref = [bool(r and r.strip()) for r in references]
    pairs = [(c or "", r) for c, r, ok in zip(candidates, references, has_ref) if ok]
    empty = {k: mean_with_ci([]) for k in ("precision", "recall", "f1")}
    if not pairs:
        return {
            **empty,
            "model": model,
            "num_layers": num_layers,
            **({"items": [None] * len(has_ref)} if keep_items else {}),
        }
    path = resolve_model(model)
    layers = num_layers or AutoConfig.from_pretrained(path).num_hidden_layers
    import bert_score

    # bert_score encodes "" via build_inputs_with_special_tokens, which transformers 5's fast
    # tokenizers lack; an empty reply shares nothing with the reference, so it scores 0 directly.
    scored = [i for i, (c, _) in enumerate(pairs) if c.strip()]
    p_all, r_all, f_all = [0.0] * len(pairs), [0.0] * len(pairs), [0.0] * len(pairs)
    if scored:
        p, r, f = bert_score.score(
            [pairs[i][0] for i in scored],
            [pairs[i][1] for i in scored],
            model_type=path,
            num_layers=layers,
            batch_size=batch_size,
            use_fast_tokenizer=True,
            verbose=False,
        )
        for i, pv, rv, fv in zip(scored, p.tolist(), r.tolist(), f.tolist()):
            p_all[i], r_all[i], f_all[i] = pv, rv, fv
    return {
        "precision": mean_with_ci(p_all),
        "recall": mean_with_ci(r_all),
        "f1": mean_with_ci(f_all),
        "model": model,
        "num_layers": layers,
        "empty_candidates": len(pairs) - len(scored),
        **({"items": _spread(f_all, has_ref)} if keep_items else {}),
    }


def _spread(values: list[float], has_ref: list[bool]) -> list[Optional[float]]:
    """Scores of the scored pairs back in candidate order, None where there was no reference."""
    it = iter(values)
    return [next(it) if ok else None for ok in has_ref]
