"""The adapter card has one writer, and what it says comes from the adapter's metadata: train's hub id
and the quickstart's eval figures both survive a later rewrite by the other."""

from __future__ import annotations

from distill.adapters.adapters import read_metadata, write_metadata
from train.adapter_card import write_adapter_card

META = {
    "role": "asi",
    "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "tokens_seen": 1200,
    "lora": {"r": 8},
    "train_config": {"max_tokens_budget": 6000},
}


def test_hub_id_and_figures_survive_each_others_rewrite(tmp_path):
    write_metadata(tmp_path, dict(META))
    write_adapter_card(tmp_path, "me/td")  # train, with --hub_model_id
    assert "me/td-asi" in (tmp_path / "README.md").read_text()
    write_adapter_card(tmp_path, figures={"test dialogues": "16"})  # the quickstart, after its eval
    card = (tmp_path / "README.md").read_text()
    assert "me/td-asi" in card and "| test dialogues | 16 |" in card
    write_adapter_card(tmp_path)  # a plain rewrite keeps both
    assert (tmp_path / "README.md").read_text() == card
    assert read_metadata(tmp_path)["card_figures"] == {"test dialogues": "16"}
