"""ROUGE-L as an `evaluate` module, loadable offline: `evaluate.load("<repo>/eval/metrics/modules/rouge_l")`.

The computation is `eval.metrics.overlap.rouge_l` (the F-measure of the LCS, on `rouge_score`'s default tokens,
no stemming): the ``rougeL`` that the hub's `rouge` returns. With ``use_aggregator`` it returns the plain mean of
the per-prediction F-measures, where the hub's `rouge` returns the median of an unseeded bootstrap of that mean.
"""

import datasets
import evaluate

from eval.metrics.overlap import rouge_l

_CITATION = """@inproceedings{lin-2004-rouge, title={{ROUGE}: A Package for Automatic Evaluation of Summaries},
author={Lin, Chin-Yew}, booktitle={Text Summarization Branches Out}, year={2004}, pages={74--81}}"""
_DESCRIPTION = "ROUGE-L: F-measure of the longest common subsequence of prediction and reference tokens."
_KWARGS = ("predictions: list of str; references: list of str (one per prediction); use_aggregator: the mean "
           "(default) or the list. Returns {'rougeL': float or list of float}.")


class RougeL(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation=_CITATION, inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
        )

    def _compute(self, predictions, references, use_aggregator=True):
        scores = [rouge_l(p, r) for p, r in zip(predictions, references)]
        return {"rougeL": sum(scores) / len(scores) if use_aggregator else scores}
