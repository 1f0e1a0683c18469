"""The pairwise judge: order swapping, the tie rule, the sign test, and a real judge backend."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from distill.backends.base import Backend, GenerationRequest, GenerationResult
from eval.metrics.judge import combine_orders, judge_pairs, parse_verdict, verdict_schema
from eval.metrics.stats import sign_test


class ScriptedJudge:
    """Answers by looking at which slot holds a reply containing 'GOOD' (a stand-in for a model
    with opinions), with an optional position bias that always says A. Used for the order logic only."""

    name = "scripted"
    model = "scripted-judge"

    def __init__(self, always_a: bool = False):
        self.always_a = always_a
        self.seen: list[GenerationRequest] = []

    def generate(self, requests: Sequence[GenerationRequest], progress=None) -> list[GenerationResult]:
        self.seen.extend(requests)
        out = []
        for req in requests:
            text = req.messages[-1]["content"]
            a = text.split("Reply A: ")[1].split("\n\nReply B: ")[0]
            b = text.split("Reply B: ")[1].split("\n\nAspects:")[0]
            choice = (
                "A"
                if self.always_a
                else ("A" if "GOOD" in a and "GOOD" not in b else "B" if "GOOD" in b and "GOOD" not in a else "tie")
            )
            out.append(GenerationResult(text=f'{{"empathy": "{choice}", "fluency": "tie"}}'))
        return out

    def describe(self):
        return {"name": self.name, "model": self.model}


def test_combine_orders_rule():
    assert combine_orders("A", "B") == "win"
    assert combine_orders("B", "A") == "lose"
    for first, second in [("A", "A"), ("B", "B"), ("tie", "B"), ("A", "tie"), ("tie", "tie"), (None, "B"), ("A", None)]:
        assert combine_orders(first, second) == "tie"


def test_both_orders_are_asked_and_bias_cancels(tiny_dialogues):
    dialogues = tiny_dialogues[:4]
    mine = ["GOOD reply", "plain", "GOOD too!", "plain"]
    other = ["plain", "GOOD other", "GOOD too", "plain too"]
    judge = ScriptedJudge()
    res = judge_pairs(judge, dialogues, mine, other, aspects=["empathy", "fluency"])
    assert isinstance(judge, Backend) and len(judge.seen) == 8
    # each dialogue is shown once with the system as A and once as B
    assert "Reply A: GOOD reply" in judge.seen[0].messages[-1]["content"]
    assert "Reply B: GOOD reply" in judge.seen[1].messages[-1]["content"]
    emp = res["aspects"]["empathy"]
    assert (emp["win"], emp["lose"], emp["tie"], emp["n"], emp["invalid"]) == (1, 1, 2, 4, 0)
    assert res["aspects"]["fluency"]["tie"] == 4
    assert [o["empathy"] for o in res["outcomes"]] == ["win", "lose", "tie", "tie"]
    # a judge that always says "A" prefers neither system once the orders are swapped
    biased = judge_pairs(ScriptedJudge(always_a=True), dialogues, mine, other, aspects=["empathy"])
    assert biased["aspects"]["empathy"]["tie"] == 4 and biased["aspects"]["empathy"]["p_value"] == 1.0


def test_invalid_verdicts_count_as_ties(tiny_dialogues):
    class Broken(ScriptedJudge):
        def generate(self, requests, progress=None):
            return [GenerationResult(text="I think A is nicer") for _ in requests]

    res = judge_pairs(Broken(), tiny_dialogues[:2], ["x", "y"], ["z", "w"], aspects=["empathy"])
    assert res["aspects"]["empathy"]["tie"] == 2 and res["aspects"]["empathy"]["invalid"] == 4


def test_identical_replies_are_a_tie_without_asking(tiny_dialogues):
    dialogues = tiny_dialogues[:3]
    judge = ScriptedJudge(always_a=True)
    res = judge_pairs(judge, dialogues, ["same", "GOOD mine", ""], ["same", "plain", None], aspects=["empathy"])
    # only the one differing pair reaches the judge, in both orders
    assert len(judge.seen) == 2 and "Reply A: GOOD mine" in judge.seen[0].messages[-1]["content"]
    emp = res["aspects"]["empathy"]
    assert (emp["tie"], emp["identical"], emp["invalid"], emp["n"]) == (3, 2, 0, 3)
    assert [o["empathy"] for o in res["outcomes"]] == ["tie", "tie", "tie"]
    nobody = ScriptedJudge()
    res = judge_pairs(nobody, dialogues[:1], ["same"], ["same"], aspects=["empathy"])
    assert nobody.seen == [] and res["aspects"]["empathy"]["identical"] == 1


def test_parse_verdict_and_schema():
    schema = verdict_schema(["empathy", "consistency"])
    assert parse_verdict('{"empathy": "A", "consistency": "tie"}', schema) == {"empathy": "A", "consistency": "tie"}
    assert parse_verdict('Sure! {"empathy": "B", "consistency": "A"} done', schema)["empathy"] == "B"
    assert parse_verdict('{"empathy": "C", "consistency": "A"}', schema) is None
    with pytest.raises(ValueError, match="unknown judge aspect 'humour'"):
        verdict_schema(["humour"])


def test_sign_test_on_judge_counts():
    from scipy.stats import binomtest

    assert sign_test(9, 1) == pytest.approx(binomtest(9, 10).pvalue)
    assert sign_test(0, 0) == 1.0


@pytest.mark.slow
def test_embedded_model_as_judge(tiny_dialogues):
    from distill.backends.local import LocalBackend

    backend = LocalBackend("smollm2-135m", batch_size=8)
    dialogues = tiny_dialogues[:2]
    res = judge_pairs(
        backend,
        dialogues,
        ["I am so sorry, that must hurt.", "Wow, great job!"],
        ["ok.", "ok."],
        aspects=["empathy", "fluency"],
    )
    for counts in res["aspects"].values():
        assert counts["invalid"] == 0  # constrained decoding always yields a parseable verdict
        assert counts["win"] + counts["lose"] + counts["tie"] == counts["n"] == 2
        assert 0.0 <= counts["p_value"] <= 1.0
    assert res["judge"]["model"] == "smollm2-135m"
