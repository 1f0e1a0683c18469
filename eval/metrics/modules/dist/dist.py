"""Dist-1/2 as an `evaluate` module, loadable offline: `evaluate.load("<repo>/eval/metrics/modules/dist")`.

The computation is `eval.metrics.diversity.distinct_n` (TRACE's definition: lowercased whitespace tokens,
distinct / total n-grams over the corpus); this file only adapts it to evaluate's interface.
"""

import datasets
import evaluate

from eval.metrics.diversity import distinct_n

_CITATION = """@inproceedings{li2016diversity, title={A Diversity-Promoting Objective Function for Neural Conversation Models},
author={Li, Jiwei and Galley, Michel and Brockett, Chris and Gao, Jianfeng and Dolan, Bill}, booktitle={NAACL}, year={2016}}"""
_DESCRIPTION = "Dist-n: distinct n-grams / total n-grams over all predictions (lowercased whitespace tokens)."
_KWARGS = "predictions: list of str. Returns {'dist1': float, 'dist2': float}."


class Dist(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation=_CITATION, inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("string")}),
        )

    def _compute(self, predictions):
        return {"dist1": distinct_n(predictions, 1), "dist2": distinct_n(predictions, 2)}
