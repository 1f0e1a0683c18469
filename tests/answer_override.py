"""A backend wrapper for tests of the reflection loop: a real backend answers every request, then the
test's `override(request, result)` may replace chosen answers (an audit that faults a stage, say)."""

from __future__ import annotations


class AnswerOverride:
    def __init__(self, inner):
        self.inner, self.name, self.model = inner, inner.name, inner.model
        self.audited: set[str] = set()  # audit prompts seen, for overrides that act on the first one only

    def generate(self, requests, progress=None):
        results = self.inner.generate(requests, progress)
        for request, result in zip(requests, results):
            self.override(request, result)
        return results

    def first_audit(self, request) -> bool:
        """True for the first audit request with this prompt (an audit of a new iteration has a new one)."""
        prompt = request.messages[-1]["content"]
        if "Global Reflection Agent" not in request.messages[0]["content"] or prompt in self.audited:
            return False
        self.audited.add(prompt)
        return True

    def override(self, request, result) -> None:
        raise NotImplementedError

    def describe(self):
        return self.inner.describe()
