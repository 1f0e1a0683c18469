"""Which check reads which role: the registry of named checks (`CHECKS`), each with the one line of why it exists,
and the checks a role's outputs are counted under (`role_checks`).

A built-in role is read by what it answers or is shown, never by its name: every role that writes free text by
`loop`, a role shown retrieved cases by `exemplar_copy`, a role with a reasoning by `parroted_rationale`, one with
trigger spans by `ungrounded_trigger`, and the role with a `response` field (the reply) by the reply checks. A
declared role (distill.roles.declared) gets `loop`, its reply role the reply checks that need no built-in role's
prompt, and a declared role shown retrieved cases (`exemplars: true`) `exemplar_copy`. The rules themselves live in
distill.quality.checks, .reply_form, .relevance and .judge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distill.roles.declared import REPLY_FIELD, label_set
from distill.roles.duties import answers_reply
from distill.roles.roles import ROLES, RoleSpec

# Whether a reply is one at all (distill.quality.reply_form and .relevance): what a weak teacher writes instead of a
# reply. `reply_judge` runs only when a judge model is given, so a role is counted under it only then.
REPLY_FORM_CHECKS = ("meta_commentary", "self_description", "prompt_echo", "template_fragment", "off_dialogue")
JUDGE_CHECK = "reply_judge"
# The answer fields some checks read, by name: a role's reasoning (parroted_rationale) and its trigger spans quoted
# from the seeker (ungrounded_trigger).
REASONING_FIELD = "reasoning"
TRIGGERS_FIELD = "triggers"


@dataclass(frozen=True)
class Check:
    """One named check: which built-in roles' outputs it reads (by what a role answers or is shown, never by its
    name), which fields, and why it exists (one line)."""

    name: str
    reads: Callable[[RoleSpec], bool]
    fields: str
    why: str

    @property
    def roles(self) -> tuple[str, ...]:
        """The built-in roles it reads, in stage order (a declared role's checks: `role_checks`)."""
        return tuple(name for name, spec in ROLES.items() if self.reads(spec))


def writes_text(spec: RoleSpec) -> bool:
    """Does the role answer with any free text (not only labels and flags)?"""
    fields = spec.schema.model_fields
    return any(label_set(spec, name) is None and info.annotation is not bool for name, info in fields.items())


def exemplar_copy_fields(spec: RoleSpec) -> tuple[str, ...]:
    """What `exemplar_copy` reads of a role shown retrieved cases: its reply, else its free-text answers (srp's
    reasoning; a declared role's text fields)."""
    fields = spec.schema.model_fields
    if answers_reply(spec):
        return (REPLY_FIELD,)
    return tuple(name for name, info in fields.items() if info.annotation is str)


def _answers(field: str) -> Callable[[RoleSpec], bool]:
    return lambda spec: field in spec.schema.model_fields


# The registry, in report order. `loop` reads every text field of every role that writes text.
CHECKS: dict[str, Check] = {
    c.name: c
    for c in (
        Check("loop", writes_text, "every text field",
              "degenerate repetition: a unit repeated in a row, a sentence said over and over, a character run, "
              "or text that compresses like a loop"),
        Check("exemplar_copy", lambda spec: spec.uses_exemplars, "srp reasoning, ers response",
              "reproduces the retrieved exemplars its own prompt carried instead of answering this seeker"),
        Check("ungrounded_trigger", _answers(TRIGGERS_FIELD), "cae triggers",
              "a trigger that is not a span of the seeker's turns, which TRACE's cause agent is asked to quote"),
        Check("parroted_rationale", _answers(REASONING_FIELD), "reasoning",
              "a reasoning that copies the seeker's turn or says nothing beyond the label and the prompt"),
        Check("echo", answers_reply, "response", "a reply that says back the seeker's last turn"),
        Check("non_reply", answers_reply, "response",
              "not a reply: no words (a timestamp, a number, a URL), a placeholder, an assistant's refusal or "
              "AI boilerplate, or a label or field name in its place (\"emotion: anger\", \"ER\")"),
        Check("near_duplicate", answers_reply, "response",
              "the same reply, or nearly the same, given to many different dialogues (run-level)"),
        Check("leaked_reference", answers_reply, "response (the dialogue's turns against its reference reply)",
              "the dialogue already holds its reference reply as a turn: a reply role trained on it learns to copy "
              "the reply out of its own prompt, and one scored on it is scored on a copy"),
        Check("meta_commentary", answers_reply, "response",
              "talks about the exchange (\"the seeker\", \"the response\")"),
        Check("self_description", answers_reply, "response", "the writer says it is an agent, a model or a role"),
        Check("prompt_echo", answers_reply, "response",
              "repeats the role's own instructions (its prompt's word n-grams)"),
        Check("template_fragment", answers_reply, "response",
              "template debris: braces, markup, a label's colon, one word and no sentence, unclosed brackets"),
        Check("off_dialogue", answers_reply, "response, against other dialogues of the run (run-level)",
              "about another dialogue: far less related to its own seeker than to another's"),
        Check(JUDGE_CHECK, answers_reply, "response (only with a judge model)",
              "a judge model answered that it is not a reply to the seeker (off unless a judge is given)"),
    )
}  # fmt: skip
# What audit runs on a declared role (distill.roles.declared): `loop` on every text field, and on the role that
# writes the reply the reply checks that need no built-in role's prompt.
_DECLARED_CHECKS = ("loop",)
_DECLARED_REPLY_CHECKS = ("loop", "echo", "non_reply", "near_duplicate", "leaked_reference", *REPLY_FORM_CHECKS)


def is_reply_role(role: str, roles: Mapping[str, RoleSpec] = ROLES) -> bool:
    """Does the role (of `roles`, its pipeline's) write the reply: has it a `response` answer field?"""
    spec = roles.get(role)
    return spec is not None and answers_reply(spec)


def role_checks(role: str, roles: Mapping[str, RoleSpec] = ROLES, judged: bool = False) -> tuple[str, ...]:
    """The checks a role's outputs are counted under, in report order: a built-in role's are those that read it, a
    declared role's (of `roles`, its pipeline's) those audit runs on it (a report lists every check a role was read
    by, at 0 where none fired); `reply_judge` only when a judge read the replies."""
    spec = roles.get(role)
    if spec is None:
        return ()
    if spec.pipeline is None:
        names = tuple(name for name, c in CHECKS.items() if c.reads(spec))
    else:
        declared = (*_DECLARED_REPLY_CHECKS, JUDGE_CHECK) if is_reply_role(role, roles) else _DECLARED_CHECKS
        if spec.uses_exemplars:  # shown retrieved cases (`exemplars: true`), as srp and ers are
            declared = (*declared, "exemplar_copy")
        names = tuple(name for name in CHECKS if name in declared)
    return names if judged else tuple(name for name in names if name != JUDGE_CHECK)
