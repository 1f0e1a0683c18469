"""Word overlap of each reply with its reference reply: ROUGE-L and BLEU, computed as `evaluate`'s `rouge` and
`bleu` metrics compute them, offline (the hub that serves those two scripts is not needed).

- ROUGE-L (Lin 2004): the F-measure of the longest common subsequence of a reply's and its reference's tokens,
  per dialogue. Tokens as Google's `rouge_score` makes them by default, which `evaluate`'s `rouge` uses
  (no stemmer): the text lowercased, every run of ASCII letters and digits a token, everything else a separator.
- BLEU (Papineni et al. 2002): a corpus statistic, the geometric mean of the clipped n-gram precisions up to
  `max_order`, summed over the corpus before dividing, times the brevity penalty exp(1 − r / c) when the
  replies' c tokens are fewer than the references' r. As `evaluate`'s `bleu` computes it (tensorflow/nmt's
  `compute_bleu` after sacrebleu's 13a tokenizer, case kept, ``smooth=False``): any order with no match
  makes BLEU 0.

BLEU's per-dialogue items are each reply's n-gram counts, not a sentence BLEU: the paired table resamples the
dialogues and recomputes the corpus BLEU from the drawn counts on each draw (Koehn 2004's paired bootstrap), so
its interval is for the figure the report shows. A mean of sentence BLEUs is another statistic (0 for every
reply that shares no bigram with its reference, unless smoothed).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Optional

from eval.metrics.stats import bootstrap_ci, mean_with_ci

_ROUGE_TOKEN = re.compile(r"[a-z0-9]+")
# sacrebleu's 13a rules (mteval-v13a.pl, as WMT tokenizes), applied in order to the padded line
_13A_RULES = (
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),  # punctuation and symbols stand alone
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),  # a period or comma not after a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),  # a period or comma not before a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),  # a dash after a digit
)
_13A_ENTITIES = (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">"))
BLEU_TOKENIZER = "13a"
ROUGE_TOKENIZER = "rouge_score's default (lowercased ASCII letter and digit runs, no stemming)"


# --- ROUGE-L ---------------------------------------------------------------------------------------


def rouge_tokens(text: str) -> list[str]:
    """`rouge_score`'s default tokens: lowercase, then the runs of [a-z0-9] (the rest separates them)."""
    return _ROUGE_TOKEN.findall(text.lower())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest common subsequence of two token lists (dynamic programming, one row kept)."""
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b, start=1):
            diagonal, row[j] = row[j], diagonal + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure: 2PR / (P + R) with P = LCS / reply tokens, R = LCS / reference tokens; 0 when either
    side has no token or they share none."""
    pred, ref = rouge_tokens(prediction), rouge_tokens(reference)
    common = lcs_length(ref, pred) if pred and ref else 0
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def score_rouge_l(replies: Sequence[str], gold_replies: Sequence[Optional[str]]) -> dict:
    """The registry's ROUGE-L: each reply's F-measure against its gold reply, their mean with a CI, and the
    F-measures as ``items`` (None where a dialogue has no gold reply, which is not scored)."""
    items = [rouge_l(r or "", g) if g and g.strip() else None for r, g in zip(replies, gold_replies)]
    return {**mean_with_ci([x for x in items if x is not None]), "tokenizer": ROUGE_TOKENIZER, "items": items}


# --- BLEU ------------------------------------------------------------------------------------------


def bleu_tokens(text: str) -> list[str]:
    """sacrebleu's 13a tokens, as `evaluate`'s `bleu` splits a line by default (case kept)."""
    text = text.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    for entity, char in _13A_ENTITIES:
        text = text.replace(entity, char)
    text = f" {text} "
    for pattern, replacement in _13A_RULES:
        text = pattern.sub(replacement, text)
    return text.split()


def _ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu_counts(prediction: str, reference: str, max_order: int) -> tuple[int, ...]:
    """One reply's BLEU sufficient statistics against its reference: the clipped matches of each order
    1..max_order, the reply's n-grams of each order, then the reply's and the reference's token counts."""
    pred, ref = bleu_tokens(prediction), bleu_tokens(reference)
    matches = [sum((_ngram_counts(pred, n) & _ngram_counts(ref, n)).values()) for n in range(1, max_order + 1)]
    possible = [max(len(pred) - n + 1, 0) for n in range(1, max_order + 1)]
    return (*matches, *possible, len(pred), len(ref))


def corpus_bleu(counts: Sequence[Sequence[int]], smooth: bool = False) -> dict:
    """Corpus BLEU from per-reply `bleu_counts` (their max order read off their length), with its parts."""
    if not counts:
        return {"bleu": 0.0, "precisions": [], "brevity_penalty": 0.0, "length_ratio": 0.0}
    totals = [sum(column) for column in zip(*counts)]
    order = (len(totals) - 2) // 2
    matches, possible, (pred_len, ref_len) = totals[:order], totals[order : 2 * order], totals[2 * order :]
    if smooth:  # Lin and Och 2004's add-one, as `evaluate`'s `bleu` with smooth=True
        precisions = [(m + 1.0) / (p + 1.0) for m, p in zip(matches, possible)]
    else:
        precisions = [m / p if p > 0 else 0.0 for m, p in zip(matches, possible)]
    geo_mean = math.exp(sum(math.log(p) for p in precisions) / order) if min(precisions) > 0 else 0.0
    ratio = pred_len / ref_len if pred_len and ref_len else 0.0
    penalty = 0.0 if ratio == 0 else 1.0 if ratio > 1.0 else math.exp(1 - 1 / ratio)
    return {
        "bleu": geo_mean * penalty,
        "precisions": precisions,
        "brevity_penalty": penalty,
        "length_ratio": ratio,
        "translation_length": pred_len,
        "reference_length": ref_len,
    }


def bleu_of_counts(counts: Sequence[Sequence[int]]) -> float:
    """The corpus BLEU of drawn `bleu_counts`: the registry's paired statistic for BLEU."""
    return corpus_bleu(counts)["bleu"]


def score_bleu(replies: Sequence[str], gold_replies: Sequence[Optional[str]], max_order: int = 2) -> dict:
    """The registry's BLEU-`max_order` against the gold replies: the corpus BLEU with a bootstrap CI (the corpus
    BLEU of each resample of the dialogues), its parts, and each reply's counts as ``items`` (None where a
    dialogue has no gold reply, which is not scored)."""
    items = [bleu_counts(r or "", g, max_order) if g and g.strip() else None for r, g in zip(replies, gold_replies)]
    scored = [x for x in items if x is not None]
    low, high = bootstrap_ci(scored, statistic=bleu_of_counts)
    return {
        "value": bleu_of_counts(scored) if scored else None,
        "ci_low": low,
        "ci_high": high,
        "n": len(scored),
        **{k: v for k, v in corpus_bleu(scored).items() if k != "bleu"},
        "max_order": max_order,
        "tokenizer": BLEU_TOKENIZER,
        "items": items,
    }
