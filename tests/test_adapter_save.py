"""The save check: a file that does not hold the trained LoRA weights fails the run, a faithful one passes."""

from __future__ import annotations

import pytest
import torch

from train.adapter_save import AdapterSaveError, check_fingerprint, file_fingerprint, lora_fingerprint


def tiny_peft_model():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2
    )
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules="all-linear"))
    for name, param in model.named_parameters():
        if "lora_B" in name:  # as after training: B starts at zero
            torch.nn.init.normal_(param)
    return model


def test_a_faithful_save_matches_the_weights_in_memory(tmp_path):
    model = tiny_peft_model()
    expected = lora_fingerprint(model)
    model.save_pretrained(tmp_path)
    assert expected["lora_tensors"] == 2 * 7 * 2  # A and B for 7 linear layers in 2 blocks
    assert file_fingerprint(tmp_path)["lora_tensors"] == expected["lora_tensors"]
    check_fingerprint(tmp_path, expected)


def test_a_save_of_the_initial_weights_fails(tmp_path):
    model = tiny_peft_model()
    trained = lora_fingerprint(model)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data.zero_()  # what a save from a rank that never trained would hold
    model.save_pretrained(tmp_path)
    with pytest.raises(AdapterSaveError, match="does not hold the trained weights"):
        check_fingerprint(tmp_path, trained)


def test_a_partial_or_missing_file_fails(tmp_path):
    from safetensors.torch import load_file, save_file

    model = tiny_peft_model()
    trained = lora_fingerprint(model)
    model.save_pretrained(tmp_path)
    weights = tmp_path / "adapter_model.safetensors"
    half = dict(list(load_file(str(weights)).items())[:10])  # a shard: some tensors only
    save_file(half, str(weights))
    with pytest.raises(AdapterSaveError, match="10 LoRA tensors"):
        check_fingerprint(tmp_path, trained)
    weights.unlink()
    with pytest.raises(AdapterSaveError, match="no adapter_model.safetensors"):
        check_fingerprint(tmp_path, trained)


@pytest.mark.slow
def test_fsdp2_full_state_dict_save_holds_the_trained_weights_on_cpu(tmp_path):
    """Two ranks shard the model with FSDP2 over gloo; the gathered save passes, rank 0's shard is refused."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run = subprocess.run(
        [*cmd, str(repo / "tests" / "fsdp2_save_worker.py"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "fsdp2.json").read_text())
    assert record["dtensors"] == record["fingerprint"]["lora_tensors"] == 28  # every LoRA weight was sharded
    assert record["sharded_save"] == "refused: the shard is not the trained weights"
    check_fingerprint(tmp_path, record["fingerprint"])
