"""The numbers behind the trace quality checks (`QualityThresholds`), and the one reader of a thresholds file.

Every default was set against human text: the 1,263 gold replies, seeker turns and situations of the shared
ED file (docs/quality.md has the measured false-positive rates and the command), so a check that fires is
something no person in that data wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from distill.pipeline.reflection import TRIGGER_MIN_MATCH


class QualityThresholds(BaseModel):
    """Each check's thresholds; pass a changed copy (`model_copy(update=...)`) or a YAML file to the CLI."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # loop: in ED's human text a word repeats at most 3 times in a row ("yeah yeah yeah") and a longer unit
    # at most twice, no letter or digit runs past 6 and no run of punctuation past 10 ("!?!?!??!?!"); people
    # also write "No no no no" and "Well.........", so interjections and punctuation get longer runs
    loop_word_repeats: int = Field(4, ge=2, description="loop: one word repeated this many times in a row")
    loop_interjection_repeats: int = Field(
        6, ge=2, description="loop: an interjection ('no', 'yeah', 'ha') repeated this many times in a row"
    )
    loop_phrase_repeats: int = Field(3, ge=2, description="loop: a unit of 2+ words repeated this many times in a row")
    loop_identifier_repeats: int = Field(
        2, ge=2, description="loop: a unit repeated this many times in a row inside one snake_case identifier"
    )
    loop_char_repeats: int = Field(9, ge=3, description="loop: one letter or digit repeated this many times in a row")
    loop_chunk_repeats: int = Field(
        6, ge=3, description="loop: a 2-4 character chunk holding a letter or digit repeated this many times"
    )
    loop_punctuation_repeats: int = Field(
        12, ge=3, description="loop: a run of punctuation marks this long ('!!!!', '....', '?!?!')"
    )
    loop_reply_phrase_words: int = Field(
        3, ge=2, description="loop (replies only): words in a phrase said over and over"
    )
    loop_reply_phrase_repeats: int = Field(
        3, ge=2, description="loop (replies only): times the phrase is said anywhere in the reply"
    )
    loop_compression_ratio: float = Field(
        2.2, gt=1, description="loop: raw bytes over zlib bytes at or above this (ED's human text peaks at 1.8)"
    )
    loop_compression_min_chars: int = Field(
        60, ge=1, description="loop: the compression rule only for texts at least this long (short ones never compress)"
    )
    # exemplar_copy
    exemplar_ngram: int = Field(4, ge=2, description="exemplar_copy: word n-gram size of the overlap")
    exemplar_copy_share: float = Field(
        0.5, gt=0, le=1, description="exemplar_copy: share of the text's words inside n-grams an exemplar also has"
    )
    exemplar_copy_min_words: int = Field(
        8, ge=1, description="exemplar_copy: and at least this many copied words (short stock phrases are shared)"
    )
    exemplar_situation_run: int = Field(
        6, ge=3, description="exemplar_copy: words in a row from a retrieved case's situation (another seeker's story)"
    )
    # ungrounded_trigger
    trigger_min_match: float = Field(
        TRIGGER_MIN_MATCH,
        gt=0,
        le=1,
        description="ungrounded_trigger: share of a trigger's words that must sit in word pairs of the seeker's turns",
    )
    # parroted_rationale
    rationale_min_own_words: int = Field(
        1,
        ge=1,
        description="parroted_rationale: content words a reasoning needs beyond the label, stock words and "
        "the prompt's instructions",
    )
    rationale_copy_share: float = Field(
        0.8, gt=0, le=1, description="parroted_rationale: share of a reasoning's words copied from the seeker's turns"
    )
    rationale_copy_min_words: int = Field(
        5, ge=1, description="parroted_rationale: the copy rule only for reasonings of at least this many words"
    )
    # echo / non_reply
    echo_share: float = Field(
        0.8, gt=0, le=1, description="echo: share of the reply's words in word trigrams of the seeker's last turn"
    )
    echo_run: int = Field(
        8, ge=3, description="echo: or this many words in a row of the seeker's last turn (ED's replies: at most 5)"
    )
    echo_first_person_run: int = Field(
        5, ge=3, description="echo: or a first-person reply opening with this many words in a row of a seeker turn"
    )
    non_reply_min_words: int = Field(1, ge=1, description="non_reply: words (letters only) a reply needs")
    # near_duplicate
    # one changed word costs up to three trigrams: a 12-word reply with one word changed has Jaccard 0.54
    near_duplicate_jaccard: float = Field(
        0.5, gt=0, le=1, description="near_duplicate: word-trigram Jaccard at which two replies count as the same"
    )
    near_duplicate_min_dialogues: int = Field(
        5, ge=2, description="near_duplicate: a reply the same as replies to this many different dialogues"
    )

    # prompt_echo: the role's instructions, in ED's and ESD-CoT's human replies at most a 4-gram now and then
    prompt_echo_ngram: int = Field(4, ge=2, description="prompt_echo: word n-gram size of the overlap with the prompt")
    prompt_echo_share: float = Field(
        0.5, gt=0, le=1, description="prompt_echo: share of the reply's words inside n-grams of its instructions"
    )
    prompt_echo_min_words: int = Field(4, ge=1, description="prompt_echo: and at least this many such words")
    # off_dialogue (distill.quality.relevance)
    off_dialogue_own: float = Field(
        0.1, gt=-1, le=1, description="off_dialogue: a reply's relevance to its own seeker under this (MiniLM cosine)"
    )
    off_dialogue_other: float = Field(
        0.5, gt=-1, le=1, description="off_dialogue: while its relevance to another dialogue's seeker is this or more"
    )
    off_dialogue_shuffles: int = Field(20, ge=2, description="off_dialogue: other dialogues each reply is read against")
    off_dialogue_min_dialogues: int = Field(
        10, ge=3, description="off_dialogue: conversations a run needs before its replies are read"
    )

    @classmethod
    def from_file(cls, path: Optional[Union[str, Path]]) -> QualityThresholds:
        """Defaults, overridden by a YAML (or JSON) mapping of field names; ValueError naming the file and field."""
        if path is None:
            return cls()
        from data_prep.config_file import load_config

        return load_config(path, cls)
