"""The base's weights load in the dtype the config means, and padding-free training names an attention that runs it.

A GPU cannot be had here, so what a GPU run resolves is checked on the config (its device said to be cuda); what
loads and trains is checked on a CPU with a tiny random model, whose weights are asked for in bf16.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from train.config import ConfigError
from train.config_load import config_from_dict, parse_config
from train.precision import base_dtype, check_attention

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _config(device: str = "cpu", **values):
    cfg = config_from_dict({"roles": "asi", "use_cpu": True, **values}, source="test.yaml")
    cfg.device = lambda: device  # what `use_cpu: false` on a machine with a GPU resolves to
    return cfg


@pytest.mark.parametrize(
    "device, bf16, dtype, expected",
    [
        ("cuda", True, None, torch.bfloat16),  # a GPU's bf16 run: bf16 weights, not float32 under autocast
        ("cuda", False, None, torch.float32),
        ("cuda", True, "float32", torch.float32),  # asked otherwise: float32 weights under autocast
        ("cpu", True, None, torch.float32),  # a CPU's bf16 is autocast over float32 weights, as before
        ("cpu", False, "bfloat16", torch.bfloat16),
        ("cpu", False, "auto", "auto"),  # TRL's auto: the checkpoint's own dtype
    ],
)
def test_the_weights_dtype_follows_bf16_on_a_gpu_unless_the_config_names_one(device, bf16, dtype, expected):
    assert base_dtype(_config(device, bf16=bf16, dtype=dtype)) == expected


def test_the_gpu_config_trains_bf16_weights_with_a_padding_free_attention():
    cfg = parse_config(["--config", str(CONFIGS / "train" / "qwen0.5b-gpu.yaml"), "--use_cpu", "true"])
    cfg.device = lambda: "cuda"
    assert cfg.sft.bf16 and cfg.sft.padding_free and base_dtype(cfg) == torch.bfloat16
    assert cfg.model.attn_implementation == "flash_attention_2"


def test_a_dtype_that_is_not_trls_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dtype: bf16\n")
    with pytest.raises(ConfigError, match=r"^.*bad\.yaml.*: field 'dtype': expected auto, bfloat16.*got 'bf16'$"):
        parse_config(["--config", str(bad)])


def test_a_flash_attention_that_cannot_run_is_refused_before_the_model_loads():
    with pytest.raises(ConfigError, match=r"^test.yaml: field 'attn_implementation': flash_attention_2 needs a CUDA"):
        check_attention(_config("cpu", attn_implementation="flash_attention_2"), warn=print)
    from transformers.utils import is_flash_attn_2_available

    if is_flash_attn_2_available():
        pytest.skip("flash-attn is installed here")
    with pytest.raises(ConfigError, match=r"flash_attention_2 is not installed here \(pip install flash-attn"):
        check_attention(_config("cuda", attn_implementation="flash_attention_2"), warn=print)


@pytest.mark.parametrize(
    "device, values, warned",
    [
        ("cuda", {}, True),  # transformers' default, sdpa: the whole flattened batch
        ("cuda", {"attn_implementation": "eager"}, True),
        ("cuda", {"padding_free": False}, False),
        ("cuda", {"padding_free": False, "packing": True}, True),  # BFD packing is padding-free in TRL
        ("cpu", {}, False),  # distill's CPU attention attends by example
        ("cpu", {"attn_implementation": "sdpa"}, True),  # named: transformers' own, over the whole row
        ("cpu", {"attn_implementation": "eager"}, True),
    ],
)
def test_padding_free_on_an_attention_across_the_batch_warns_in_one_line(device, values, warned):
    lines: list[str] = []
    check_attention(_config(device, **values), warn=lines.append)
    assert len(lines) == int(warned)
    if warned:
        assert "\n" not in lines[0] and "test.yaml: padding_free on" in lines[0] and "flash_attention_2" in lines[0]


@pytest.mark.slow
def test_bf16_weights_load_and_train_with_float32_lora(tmp_path, tiny_model_dir, tiny_dialogues):
    """`dtype: bfloat16` on a CPU: the loaded base's parameters are bf16, the LoRA's float32, and one step trains."""
    from peft import PeftModel
    from test_train import build_role_datasets
    from transformers import AutoModelForCausalLM

    from train.sft import load_base, train_roles, with_new_lora

    values = dict(
        model_name_or_path=tiny_model_dir, dataset_name=str(build_role_datasets(tmp_path / "data", tiny_dialogues)),
        output_dir=str(tmp_path / "out"), roles="asi", max_steps=2, per_device_train_batch_size=4, use_cpu=True,
        bf16=True, dtype="bfloat16", num_threads=1, card_example=False, report_to="none",
    )  # fmt: skip
    cfg = config_from_dict(values, source="test")
    base, _, _ = load_base(cfg)
    assert {p.dtype for p in base.parameters()} == {torch.bfloat16}
    dtypes = {("lora_" in n, p.dtype) for n, p in with_new_lora(base, cfg).named_parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.float32)}  # PEFT keeps the trained weights in float32
    del base
    (meta,) = train_roles(cfg)
    assert meta["base_dtype"] == "bfloat16" and meta["global_step"] == 2
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    lora = {n: p for n, p in PeftModel.from_pretrained(plain, str(tmp_path / "out" / "asi")).named_parameters()}
    b_weights = [p for n, p in lora.items() if "lora_B" in n]
    assert b_weights and any(p.abs().sum() > 0 for p in b_weights)  # trained
