"""Reference-free diversity metrics on response text: Dist-n (TRACE) and EAD-n (Liu et al. 2022).

Both are corpus-level numbers (one value for a whole system); `eval.metrics.diversity_ci` gives their bootstrap
intervals, each resample a new corpus of the drawn dialogues.
They need no model, which is why `python -m eval score` runs them in seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Optional, Union

Tokenizer = Callable[[str], Sequence]
DEFAULT_EAD_ENCODING = "cl100k_base"
_WHITESPACE_RUN = re.compile(r"\s+")


def normalize_response(text: Optional[str]) -> str:
    """TRACE's `normalize_text` (evaluation.py): strip, then collapse every whitespace run to one space."""
    return _WHITESPACE_RUN.sub(" ", (text or "").strip())


def normalized_corpus(responses: Sequence[Optional[str]]) -> list[str]:
    """The responses TRACE's evaluation scores: normalised, blank ones dropped."""
    return [t for t in map(normalize_response, responses) if t]


def whitespace_tokens(text: str) -> list[str]:
    """TRACE's Dist tokenisation: lowercase, split on whitespace (punctuation stays attached)."""
    return (text or "").lower().split()


def ngrams(tokens: Sequence, n: int) -> list[tuple]:
    """All contiguous n-grams; a sequence shorter than n has none."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(responses: Sequence[str], n: int) -> float:
    """Dist-n (Li et al. 2016, as computed in TRACE): distinct n-grams / total n-grams over the corpus.

    Tokens are lowercased whitespace tokens; n-grams never cross a response boundary. Empty
    responses contribute nothing; a corpus with no n-gram at all scores 0.0.
    """
    grams = [g for r in responses for g in ngrams(whitespace_tokens(r), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


@lru_cache(maxsize=4)
def _bpe_encoding(name: str):
    import bpe_openai  # offline, same ids as tiktoken's cl100k_base

    return bpe_openai.get_encoding(name)


def resolve_tokenizer(tokenizer: Union[str, Tokenizer], vocab_size: Optional[int]) -> tuple[Tokenizer, int]:
    """Turn a tokenizer spec into (encode function, V).

    ``"cl100k_base"`` (or another bpe_openai encoding) → its ids and ``n_vocab``; ``"whitespace"`` →
    lowercased whitespace tokens (V must then be given); a callable → used as is (V must be given);
    any other string → a local Hugging Face tokenizer directory, V = ``len(tokenizer)``.
    """
    if callable(tokenizer):
        if vocab_size is None:
            raise ValueError("EAD with a custom tokenizer needs vocab_size (V)")
        return tokenizer, vocab_size
    if tokenizer == "whitespace":
        if vocab_size is None:
            raise ValueError("EAD with whitespace tokens needs vocab_size (V)")
        return whitespace_tokens, vocab_size
    if tokenizer.startswith(("cl100k", "o200k", "r50k", "p50k")):
        enc = _bpe_encoding(tokenizer)
        return enc.encode, vocab_size or enc.n_vocab
    from transformers import AutoTokenizer

    from data_prep.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(tokenizer, need="tokenizer"))
    return (lambda text: tok.encode(text, add_special_tokens=False)), vocab_size or len(tok)


def ead_n(
    responses: Sequence[str],
    n: int,
    tokenizer: Union[str, Tokenizer] = DEFAULT_EAD_ENCODING,
    vocab_size: Optional[int] = None,
) -> float:
    """EAD-n, Expectation-Adjusted Distinct (Liu et al. 2022, "Rethinking and Refining the Distinct Metric").

    EAD = distinct n-grams / (V · (1 − ((V − 1) / V) ** C)), where C is the total number of n-grams
    and V the vocabulary size: the denominator is the number of distinct tokens expected from C
    uniform draws, which removes Dist's bias against long outputs. TRACE's setting (the default):
    cl100k_base token ids of the responses concatenated into one sequence, V = the encoding's
    vocabulary size, each response whitespace-normalised and blank ones dropped first (evaluation.py's
    `normalize_text` and filter), so whitespace can never add n-grams. N-grams span response boundaries,
    as in TRACE. A corpus with no n-gram scores 0.0.
    """
    encode, vocab = resolve_tokenizer(tokenizer, vocab_size)
    if vocab < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab}")
    ids: list = []
    for r in normalized_corpus(responses):
        ids.extend(encode(r))
    grams = ngrams(ids, n)
    total = len(grams)
    if total == 0:
        return 0.0
    expected = vocab * (1.0 - ((vocab - 1) / vocab) ** total)
    return len(set(grams)) / expected


def diversity_metrics(
    responses: Sequence[str],
    tokenizer: Union[str, Tokenizer] = DEFAULT_EAD_ENCODING,
    vocab_size: Optional[int] = None,
) -> dict:
    """Dist-1/2 and EAD-1/2 for one system, with n (responses) and the EAD tokenizer named: the
    registry's Dist / EAD, whose settings are EAD's `tokenizer` and `vocab_size`."""
    return {
        "dist1": distinct_n(responses, 1),
        "dist2": distinct_n(responses, 2),
        "ead1": ead_n(responses, 1, tokenizer, vocab_size),
        "ead2": ead_n(responses, 2, tokenizer, vocab_size),
        "n": len(responses),
        "n_nonblank": len(normalized_corpus(responses)),
        "ead_tokenizer": tokenizer if isinstance(tokenizer, str) else getattr(tokenizer, "__name__", "custom"),
    }


# The figures a ratio to the human replies is given for: Dist-n and EAD-n fall as a corpus grows, so only
# the ratio to the human replies of the same dialogues compares across test sets of different sizes.
RATIO_KEYS = ("dist1", "dist2", "ead1", "ead2")


def human_ratios(stat: dict, human: dict, keys: Sequence[str] = RATIO_KEYS) -> dict[str, Optional[float]]:
    """Each of `keys` as a share of the human replies' value (None where either is missing or 0)."""
    return {k: (stat[k] / human[k] if stat.get(k) is not None and human.get(k) else None) for k in keys}
