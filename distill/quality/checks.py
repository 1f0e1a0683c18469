"""The text-level quality checks: each takes the text (and what it is compared with) and returns the one-line
reason it fails, or None when it passes.

These are the rules alone, with no knowledge of traces: distill.quality.audit decides which role's field goes
to which check, and near_duplicate (a run-level check) lives in distill.quality.duplicates. The word rules read
text through `words`, so "stress_relief_relief" and "Stress relief, relief" are the same three words; `loop`'s
identifier, character and compression rules read the raw text, `non_reply`'s placeholder and refusal rules the
lower-cased text, and `ungrounded_trigger` its span matcher's own normalisation. Which check reads which role:
distill.quality.registry (`CHECKS`, `role_checks` and `is_reply_role` are re-exported here for their importers).
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Optional

from data_prep.taxonomy import ED_EMOTIONS, EKMAN, STRATEGIES
from distill.quality.registry import CHECKS as CHECKS
from distill.quality.registry import is_reply_role as is_reply_role
from distill.quality.registry import role_checks as role_checks
from distill.quality.thresholds import QualityThresholds
from distill.roles.roles import ROLES

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # underscores split: a snake_case identifier reads as its parts
_IDENTIFIER = re.compile(r"[^\W_]+(?:_+[^\W_]+)+")
_SENTENCE_END = re.compile(r"[.!?]+")
_UNFINISHED_WORD = re.compile(r"[^\W_]+(?:'[^\W_]*)*$|'$")  # the next token may still extend it
_URL = re.compile(r"\b(?:https?://|www\.)\S+|\b\S+@\S+\.\w+", re.I)
# Copies of the seeker are matched on word trigrams; of the prompt's instructions on 4-grams, so that a
# reasoning sharing a common three-word phrase with the instructions ("the seeker's word") keeps it as its own.
_COPY_NGRAM = 3
_PROMPT_NGRAM = 4
# Words people repeat as an exclamation ("No no no no", "yeah yeah yeah yeah"): `loop_interjection_repeats`.
_INTERJECTIONS = frozenset(
    "no nope yes yeah yep yay oh ah aw ha haha hah he hehe ho la na nah go bye please wow whoa woo hey ok okay"
    " ugh hmm um uh".split()
)
# A whole reply that is one of these is a slot the model never filled, not a reply.
_PLACEHOLDERS = {"null", "none", "nan", "n/a", "na", "undefined", "todo", "tbd", "response", "reply", "string", "text"}

# Words a reasoning may use without saying anything about this seeker: function words, and the stock words of
# an emotion or strategy verdict. Kept short on purpose: a word listed here can never count as a cue.
FUNCTION_WORDS = set(
    """a about above after again all also am an and any are as at be because been being but by can could did do
    does doing for from had has have having he her here him his how i i'm if in into is it it's its just me more
    most my no not of on or our out over own so some such than that that's the their them then there these they
    this those to too under up very was we were what when where which while who whom why will with would you your
    she he's she's they're their's being""".split()
)
_STOCK_WORDS = set(
    """seeker seeker's seekers speaker speaker's user user's person person's emotion emotions emotional feel feels
    feeling feelings felt true truly judge judging judged context dialogue conversation text statement message
    messages express expresses expressed expressing expression dominant primary main overall clearly clear likely
    label class category identified identify identifies indicates indicate indicating suggests suggest shows show
    showing based therefore thus hence answer reasoning reason strategy best appropriate suitable choose chosen
    choice use used response reply cue cues word words flow tone sentiment state given seems seem""".split()
)
_EMOTION_WORDS = (
    set(EKMAN)
    | set(ED_EMOTIONS)
    | set("happy joy sad angry mad upset scared fearful frightened worried disgusting shocked surprising".split())
)
_STRATEGY_WORDS = {s.lower() for s in STRATEGIES} | {"reaction", "interpretation", "exploration"}
LABEL_WORDS = frozenset(_EMOTION_WORDS | _STRATEGY_WORDS)

# An assistant's refusal or AI boilerplate, on `_folded` lower-cased text. Each pattern needs an assistant's
# wording (assist, comply, "with that", a request, "as an AI"), never a bare "sorry", "can't help" or "won't
# help": listeners write "I'm sorry to hear that", "you can't help it", "worrying won't help", and those pass, as
# does "I'm unable to provide much advice but I am here for you" (a "but" after "provide": the listener stays).
_NOT_ABLE = r"(?:can't|cannot|can not|unable to|not able to|(?:won't|will not) be able to)"
_REFUSAL = re.compile(
    rf"\bi(?:'m| am)? {_NOT_ABLE} (?:assist|comply|fulfill?|provide\b(?![^.!?]*\bbut\b))\b"
    rf"|\b{_NOT_ABLE} (?:help|assist)\b[^.!?]{{0,40}}?(?:\bwith (?:that|this)\b|\brequests?\b)"
    rf"|\bi(?:'m| am)? {_NOT_ABLE} (?:help|assist)(?: you)? *(?:[.!]|$)"
    r"|\b(?:as|i'm|i am) (?:just |only )?an? (?:ai|artificial intelligence|(?:ai |large )?language model"
    r"|ai assistant|virtual assistant|chatbot)\b"
)
# What a role's output is made of, rather than what a listener says: the field names of every role's schema
# (from the registry, so a new role's fields count), the keys a model wraps an answer in, the speaker prefixes of
# a rendered dialogue, and the label sets. A reply that opens "<these>:" or is made only of these words (plus
# `_LABEL_GLUE`) is a label in place of a reply: "emotion: anger", "Strategy: ER", "Emotional Reaction".
_FIELD_WORDS = frozenset(
    w
    for spec in ROLES.values()
    for schema in (spec.schema, spec.student_schema)
    if schema is not None
    for name in schema.model_fields
    for w in name.split("_")
) | {"answer", "label", "output", "summary", "reply", "responder", "listener", "assistant", "seeker"}
_TAG_WORDS = _FIELD_WORDS | LABEL_WORDS | {"emotional", "class"}
# A reply made of labels alone reads the labels a role answers with (Ekman's, the strategies), not ED's 32
# emotions: those are adjectives a listener reacts with ("Devastated.", "Impressed!").
_OUTPUT_TAG_WORDS = _FIELD_WORDS | set(EKMAN) | _STRATEGY_WORDS | {"emotional", "class"}
# Kept to the words that join labels ("anger and fear", "the emotion is anger"): with every function word,
# "Was he upset?" and "I'm so happy for you" would be labels.
_LABEL_GLUE = frozenset("a an the and or is of".split())
_TAG_PREFIX = re.compile(r"^\W*([^\W\d_]+(?:[ _][^\W\d_]+){0,2})[\s\"'*`]*[:=]")


def words(text: str) -> list[str]:
    """Lower-cased words and numbers; typographic apostrophes folded, underscores and punctuation split."""
    return _WORD.findall(_folded(text).lower())


def _folded(text: str) -> str:
    """NFKC, typographic apostrophes folded, runs of white space made one space."""
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    return re.sub(r"\s+", " ", text)


def copied(text: Sequence[str], source: Iterable[Sequence[str]], n: int) -> list[bool]:
    """For each word of `text`: does it sit inside a word n-gram that one of the `source` texts also has?"""
    grams = {tuple(s[i : i + n]) for s in source for i in range(len(s) - n + 1)}
    covered = [False] * len(text)
    for i in range(len(text) - n + 1):
        if tuple(text[i : i + n]) in grams:
            covered[i : i + n] = [True] * n
    return covered


# --- loop ---------------------------------------------------------------------------------------


def loop(text: str, t: QualityThresholds) -> Optional[str]:
    """Degenerate repetition: a unit repeated in a row, a sentence said over and over, a character run, or
    text that compresses far better than prose does."""
    if hit := _repeated_units(text, t) or _repeated_sentence(text, t.loop_phrase_repeats):
        return hit
    if hit := _character_run(text, t):
        return hit
    raw = text.encode("utf-8")
    if len(raw) >= t.loop_compression_min_chars:
        ratio = len(raw) / len(zlib.compress(raw, 9))
        if ratio >= t.loop_compression_ratio:
            return f"compresses {ratio:.1f}x with zlib (prose: under {t.loop_compression_ratio})"
    return None


def loop_so_far(text: str, t: QualityThresholds) -> Optional[str]:
    """`loop` on a text still being decoded, by the rules more text cannot undo, so that whatever it finds
    `loop` finds in the whole text: word and phrase runs without the possibly unfinished last word, repeated
    sentences up to the last sentence end, and character runs anywhere, the growing last word included (more
    characters cannot shorten "hahahaha" or "1000000000"). The compression rule is left out: a prefix can
    compress better than the whole."""
    done = _UNFINISHED_WORD.sub("", text)
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    return (
        _repeated_units(done, t)
        or _repeated_sentence(text[: ends[-1]] if ends else "", t.loop_phrase_repeats)
        or _character_run(text, t)
    )


def _repeated_units(text: str, t: QualityThresholds) -> Optional[str]:
    """A unit repeated in a row: inside a snake_case identifier, one word, or a phrase."""
    for match in _IDENTIFIER.finditer(text):
        parts = [p for p in match.group(0).lower().split("_") if p]
        count, unit = _longest_run(parts, 1, len(parts) // 2)
        if count >= t.loop_identifier_repeats:
            return f"{'_'.join(unit)!r} repeated {count} times in a row inside the identifier {_clip(match.group(0))}"
    ws = words(text)
    count, unit = _longest_run(ws, 1, 1)
    if count >= (t.loop_interjection_repeats if unit and unit[0] in _INTERJECTIONS else t.loop_word_repeats):
        return f"the word {unit[0]!r} repeated {count} times in a row"
    count, unit = _longest_run(ws, 2, len(ws) // 2)
    if count >= t.loop_phrase_repeats:
        return f"{_clip(' '.join(unit))} repeated {count} times in a row"
    return None


def _longest_run(tokens: Sequence[str], shortest: int, longest: int) -> tuple[int, tuple[str, ...]]:
    """The most times a unit of `shortest`..`longest` tokens repeats back to back, and that unit.

    A unit must hold a letter: "5 5 5 5" in a seeker's turn is a number written out, not a loop (the
    character rule catches a runaway "1000000000").
    """
    best: tuple[int, tuple[str, ...]] = (1, ())
    n = len(tokens)
    for size in range(shortest, longest + 1):
        for start in range(n - 2 * size + 1):
            unit = list(tokens[start : start + size])
            count = 1
            while list(tokens[start + count * size : start + (count + 1) * size]) == unit:
                count += 1
            if count > best[0] and any(ch.isalpha() for tok in unit for ch in tok):
                best = (count, tuple(unit))
    return best


def _repeated_sentence(text: str, repeats: int) -> Optional[str]:
    """A sentence of 3+ words said `repeats` times anywhere in the text (a loop with other text between)."""
    seen: dict[tuple[str, ...], int] = {}
    for sentence in _SENTENCE_END.split(text):
        key = tuple(words(sentence))
        if len(key) >= 3:
            seen[key] = seen.get(key, 0) + 1
            if seen[key] >= repeats:
                return f"the sentence {_clip(' '.join(key))} said {seen[key]} times"
    return None


@lru_cache(maxsize=16)
def _run_patterns(chars: int, chunks: int, marks: int) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    return (
        re.compile(rf"([^\W_])\1{{{chars - 1},}}"),
        re.compile(rf"(\S{{2,4}}?)\1{{{chunks - 1},}}"),
        re.compile(rf"(?:[^\w\s]|_){{{marks},}}"),
    )


def _character_run(text: str, t: QualityThresholds) -> Optional[str]:
    """A letter or digit, or a chunk holding one, repeated in a row; or a long run of punctuation marks (people
    type "Well........." and "!!!!!!!", so marks get their own, longer threshold)."""
    single, chunk, marks = _run_patterns(t.loop_char_repeats, t.loop_chunk_repeats, t.loop_punctuation_repeats)
    if m := single.search(text):
        return f"{m.group(1)!r} repeated {len(m.group(0))} times in a row"
    for m in chunk.finditer(text):
        if any(ch.isalnum() for ch in m.group(1)):
            return f"{m.group(1)!r} repeated {len(m.group(0)) // len(m.group(1))} times in a row"
    if m := marks.search(text):
        return f"a run of {len(m.group(0))} punctuation marks {_clip(m.group(0))}"
    return None


def _clip(text: str, width: int = 48) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "\u2026")


# --- copies: of an exemplar, of the seeker ------------------------------------------------------


def exemplar_copy(
    text: str, exemplars: Sequence[str], t: QualityThresholds, situations: Sequence[str] = ()
) -> Optional[str]:
    """The text reproduces the retrieved exemplars it was shown (their situations or replies), or tells a retrieved
    case's situation (`situations`) as its own: a run of `exemplar_situation_run` of its words, which a listener
    answering another seeker has no reason to repeat."""
    ws = words(text)
    if not ws or not exemplars:
        return None
    hits = sum(copied(ws, [words(e) for e in exemplars], t.exemplar_ngram))
    if hits >= t.exemplar_copy_min_words and hits / len(ws) >= t.exemplar_copy_share:
        return f"{hits} of its {len(ws)} words are copied from a retrieved exemplar"
    if any(copied(ws, [words(s) for s in situations], t.exemplar_situation_run)):
        return f"{t.exemplar_situation_run}+ words in a row from a retrieved case's situation"
    return None


def echo(reply: str, seeker_last_turn: str, t: QualityThresholds, seeker_turns: Sequence[str] = ()) -> Optional[str]:
    """The reply says back the seeker's last turn instead of answering it: most of its words, or a run of them; or
    it opens in the first person with a run of one of the seeker's turns (`seeker_turns`), the writer speaking as
    the seeker ("I'm excited to think of all ..." to a seeker who said it)."""
    ws, seeker = words(reply), words(seeker_last_turn)
    if not ws or not seeker:
        return None
    if len(ws) < 3:
        return "the reply is the seeker's last turn" if ws == seeker else None
    share = sum(copied(ws, [seeker], _COPY_NGRAM)) / len(ws)
    if share >= t.echo_share:
        return f"{share:.0%} of the reply's words repeat the seeker's last turn"
    if any(copied(ws, [seeker], t.echo_run)):  # the writer speaks as the seeker, in the seeker's sentence
        return f"{t.echo_run}+ words in a row of the seeker's last turn"
    return _first_person_echo(ws, [seeker_last_turn, *seeker_turns], t.echo_first_person_run)


# A listener opens "I ..." about themselves; opening with the seeker's own first-person words is the seeker's line
_FIRST_PERSON = frozenset("i i'm i've i'd i'll my me we we're we've our".split())


def _first_person_echo(ws: Sequence[str], turns: Sequence[str], run: int) -> Optional[str]:
    if len(ws) < run or ws[0] not in _FIRST_PERSON:
        return None
    opening = tuple(ws[:run])
    for turn in turns:
        tw = words(turn)
        if any(tuple(tw[i : i + run]) == opening for i in range(len(tw) - run + 1)):
            return f"opens with {run} of the seeker's own first-person words: {_clip(' '.join(opening))}"
    return None


def repeated_phrase(reply: str, t: QualityThresholds) -> Optional[str]:
    """A reply's loop with other words between: a phrase of `loop_reply_phrase_words` words said
    `loop_reply_phrase_repeats` times anywhere ("I'm glad that you ... I'm glad that you ... I'm glad that you").
    Read on replies only: a seeker's turn or a reasoning may restate a phrase on purpose."""
    ws, n = words(reply), t.loop_reply_phrase_words
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(ws) - n + 1):
        gram = tuple(ws[i : i + n])
        counts[gram] = counts.get(gram, 0) + 1
        if counts[gram] >= t.loop_reply_phrase_repeats:
            return f"the phrase {_clip(' '.join(gram))} said {counts[gram]} times"
    return None


