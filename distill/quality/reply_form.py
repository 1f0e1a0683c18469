"""Is a reply a reply: said to the seeker, by a listener, in sentences, in its own words.

A weak teacher that is told it is "the Empathetic Response Synthesizer in a team of agents" often writes about
the exchange instead of taking part in it ("The most empathetic response to this response is to acknowledge the
seeker's feelings"), describes itself ("I am the Synthesizer..."), repeats its instructions ("Express the
feelings reading the seeker's situation stirs in you"), or leaves a template's debris (`{{<ref>{`, "Specter
Response: "). None of that is in the human replies of ED or ESD-CoT (docs/quality.md has the rates), so each
rule below fails it. Each returns the one-line reason a reply fails, or None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Optional

from distill.quality.checks import copied, words
from distill.quality.thresholds import QualityThresholds

# The parties and the artefact of the exchange, named in the third person. A listener says "you", not "the
# seeker"; it speaks, it does not discuss "the response" or "a great reply". A bare "a response" is left alone
# ("filing a response to the claims"), as are "the person" and "the situation", which people say of others.
_PARTY = r"seekers?|listeners?|speakers?|help-?seekers?|responders?|users?|interlocutors?"
_ARTEFACT = r"responses?|repl(?:y|ies)"
# a grade given to a reply, as a critic gives it ("a great response"); "a natural response to what happened" passes
_VERDICT = r"great|good|perfect|best|better|wonderful|excellent|ideal|appropriate|suitable|proper|sample|empathetic"
_META = re.compile(
    rf"\b(?:the|this|that|these|those)\s+(?:(?:[\w-]+\s+){{0,2}})?(?:{_PARTY})\b"
    rf"|\b(?:the|this|that|these|my|your|our|(?:empath|compassion)\w*(?:-\w+)?)\s+(?:{_ARTEFACT})\b"
    rf"|\b(?:a|an)\s+(?:\w+\s+)?(?:{_VERDICT})\s+(?:{_ARTEFACT})\b"
    r"|\bhow to respond\b|\bhuman(?:-\w+)? (?:listeners?|responders?|responses?|repl(?:y|ies))\b"
    r"|\b(?:is|was) (?:a|an) (?:\w+ ){0,2}example of\b"
    r"|\b(?:in|of) this (?:dialogue|conversation|exchange|scenario)\b"
    # an emotion class given as a verdict ("I think it's disgust"), and talk of the output's format
    r"|\b(?:it's|it is|is|was) (?:anger|fear|disgust|happiness|sadness|surprise)\b"
    r"|\bjson\b|\bhere(?:'s| is) (?:a|an|the) (?:\w+ )?(?:script|template|sample|code|example)\b",
    re.I,
)
# The task's name as the whole reply ("empathy", "Empathizing."): listeners say "I can empathize with that".
_TASK_WORD = re.compile(r"^\W*(?:\w+\W+){0,2}empath\w*\W*$", re.I)
# What the writer says it is. "I'm a nurse" is a person; an agent, a model, or one of the pipeline's own role titles
# (`role_titles`: from the registry, so a declared role's title counts) is the prompt talking.
# ("a wedding planner", "a role model", "an administrative assistant" are people: those words are not here)
_WHAT_AN_AGENT_IS = (
    r"agents?|ai|a\.i\.|(?:ai|virtual) assistant|bot|chatbot|language model|synthesi[sz]er|identifier"
    r"|forecaster|recogni[sz]er|(?:reply|response|text) generator|responder"
)
_SELF = re.compile(
    rf"\b(?:i am|i'm|as|being) (?:the|an?|your|this)\s+(?:[\w-]+\s+){{0,3}}?(?:{_WHAT_AN_AGENT_IS})\b"
    r"|\bteam of (?:agents|experts)\b|\bmy (?:role|task|job|instructions?|prompt) (?:is|was|here)\b"
    r"|\bchat ?bots?\b|\blanguage models?\b|\bsorry for (?:the|any) (?:confusion|misunderstanding|inconvenience)\b",
    re.I,
)
_AI = re.compile(r"\bA\.?I\b")  # "AI" in capitals: no listener in ED or ESD-CoT names it
# A template's debris: braces, markup tags, chat-template tokens, a reply that ends on a label's colon, or opens
# with a heading of capitalised words and a colon ("Specter Response: ..."). An emoticon's colon (":)", "(:")
# is no label: the colon must follow a letter.
_MARKUP = re.compile(r"[{}]|</?[A-Za-z][\w-]*\s*/?>|<\|[^|]*\|>|\[/?(?:INST|SYS|ref)\]|^\s*#{1,6}\s|\*\*", re.M)
_TRAILING_COLON = re.compile(r"[^\W\d_]['\")\]*]*\s*:\s*$")
_HEADING = re.compile(r"^\W*(?:[A-Z][\w'-]*\s+){1,3}[A-Z][\w'-]*\s*:\s+\S")
_LABEL_PAIR = re.compile(r"^\W*[^\W\d_][\w'-]*(?: [\w'-]+)?\s*:\s*[\w'-]+(?: [\w'-]+)?\W*$")  # "Malike: Serenade"
_LABEL_CHAIN = re.compile(r"[^\W\d_]\s*:\s+[^:]{1,60}[^\W\d_]\s*:\s")
# One word and no sentence mark ("depressing", "Demonizing", "SELF-CORPORAL") is a label or a fragment, not what a
# listener says: ED's one-word replies are "ok", "k", "ick." and "Why?"; a mark ("Devastated.") or a word people say
# on its own passes. A bare "yes" or "no" is not among them: it answers a question, and a listener's reply answers a
# seeker's telling (ED's human replies hold none).
_ONE_WORD = re.compile(r"^\W*([^\W\d_][^\W_]*(?:[-_'][^\W_]+)*)\s*$")  # a number alone is non_reply's
_SAID_ALONE = frozenset(
    "ok okay k kk yay oh ah aw aww awww wow whoa ha haha hahaha lol lmao omg ugh hmm um"
    " uh ick ew eww gross yikes ouch nice cool awesome great sweet congrats congratulations thanks thank same true"
    " agreed sure right exactly definitely absolutely totally indeed really seriously sorry bummer damn dang yum"
    " amazing wonderful lovely perfect fantastic terrible awful horrible hi hey hello bye".split()
)
_SHOUTED_WORD = re.compile(r"^\W*[A-Z]{4,}\W*$")  # "DISGUSTED": a label; people shout short words ("OMG", "LOL")
_BRACKETS = (("(", ")"), ("[", "]"))
_EMOTICON = re.compile(r"[:;=][-']?[()\[\]DPpOo3/\\|]|[()\[\]][-']?[:;=]")


def meta_commentary(reply: str) -> Optional[str]:
    """Talk about the exchange in the third person ("the seeker", "the response", "empathy") instead of to the
    seeker."""
    if m := _META.search(reply) or _TASK_WORD.match(reply):
        return f"speaks about the exchange, not to the seeker: {_clip(m.group(0))}"
    return None


def self_description(reply: str, role_titles: Iterable[str]) -> Optional[str]:
    """The writer describes itself as an agent, a model or one of the pipeline's roles."""
    text = " ".join(reply.split())
    for title in _titles(role_titles):
        # a one-word title may be a word listeners use ("Supporter"): only claiming it is the role speaking
        claim = r"\b(?:i am|i'm|as) (?:the|an?|your) " if len(title.split()) == 1 else r"\b"
        if title.strip() and re.search(rf"{claim}{re.escape(title.strip())}\b", text, re.I):
            return f"names its own role: {_clip(title)}"
    if m := _SELF.search(text) or _AI.search(text):
        return f"describes itself as an agent: {_clip(m.group(0))}"
    return None


