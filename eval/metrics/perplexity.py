"""Perplexity of responses under a reference LM.

Runs offline on local weights (`data_prep.models.resolve_model`): the default reference LM is the
embedded SmolLM2-135M-Instruct. The papers use GPT-2, so every result names the model it was computed with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from functools import lru_cache
from typing import Any, Literal, Optional, Union

from tqdm.auto import tqdm

from eval.metrics.diversity import normalize_response
from eval.metrics.stats import bootstrap_ci

# What a response is conditioned on. "response": nothing, TRACE's evaluation.py `compute_ppl` (no start token
# is added and the first token, predicted from nothing, is not scored). "document_start": the LM's
# document-start token, so every response token is scored. "dialogue": the start token and the dialogue.
PplContext = Literal["response", "document_start", "dialogue"]
PPL_CONTEXTS: tuple[str, ...] = ("response", "document_start", "dialogue")
DEFAULT_PPL_MODEL = "smollm2-135m"
DEFAULT_PPL_CONTEXT: PplContext = "response"  # TRACE's


def load_reference_lm(model: str, dtype: str = "float32"):
    """(model, tokenizer) for PPL from an alias, local path or hub id; eval mode, on CPU/GPU as available."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_prep.models import check_causal_lm, resolve_model

    path = resolve_model(model)
    check_causal_lm(model)  # after resolving: a hub id is then in the local cache, its config readable
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    lm.eval()
    return lm, AutoTokenizer.from_pretrained(path)


def _document_start_id(tok) -> Optional[int]:
    """The token a pretraining document starts after. GPT-2-style models (SmolLM2 included) use
    <|endoftext|>; SmolLM2's converted tokenizer calls <|im_start|> its BOS, which is a chat token and
    inflates PPL about 2x, so <|endoftext|> wins when the vocabulary has it."""
    vocab = tok.get_vocab()
    if "<|endoftext|>" in vocab:
        return vocab["<|endoftext|>"]
    return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id


def _encode_pairs(
    tok, responses: Sequence[str], context: PplContext, contexts: Optional[Sequence[str]]
) -> list[tuple[list[int], list[int]]]:
    """(prefix ids, response ids) per item; only response tokens that have a prefix token before them are scored."""
    start = _document_start_id(tok)
    pairs = []
    for i, resp in enumerate(responses):
        prefix = [start] if context != "response" and start is not None else []
        if context == "dialogue":
            prefix += tok.encode(contexts[i] + "\nresponder:", add_special_tokens=False)
        # TRACE normalises whitespace before scoring; a reply after "responder:" starts with a space, as in
        # running text
        text = normalize_response(resp)
        text = " " + text if context == "dialogue" and text else text
        pairs.append((prefix, tok.encode(text, add_special_tokens=False) if text else []))
    return pairs


def _scored_tokens(prefix: list[int], resp: list[int]) -> int:
    return len(resp) if prefix else max(len(resp) - 1, 0)


