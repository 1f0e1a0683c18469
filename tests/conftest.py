"""Shared fixtures. Models are loaded once per session: the embedded model is real, never mocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from data_prep.dialogues import Dialogue, Turn

# Tests must never reach the hub. Set before any test module imports huggingface_hub, which reads
# these once at import time.
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
# Under pytest-xdist (pyproject's `-n 2`) each worker, and every process a test starts, gets one thread:
# two workers of two torch threads each on a 2-core machine slow each other down far more than twice.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_ED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ed_ekman_dev.csv"

_TINY = [
    (
        "sadness",
        "sad",
        "My grandmother's old piano was sold today.",
        ["They sold grandma's piano this morning and I cried the whole drive home."],
    ),
    (
        "happiness",
        "proud",
        "My son learned to ride a bike.",
        [
            "My six year old rode his bike without training wheels today!",
            "Thanks! He kept falling but never gave up.",
            "He wants to ride to school tomorrow.",
        ],
    ),
    (
        "anger",
        "furious",
        "Someone keyed my new car.",
        ["I walked out of the store and found a long scratch down the side of my new car."],
    ),
    (
        "fear",
        "anxious",
        "I have a job interview tomorrow.",
        ["Tomorrow is my first interview in ten years and I can't stop shaking."],
    ),
    (
        "surprise",
        "surprised",
        "My friends threw me a party.",
        ["I opened the door and thirty people yelled happy birthday at me."],
    ),
    (
        "disgust",
        "disgusted",
        "I found mold in my lunch.",
        ["I bit into my sandwich and saw green fuzz all over the bread."],
    ),
    (
        "happiness",
        "grateful",
        "A neighbour shovelled my driveway.",
        ["My neighbour cleared all the snow from my driveway before I woke up."],
    ),
    (
        "sadness",
        "lonely",
        "I moved to a new city alone.",
        ["I moved here two months ago and still eat dinner alone every night."],
    ),
]


def make_dialogue(i: int, emotion: str, fine: str, situation: str, seeker_turns: list[str]) -> Dialogue:
    turns = []
    for j, text in enumerate(seeker_turns):
        if j:
            turns.append(Turn(speaker="responder", text="Oh really? Tell me more."))
        turns.append(Turn(speaker="seeker", text=text))
    return Dialogue(
        id=f"tiny{i}#1",
        conv_id=f"tiny{i}",
        turns=turns,
        situation=situation,
        emotion=emotion,
        emotion_fine=fine,
        gold_response="That sounds like a lot to take in.",
    )


@pytest.fixture(scope="session")
def tiny_dialogues() -> list[Dialogue]:
    """Eight short dialogues written for the tests, one or more per Ekman emotion."""
    return [make_dialogue(i, *row) for i, row in enumerate(_TINY)]


@pytest.fixture(scope="session")
def smollm_path() -> str:
    """Local directory of the embedded SmolLM2-135M-Instruct (converted once from the GGUF)."""
    from data_prep.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm_path) -> str:
    """A random 2-layer llama saved with the real tokenizer, so the backends and training load it like any model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg = AutoConfig.from_pretrained(smollm_path)
    cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 2, 64, 128
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 4, 2, 16
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(smollm_path).save_pretrained(out)
    return str(out)


def require_shared_data(path: Path) -> Path:
    """`path`, a file of ../shared/data; when it is missing the test skips saying where it looked, except under
    CI (`CI=true` in the environment), where it fails: CI must run the real-data tests, never skip them."""
    if path.is_file():
        return path
    why = f"real data not present at {path}"
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{why} (CI={os.environ['CI']}: the real-data tests must run)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def shared_ed_csv() -> Path:
    return require_shared_data(SHARED_ED)