def leaked_reference(reference: Optional[str], turns: Sequence[str]) -> Optional[str]:
    """The dialogue already holds its reference reply as one of its turns (compared as `words`: case, white space
    and punctuation aside), as when a data file's dialogue runs on into the reply it is the prompt for. No ED
    dialogue and no row of ESD-CoT's four files does (ED's rate: `distill.quality.calibration`)."""
    reference_words = words(reference or "")
    if not reference_words:
        return None
    for number, turn in enumerate(turns, start=1):
        if words(turn) == reference_words:
            return f"the reference reply is already turn {number} of the dialogue's {len(turns)}"
    return None


def non_reply(reply: str, t: QualityThresholds) -> Optional[str]:
    """Nothing a seeker could read as a reply: no words (a timestamp, a number, a URL, punctuation), a
    placeholder, an assistant's refusal or AI boilerplate, or a label or field name in its place."""
    lexical = [w for w in words(_URL.sub(" ", reply)) if w.replace("'", "").isalpha()]
    if len(lexical) < t.non_reply_min_words:
        return f"no words: {_clip(reply.strip()) if reply.strip() else 'empty'}"
    if reply.strip().strip(".!?\"'").lower() in _PLACEHOLDERS:
        return f"a placeholder, not a reply: {_clip(reply.strip())}"
    if m := _REFUSAL.search(_folded(reply).lower()):
        return f"a refusal, not a reply: {_clip(m.group(0))}"
    if _is_label(reply):
        return f"a label in place of a reply: {_clip(reply.strip())}"
    return None


