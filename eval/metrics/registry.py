"""The metric registry: one entry per metric, and the one path by which any metric reaches a number.

compare, paired, report and score read this registry alone: a metric is its module (the scorer) plus
one `register(MetricSpec(...))`, and removing the entry removes it from report.json, report.md, the
paired table and `eval score`. An entry says what a reader of the numbers needs: the metric's name (the
paired table's), its label, whether it is a per-dialogue mean or a corpus statistic, which direction
is better, whether the paired table compares systems on it, whether the human replies get a row, its
settings (each with its one default), and where its figures stand in report.md.

A scorer takes the `Sample` fields its entry names in ``inputs`` (by default the replies, the gold
replies and the dialogues' contexts, any of them None where a source has none), plus its settings, and
returns a statistic dict (`eval.metrics.stats.mean_with_ci`'s shape for a mean), with an ``items`` list
of per-dialogue values when the metric is paired. A sample that lacks what ``needs`` names is not scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any, Literal, Optional, Union

from distill.pipeline.stage_key import digest
from eval.metrics.accuracy import emotion_agreement, i_acc, label_accuracy
from eval.metrics.bertscore import DEFAULT_BERTSCORE_MODEL, bertscore
from eval.metrics.diversity import DEFAULT_EAD_ENCODING, RATIO_KEYS
from eval.metrics.diversity_ci import diversity_with_items
from eval.metrics.length import reply_length
from eval.metrics.overlap import BLEU_TOKENIZER, bleu_of_counts, score_bleu, score_rouge_l
from eval.metrics.perplexity import (
    DEFAULT_PPL_CONTEXT,
    DEFAULT_PPL_MODEL,
    PPL_CONTEXTS,
    corpus_ppl,
    load_ppl,
    ppl_inputs,
    score_dialogue_ppl,
    score_ppl,
)
from eval.metrics.relevance import DEFAULT_RELEVANCE_MODEL, reply_relevance
from eval.metrics.similarity import DEFAULT_SIMILARITY_MODEL, answer_similarity
from eval.metrics.stats import mean_with_items

Scorer = Callable[..., dict]
REPLY_INPUTS = ("replies", "gold_replies", "contexts")


@dataclass(frozen=True)
class Sample:
    """One source's answers on one test set, with what they are scored against: all a scorer reads.
    A field is None where the source has no such thing (a probe writes no reply, a file has no gold)."""

    replies: Optional[list[str]] = None
    gold_replies: Optional[list[Optional[str]]] = None
    contexts: Optional[list[str]] = None  # the dialogue before each reply
    seeker_turns: Optional[list[str]] = None  # the seeker's last turn, the one each reply answers
    emotions: Optional[list[Optional[str]]] = None  # the emotion the source named
    gold_emotions: Optional[list[str]] = None
    gold_fine: Optional[list[Optional[str]]] = None  # ED's 32 labels, where the gold has them
    reference_emotions: Optional[list[Optional[str]]] = None  # the reference system's, same dialogues
    labels: Optional[list[Optional[str]]] = None  # a classification answer (a strategy, say) the source gave
    gold_labels: Optional[list[Optional[str]]] = None  # its gold label per dialogue
    train_labels: Optional[list[Optional[str]]] = None  # the train split's gold labels: the majority class
    answers: Optional[list[Optional[str]]] = None  # a free-text answer (an emotion, say) the source gave
    reference_answers: Optional[list[Optional[str]]] = None  # the reference system's, same dialogues
    latencies: Optional[list[float]] = None  # seconds per dialogue


@dataclass(frozen=True)
class Figure:
    """One number of a metric as report.md, its plots or a model card show it."""

    header: str
    path: str  # where it stands in a report row, dotted: "i_acc.ekman6.accuracy"
    decimals: Optional[int] = None  # fixed decimals; None: the report's rounding rule
    paper: Optional[str] = None  # where a paper's published row has it (`eval.paper`), for "Against the paper"
    paper_scale: float = 1.0  # a published percentage reads as a share with 0.01

    def read(self, row: dict) -> Any:
        """Its value in a report row (a statistic dict or a number); None where the row lacks it."""
        return _at(row, self.path)

    def read_paper(self, row: dict) -> Optional[float]:
        """Its value in a paper's published row, on this report's scale."""
        value = _at(row, self.paper or "")
        return None if value is None else value * self.paper_scale


def _at(row: Any, path: str) -> Any:
    for part in path.split("."):
        row = row.get(part) if isinstance(row, dict) else None
    return row


@dataclass(frozen=True)
class MetricSpec:
    name: str
    label: str
    level: Literal["dialogue", "corpus"]
    direction: Optional[Literal["higher", "lower"]]  # None: a scale, not a quality (reply length)
    paired: bool = False  # the paired table compares every pair of systems on it
    human_row: bool = False  # the dataset's human replies are scored on it too
    settings: dict[str, Any] = field(default_factory=dict)  # setting -> its one default
    score: Optional[Scorer] = None
    inputs: tuple[str, ...] = REPLY_INPUTS  # the `Sample` fields `score` takes, in order
    needs: Union[tuple[str, ...], Callable[[dict], tuple[str, ...]]] = ("replies",)  # or settings -> them
    key: Optional[str] = ""  # its key in a report row; "" = its name; None: paired only, shown elsewhere
    columns: Optional[tuple[Figure, ...]] = None  # its report.md columns; None: one, its label
    headline: tuple[Figure, ...] = ()  # its plot panels and model-card figures
    paper: tuple[Figure, ...] = ()  # its columns beside a paper's published rows
    paper_note: str = ""  # what a reader of that table needs to know of it (or why it is not there)
    versus_human: tuple[str, ...] = ()  # figures also given as a share of the human replies
    note: str = ""  # a line under report.md's title, formatted with the settings
    paired_statistic: Optional[Callable[[Sequence], float]] = None  # None: the mean of the items
    # a corpus metric's figures the paired table compares, a row each, on half-sampled corpora of its items
    # (`eval.metrics.diversity_ci.paired_differences`); (): the metric itself, by `paired_bootstrap`
    paired_figures: tuple[str, ...] = ()
    prepare: Optional[Callable[[dict], dict]] = None  # settings -> what to load once for a whole compare
    config: Optional[str] = None  # the compare config section of its settings (off when null); flag prefix
    opt_in: bool = False  # `eval score` runs it only when its first setting is given (it loads a model)
    options: dict[str, dict] = field(default_factory=dict)  # setting -> argparse keywords for `eval score`
    in_score: bool = True  # False: `eval score` leaves it out, as a figure it gives another way

    @property
    def reading(self) -> str:
        """How to read a difference (first − second) in the paired table."""
        return f"{self.direction} is better"

    @property
    def row_key(self) -> Optional[str]:
        return self.name if self.key == "" else self.key

    @property
    def shown(self) -> tuple[Figure, ...]:
        """Its report.md columns."""
        if self.columns is not None:
            return self.columns
        arrow = {"higher": " ↑", "lower": " ↓"}.get(self.direction or "", "")
        return (Figure(self.label + arrow, self.name),) if self.row_key else ()

    def needed(self, settings: dict) -> tuple[str, ...]:
        return self.needs(settings) if callable(self.needs) else self.needs

    def prefix(self) -> str:
        """Its settings' flags in `eval score`: ``--<prefix>-<setting>``."""
        return (self.config or self.name).replace("_", "-")


