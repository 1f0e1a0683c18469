"""BLEU as an `evaluate` module, loadable offline: `evaluate.load("<repo>/eval/metrics/modules/bleu")`.

The computation is `eval.metrics.overlap` (corpus BLEU after 13a tokenization, as the hub's `bleu` computes it:
tensorflow/nmt's `compute_bleu`), with the hub module's arguments (``max_order``, ``smooth``) and its output keys;
one reference per prediction.
"""

import datasets
import evaluate

from eval.metrics.overlap import bleu_counts, corpus_bleu

_CITATION = """@inproceedings{papineni-etal-2002-bleu, title={{BLEU}: a Method for Automatic Evaluation of Machine
Translation}, author={Papineni, Kishore and Roukos, Salim and Ward, Todd and Zhu, Wei-Jing}, booktitle={ACL}, year={2002}}"""
_DESCRIPTION = "Corpus BLEU: geometric mean of clipped n-gram precisions up to max_order, times the brevity penalty."
_KWARGS = ("predictions: list of str; references: list of str (one per prediction); max_order (default 4); smooth "
           "(default False). Returns {'bleu', 'precisions', 'brevity_penalty', 'length_ratio', 'translation_length', "
           "'reference_length'}.")


class Bleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation=_CITATION, inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
        )

    def _compute(self, predictions, references, max_order=4, smooth=False):
        counts = [bleu_counts(p, r, max_order) for p, r in zip(predictions, references)]
        return corpus_bleu(counts, smooth=smooth)