def _is_label(reply: str) -> bool:
    """Opens with a field name or label and a colon ("emotion: anger", "Strategy: ER", "response: ..."), or is
    a role's labels alone ("anger", "Emotional Reaction"). A bare question ("Upset?") asks the seeker: a
    listener's."""
    if (m := _TAG_PREFIX.match(_folded(reply))) and set(words(m.group(1))) <= _TAG_WORDS:
        return True
    ws = set(words(reply)) - _LABEL_GLUE
    return bool(ws) and ws <= _OUTPUT_TAG_WORDS and not reply.rstrip().endswith("?")


def parroted_rationale(reasoning: str, instructions: str, seeker: Sequence[str], t: QualityThresholds) -> Optional[str]:
    """A reasoning that copies the seeker's turns, or says nothing beyond the label and the prompt's own wording.

    `instructions` is what the role was told (its prompt without the dialogue), so "Judge from the context,
    the seeker's true emotion is X" counts as the prompt's words plus a label: no cue of its own. An empty
    reasoning passes: a student answers with the decision alone.
    """
    ws = words(reasoning)
    if not ws:
        return None
    share = sum(copied(ws, [words(turn) for turn in seeker], _COPY_NGRAM)) / len(ws)
    if len(ws) >= t.rationale_copy_min_words and share >= t.rationale_copy_share:
        return f"copies the seeker: {share:.0%} of its words are the seeker's own"
    from_prompt = copied(ws, [words(instructions)], _PROMPT_NGRAM)
    own = [
        w
        for w, prompt in zip(ws, from_prompt)
        if not prompt and w not in FUNCTION_WORDS and w not in _STOCK_WORDS and w not in LABEL_WORDS
    ]
    if len(own) < t.rationale_min_own_words:
        return f"only restates the label or the prompt ({len(own)} word(s) of its own)"
    return None