def _batch_nll(lm, pairs: list[tuple[list[int], list[int]]], pad_id: int) -> list[float]:
    """Summed NLL of the response tokens of each pair (prefix tokens are context only)."""
    import torch

    width = max(len(p) + len(r) for p, r in pairs)
    if width < 2:  # nothing is predicted from anything
        return [0.0] * len(pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, (prefix, resp) in enumerate(pairs):
        seq = prefix + resp
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        if resp:
            labels[row, len(prefix) : len(seq)] = torch.tensor(resp)
    logits = lm(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits.float()
    shift_logits, shift_labels = logits[:, :-1], labels[:, 1:].to(logits.device)
    nll = torch.nn.functional.cross_entropy(
        shift_logits.transpose(1, 2), shift_labels, ignore_index=-100, reduction="none"
    )
    return nll.sum(dim=1).tolist()


def perplexity(
    responses: Sequence[str],
    model: Union[str, tuple[Any, Any]] = DEFAULT_PPL_MODEL,
    context: PplContext = DEFAULT_PPL_CONTEXT,
    contexts: Optional[Sequence[str]] = None,
    batch_size: int = 8,
    progress: bool = True,
    keep_items: bool = False,
) -> dict:
    """Corpus perplexity, token-weighted: exp(total NLL / total scored response tokens) (Jelinek et al. 1977).

    ``context="response"`` is TRACE's definition: each whitespace-normalised response alone, no start
    token added, its first token not scored. ``"document_start"`` scores every token after the LM's
    document-start token. ``"dialogue"`` scores the response after its dialogue context (``contexts[i]``
    plus ``"\\nresponder:"``), counting only the response tokens. ``model`` is an alias/path or an already loaded
    ``(model, tokenizer)``; a PEFT model is scored with its adapters disabled. The CI is a bootstrap
    over responses of the same token-weighted statistic. Empty responses add no tokens. ``keep_items``
    adds each response's (summed NLL, scored tokens), for paired comparisons.
    """
    import torch

    if context not in PPL_CONTEXTS:
        raise ValueError(f"ppl context must be one of {', '.join(PPL_CONTEXTS)}, got '{context}'")
    if context == "dialogue" and (contexts is None or len(contexts) != len(responses)):
        raise ValueError("ppl context 'dialogue' needs one dialogue context per response")
    name = (
        model if isinstance(model, str) else getattr(getattr(model[0], "config", None), "_name_or_path", "loaded model")
    )
    lm, tok = load_reference_lm(model) if isinstance(model, str) else model
    pairs = _encode_pairs(tok, responses, context, contexts)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    per_item: list[tuple[float, int]] = []
    base_only = lm.disable_adapter() if hasattr(lm, "disable_adapter") else nullcontext()
    with torch.no_grad(), base_only:
        for start in tqdm(range(0, len(pairs), batch_size), desc=f"ppl ({context})", disable=not progress):
            chunk = pairs[start : start + batch_size]
            per_item += [(nll, _scored_tokens(p, r)) for nll, (p, r) in zip(_batch_nll(lm, chunk, pad_id), chunk)]

    return {
        **corpus_figure(per_item),
        "n": len(responses),
        "model": name,
        "context": context,
        **({"items": per_item} if keep_items else {}),
    }


def corpus_figure(items: Sequence[tuple[float, int]]) -> dict:
    """Token-weighted PPL of (summed NLL, scored tokens) items with its bootstrap 95% CI over the items that have
    tokens, and the tokens it rests on."""
    tokens = sum(t for _, t in items)
    low, high = bootstrap_ci([it for it in items if it[1]], statistic=corpus_ppl)
    return {"value": corpus_ppl(items) if tokens else None, "ci_low": low, "ci_high": high, "tokens": tokens}


def corpus_ppl(items: Sequence[tuple[float, int]]) -> float:
    """exp(total NLL / total scored tokens) over (summed NLL, scored tokens) items."""
    tokens = sum(t for _, t in items)
    return math.exp(sum(n for n, _ in items) / tokens) if tokens else float("nan")


def ppl_inputs(settings: dict) -> tuple[str, ...]:
    """What PPL needs besides its settings: the replies, and with context `dialogue` the dialogues too."""
    return ("replies", "contexts") if settings.get("context") == "dialogue" else ("replies",)


def load_ppl(settings: dict) -> dict:
    """The reference LM, loaded once for every system of a comparison: `score_ppl`'s ``lm`` (and
    `score_dialogue_ppl`'s: the last model asked for is kept, so the two metrics load it once)."""
    return {"lm": _kept_reference_lm(settings["model"])}


@lru_cache(maxsize=1)
def _kept_reference_lm(model: str):
    return load_reference_lm(model)


def score_ppl(
    replies: Sequence[str],
    contexts: Optional[Sequence[str]],
    model: str = DEFAULT_PPL_MODEL,
    context: PplContext = DEFAULT_PPL_CONTEXT,
    batch_size: int = 8,
    lm: Optional[tuple[Any, Any]] = None,
) -> dict:
    """The registry's PPL: `perplexity` under `model` (or `lm`, that model already loaded), named by
    `model`, with each reply's (summed NLL, scored tokens) as ``items`` for the paired table."""
    result = perplexity(replies, lm or model, context, contexts, batch_size, keep_items=True)
    return {**result, "model": model}


def score_dialogue_ppl(
    replies: Sequence[str],
    contexts: Sequence[str],
    model: str = DEFAULT_PPL_MODEL,
    batch_size: int = 8,
    lm: Optional[tuple[Any, Any]] = None,
) -> dict:
    """A coherence guard of the target: `score_ppl` of each reply after its dialogue (context ``dialogue``) under
    the untuned reference LM, with its per-reply items."""
    return score_ppl(replies, contexts, model, "dialogue", batch_size, lm)