def _titles(role_titles: Iterable[str]) -> list[str]:
    """The titles, and of a title of three words or more its last two ("Response Synthesizer"), which a weak
    teacher writes as a name of its own ("Empathy Response Synthesizer")."""
    out = []
    for title in role_titles:
        parts = title.split()
        out += [title, " ".join(parts[-2:])] if len(parts) >= 3 else [title]
    return out


def template_fragment(reply: str) -> Optional[str]:
    """Template debris instead of prose: braces or markup, a label chain or heading ("Specter Response: "), a
    trailing colon, one word and no sentence, or brackets that never close."""
    if m := _MARKUP.search(reply):
        return f"markup or template syntax: {_clip(m.group(0))}"
    if _SHOUTED_WORD.match(reply):
        return f"one word in capitals, a label in place of a reply: {_clip(reply)}"
    if (m := _ONE_WORD.match(_EMOTICON.sub(" ", reply))) and m.group(1).lower() not in _SAID_ALONE:
        return f"one word and no sentence: {_clip(reply)}"
    if _TRAILING_COLON.search(reply):
        return f"ends on a label's colon: {_clip(reply.strip()[-40:])}"
    bare = _EMOTICON.sub(" ", reply)
    if m := _HEADING.match(reply) or _LABEL_PAIR.match(bare) or _LABEL_CHAIN.search(reply):
        return f"a heading or label chain, not a sentence: {_clip(m.group(0))}"
    for left, right in _BRACKETS:
        if bare.count(left) != bare.count(right):
            return f"unbalanced {left}{right}: {bare.count(left)} opened, {bare.count(right)} closed"
    return None


def prompt_echo(reply: str, instructions: str, t: QualityThresholds) -> Optional[str]:
    """The reply repeats the role's own instructions: `prompt_echo_share` or more of its words, and at least
    `prompt_echo_min_words`, sit in word n-grams of what the role was told (its prompt without the dialogue and
    the retrieved cases' text, which echo and exemplar_copy read)."""
    ws = words(reply)
    if not ws or not instructions:
        return None
    hits = sum(copied(ws, [words(instructions)], t.prompt_echo_ngram))
    if hits >= t.prompt_echo_min_words and hits / len(ws) >= t.prompt_echo_share:
        return f"{hits} of its {len(ws)} words repeat the role's own instructions"
    return None


def _clip(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 1] + "\u2026")
