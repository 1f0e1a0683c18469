"""The label sets: the 32 → 6 emotion mapping is total and every Ekman class is reachable."""

from __future__ import annotations

import pytest

from data_prep import taxonomy

# The 32 EmpatheticDialogues labels as the dataset spells them (Rashkin et al., 2019), written out
# here rather than read from the taxonomy so a label dropped from the mapping is caught.
ED_32 = """afraid angry annoyed anticipating anxious apprehensive ashamed caring confident content devastated
disappointed disgusted embarrassed excited faithful furious grateful guilty hopeful impressed jealous joyful
lonely nostalgic prepared proud sad sentimental surprised terrified trusting""".split()


def test_all_32_ed_labels_map_to_an_ekman_class():
    assert len(ED_32) == 32
    assert set(taxonomy.ED_TO_EKMAN) == set(ED_32)
    assert taxonomy.ED_EMOTIONS == tuple(sorted(ED_32))
    for label in ED_32:
        assert taxonomy.to_ekman(label) in taxonomy.EKMAN
    assert taxonomy.to_ekman("prepared") == "happiness"


def test_every_ekman_class_is_hit():
    assert set(taxonomy.ED_TO_EKMAN.values()) == set(taxonomy.EKMAN)
    assert taxonomy.EKMAN == (
        "anger",
        "fear",
        "disgust",
        "happiness",
        "sadness",
        "surprise",
    )  # TRACE's emotion_id order
    assert set(taxonomy.EKMAN_DEFINITIONS) == set(taxonomy.EKMAN)


def test_to_ekman_accepts_ekman_names_and_any_case():
    assert taxonomy.to_ekman("Sadness") == "sadness"
    assert taxonomy.to_ekman("  FURIOUS ") == "anger"
    assert taxonomy.to_ekman("disgusted") == "disgust"


@pytest.mark.parametrize("label", ["", "happy", "angry!", "neutral"])
def test_to_ekman_rejects_unknown_labels(label):
    with pytest.raises(ValueError, match="unknown emotion label"):
        taxonomy.to_ekman(label)


def test_other_label_sets_are_consistent():
    assert set(taxonomy.CAUSE_DEFINITIONS) == set(taxonomy.CAUSE_CATEGORIES)
    assert set(taxonomy.STRATEGY_DEFINITIONS) == set(taxonomy.STRATEGIES)
    assert set(taxonomy.PHASE_DEFINITIONS) == set(taxonomy.PHASES)
    for values in taxonomy.PLAN_DIMENSIONS.values():
        assert len(values) == len(set(values)) > 1