METRICS: dict[str, MetricSpec] = {}


def register(spec: MetricSpec) -> MetricSpec:
    if spec.name in METRICS:
        raise ValueError(f"metric '{spec.name}' is already registered")
    if spec.score is None:
        raise ValueError(f"metric '{spec.name}' has no scorer")
    METRICS[spec.name] = spec
    return spec


def paired_metrics() -> dict[str, str]:
    """metric -> its reading, for every metric the paired table compares."""
    return {name: spec.reading for name, spec in METRICS.items() if spec.paired}


def score_sample(sample: Sample, settings: dict[str, dict], human: bool = False) -> tuple[dict, dict[str, list]]:
    """Every metric named in `settings` (name -> its settings, plus what `prepare` loaded) that `sample`
    has the inputs for: the stats by row key, and the per-dialogue items of the paired ones. `human`:
    only the metrics that score the human replies."""
    row: dict[str, Any] = {}
    items: dict[str, list] = {}
    for name, given in settings.items():
        spec = METRICS[name]
        if (human and not spec.human_row) or any(getattr(sample, i) is None for i in spec.needed(given)):
            continue
        stat = dict(spec.score(*(getattr(sample, i) for i in spec.inputs), **given))
        got = stat.pop("items", None)
        if spec.row_key is not None:
            row[spec.row_key] = stat
        if spec.paired and got is not None:
            items[name] = got
    return row, items


