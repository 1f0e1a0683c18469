"""TRACE's own figures and recipes that generic code reads by role: kept beside TRACE's roles (`ROLES`), so no
module outside distill/roles/ names one of them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# The teacher-agreement figures (eval.metrics.accuracy): figure -> (role, label field), scored as exact matches,
# and figure -> (role, list field), scored as the token F1 of the spans
AGREEMENT_FIELDS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"emotion": ("asi", "emotion"), "cause_category": ("cae", "category"), "strategy": ("srp", "strategy")}
)
SPAN_AGREEMENT_FIELDS: Mapping[str, tuple[str, str]] = MappingProxyType({"trigger_f1": ("cae", "triggers")})

# The quickstart's training per role (eval.quickstart). Where the training goes: the emotion (a label the
# gold-guided teacher gets right) and the reply (the human one) are what the student can learn on a CPU's budget;
# the 135M teacher's causes and strategies are weak targets. asi's answer is a few tokens, so its rows are cheap
# to see many times, at a higher learning rate.
QUICKSTART_BUDGETS: Mapping[str, int] = MappingProxyType({"asi": 24000, "cae": 2000, "srp": 2000, "ers": 16000})
QUICKSTART_LEARNING_RATES: Mapping[str, float] = MappingProxyType({"asi": 2e-3, "cae": 5e-4, "srp": 5e-4, "ers": 5e-4})
