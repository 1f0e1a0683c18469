"""EAD-1/2 as an `evaluate` module, loadable offline: `evaluate.load("<repo>/eval/metrics/modules/ead")`.

The computation is `eval.metrics.diversity.ead_n` (Liu et al. 2022; default cl100k_base ids of the
concatenated predictions, V = its vocabulary size); this file only adapts it to evaluate's interface.
"""

import datasets
import evaluate

from eval.metrics.diversity import DEFAULT_EAD_ENCODING, ead_n

_CITATION = """@inproceedings{liu2022rethinking, title={Rethinking and Refining the Distinct Metric},
author={Liu, Siyang and Sabour, Sahand and Zheng, Yinhe and Ke, Pei and Zhu, Xiaoyan and Huang, Minlie}, booktitle={ACL}, year={2022}}"""
_DESCRIPTION = "EAD-n: distinct n-grams / (V * (1 - ((V-1)/V)**C)), C = total n-grams."
_KWARGS = ("predictions: list of str; tokenizer: 'cl100k_base' (default), 'whitespace' or a local HF tokenizer dir; "
           "vocab_size: V (defaults to the tokenizer's). Returns {'ead1': float, 'ead2': float}.")


class Ead(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation=_CITATION, inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("string")}),
        )

    def _compute(self, predictions, tokenizer=DEFAULT_EAD_ENCODING, vocab_size=None):
        return {"ead1": ead_n(predictions, 1, tokenizer, vocab_size), "ead2": ead_n(predictions, 2, tokenizer, vocab_size)}