_RATIO_LABELS = dict(zip(RATIO_KEYS, ("Dist-1", "Dist-2", "EAD-1", "EAD-2")))
_EKMAN6 = "i_acc.ekman6"

for _spec in (
    MetricSpec(
        "ppl", "PPL", "corpus", "lower", paired=True, human_row=True,
        settings={"model": DEFAULT_PPL_MODEL, "context": DEFAULT_PPL_CONTEXT, "batch_size": 8},
        score=score_ppl, inputs=("replies", "contexts"), needs=ppl_inputs,
        columns=(Figure("PPL ↓", "ppl"),), headline=(Figure("PPL", "ppl"),),
        note="PPL: reference LM `{model}`, context `{context}` "
        "(token-weighted exp(total NLL / total response tokens)).",
        paper_note="PPL is left out: the paper's reference LM differs.",
        paired_statistic=corpus_ppl, prepare=load_ppl, config="ppl", opt_in=True,
        options={
            "model": {
                "help": "reference causal LM alias/path for PPL (e.g. smollm2-135m; an encoder is refused); off when "
                "not given"
            },
            "context": {
                "choices": PPL_CONTEXTS,
                "help": "response: TRACE's PPL (no start token, first token unscored); document_start: every "
                "token scored after the LM's document-start token; dialogue: the response scored after "
                "--context-column",
            },
            "batch_size": {"type": int, "help": "replies scored per forward pass"},
        },
    ),
    # the target's third coherence guard (`eval.curve.target`), under PPL's reference LM; its own section
    # (`dialogue_ppl:`), off unless named, since it is a second LM pass over every reply and its dialogue;
    # `eval score` gives it as PPL with --ppl-context dialogue
    MetricSpec(
        "dialogue_ppl", "PPL given the dialogue", "corpus", "lower", paired=True, human_row=True,
        settings={"model": DEFAULT_PPL_MODEL, "batch_size": 8},
        score=score_dialogue_ppl, inputs=("replies", "contexts"), needs=("replies", "contexts"),
        columns=(Figure("PPL given the dialogue ↓", "dialogue_ppl"),),
        note="PPL given the dialogue: each reply scored after its dialogue under the untuned reference LM `{model}`, "
        "token-weighted as PPL; it rises when a reply stops answering the dialogue (human replies after their own "
        "dialogue against the same replies shuffled across dialogues: `benchmarks/coherence_calibration_ppl.json`).",
        paired_statistic=corpus_ppl, prepare=load_ppl, config="dialogue_ppl", opt_in=True, in_score=False,
    ),
    MetricSpec(
        "diversity", "Dist / EAD", "corpus", "higher", paired=True, human_row=True,
        settings={"tokenizer": DEFAULT_EAD_ENCODING, "vocab_size": None},
        score=diversity_with_items, inputs=("replies",), paired_figures=RATIO_KEYS,
        columns=tuple(Figure(label, f"diversity.{key}") for key, label in _RATIO_LABELS.items()),
        headline=(Figure("Dist-2", "diversity.dist2"), Figure("EAD-2", "diversity.ead2")),
        paper=tuple(Figure(f"{label} / human", f"human_ratio.{key}", 2, f"human_ratio.{key}")
                    for key, label in _RATIO_LABELS.items()),
        versus_human=RATIO_KEYS,
        paper_note="Dist-n and EAD-n fall as a corpus grows, so each is shown as a share of the human replies on "
        "the same dialogues (this report's human row for the systems above; the paper's test set for its rows).",
        note="Dist/EAD are corpus-level: their shares of the human replies and their paired differences carry "
        "95% CIs by half-sampling the test dialogues (each draw a new corpus of half of them, without repeats); "
        "EAD tokenizer `{tokenizer}`.",
        config="ead",
        options={
            "tokenizer": {"help": "EAD tokenizer (TRACE's by default)"},
            "vocab_size": {"type": int, "help": "EAD's V; null = the tokenizer's own (cl100k: 100277, as TRACE)"},
        },
    ),
    MetricSpec(
        "length_words", "length (words)", "dialogue", None, human_row=True, score=reply_length, inputs=("replies",)
    ),
    MetricSpec(
        "i_acc", "I-ACC", "dialogue", "higher", paired=True,
        score=i_acc, inputs=("emotions", "gold_emotions", "gold_fine"), needs=("emotions", "gold_emotions"),
        columns=(
            Figure("I-ACC (6, strict)", f"{_EKMAN6}.accuracy"),
            Figure("I-ACC (6, TRACE: invalid dropped)", f"{_EKMAN6}.accuracy_invalid_dropped"),
            Figure("invalid (dropped)", f"{_EKMAN6}.n_invalid"),
            Figure("macro-F1 (6)", f"{_EKMAN6}.macro_f1"),
        ),
        headline=(
            Figure("emotion accuracy (I-ACC, 6 classes)", f"{_EKMAN6}.accuracy"),
            Figure("macro-F1 (6)", f"{_EKMAN6}.macro_f1"),
        ),
        paper=(Figure("I-ACC (6)", f"{_EKMAN6}.accuracy", paper="i_acc", paper_scale=0.01),),
    ),
    MetricSpec(
        "bertscore_f1", "BERTScore", "dialogue", "higher", paired=True,
        settings={"model": DEFAULT_BERTSCORE_MODEL, "num_layers": None, "batch_size": 32},
        score=partial(bertscore, keep_items=True),
        inputs=("replies", "gold_replies"), needs=("replies", "gold_replies"),
        key="bertscore", columns=(Figure("BERTScore F", "bertscore.f1"),),
        headline=(Figure("BERTScore F vs the gold reply", "bertscore.f1"),),
        note="BERTScore: encoder `{model}`, vs the gold reply (neither TRACE's code nor MERG's text names an "
        "encoder; bert-score's English default is roberta-large).",
        config="bertscore",
        options={
            "model": {"help": "BERTScore encoder alias or local dir"},
            "num_layers": {"type": int, "help": "encoder layers used; null = all of them (6 for MiniLM)"},
            "batch_size": {"type": int, "help": "replies encoded per forward pass"},
        },
    ),
    MetricSpec(
        "relevance", "relevance", "dialogue", "higher", paired=True, human_row=True,
        settings={"model": DEFAULT_RELEVANCE_MODEL}, score=reply_relevance,
        inputs=("replies", "seeker_turns"), needs=("replies", "seeker_turns"),
        note="Relevance: per dialogue, the cosine of `{model}` sentence embeddings of the reply and the seeker's last "
        "turn; it falls when a reply stops answering the dialogue (human replies to their own dialogue against the "
        "same replies shuffled across dialogues: `benchmarks/coherence_calibration.json`).",
        config="relevance",
        options={"model": {"help": "the sentence encoder of relevance (alias or local dir)"}},
    ),
    MetricSpec(
        "rouge_l", "ROUGE-L", "dialogue", "higher", paired=True, score=score_rouge_l,
        inputs=("replies", "gold_replies"), needs=("replies", "gold_replies"),
        columns=(Figure("ROUGE-L ↑", "rouge_l"),), headline=(Figure("ROUGE-L vs the gold reply", "rouge_l"),),
        note="ROUGE-L: the F-measure of the longest common subsequence with the gold reply, per dialogue, on "
        "rouge_score's default tokens (lowercased ASCII words, no stemming), as `evaluate`'s `rouge` computes it.",
    ),
    MetricSpec(
        "bleu2", "BLEU-2", "corpus", "higher", paired=True, score=partial(score_bleu, max_order=2),
        inputs=("replies", "gold_replies"), needs=("replies", "gold_replies"), paired_statistic=bleu_of_counts,
        columns=(Figure("BLEU-2 ↑", "bleu2"),), headline=(Figure("BLEU-2 vs the gold reply", "bleu2"),),
        note=f"BLEU-2: corpus BLEU against the gold replies, n-grams up to 2, with the brevity penalty, "
        f"{BLEU_TOKENIZER} tokens, no smoothing, as `evaluate`'s `bleu` computes it; its CIs and paired "
        "differences recompute the corpus BLEU on each resample of the dialogues.",
    ),
    MetricSpec(
        "label_accuracy", "label accuracy", "dialogue", "higher", paired=True, score=label_accuracy,
        inputs=("labels", "gold_labels", "train_labels"), needs=("labels", "gold_labels"),
        columns=(
            Figure("label accuracy ↑", "label_accuracy.accuracy"),
            Figure("majority class", "label_accuracy.majority.rate"),
            Figure("label macro-F1", "label_accuracy.macro_f1"),
        ),
        headline=(Figure("label accuracy", "label_accuracy.accuracy"),),
    ),
    MetricSpec(
        "answer_similarity", "answer similarity", "dialogue", "higher", paired=True, score=answer_similarity,
        settings={"model": DEFAULT_SIMILARITY_MODEL}, inputs=("answers", "reference_answers"),
        needs=("answers", "reference_answers"), columns=(Figure("answer similarity ↑", "answer_similarity"),),
        note="Answer similarity: per dialogue, the cosine of `{model}` sentence embeddings of a system's free-text "
        "answer and the reference system's.",
    ),
    MetricSpec(
        "emotion_agreement", "emotion agreement", "dialogue", "higher", paired=True, score=emotion_agreement,
        inputs=("emotions", "reference_emotions"), needs=("emotions", "reference_emotions"), key=None,
    ),
    MetricSpec(
        "latency_s", "latency (s)", "dialogue", "lower", paired=True, score=mean_with_items,
        inputs=("latencies",), needs=("latencies",), key=None, headline=(Figure("latency (s)", "cost.latency_s"),),
        note="Latency is the sum of a dialogue's step latencies.",
    ),
):  # fmt: skip
    register(_spec)


@cache
def code_version() -> str:
    """The version of the metrics' code: `source_version` of this package. A compare report's key holds it, so a
    fix to any metric makes the reports scored before it stale (`eval.compare.reuse.report_inputs`)."""
    return source_version(Path(__file__).resolve().parent)


def source_version(package: Path) -> str:
    """A hash of a package's source: every `.py` file under it by its name there, its line endings read as LF (a
    Windows checkout of a commit hashes as a Linux one); nothing a run writes (`__pycache__`) counts."""
    files = sorted(package.rglob("*.py"))
    return digest([(f.relative_to(package).as_posix(), f.read_bytes().replace(b"\r\n", b"\n").decode()) for f in files])
