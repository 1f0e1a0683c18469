"""Per-role LoRA adapters over one base model, switched in for a stage: the `local` backend's adapters.

Adapters live in one `PeftModel` over the single base model. For a stage the active adapter is
merged into the base weights (unmerged LoRA generation runs about 2x slower on CPU). When the merged
weights of every adapter fit in `cache_merged_mb`, each adapter's merged weights are computed once,
on load, and a stage swaps them in and out by reference (`_swap`); otherwise a stage merges, then
restores the base exactly (`_merge`).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Optional

import torch

from distill.adapters.adapters import PEFT_CONFIG_FILE, find_adapters, has_metadata, read_metadata


def adapter_dirs(adapters: str | dict[str, str] | None) -> dict[str, str]:
    """An adapters folder as train writes it (`distill.adapters.adapters.find_adapters`), or a role -> path dict."""
    if adapters is None:
        return {}
    if isinstance(adapters, dict):
        return {name: str(path) for name, path in adapters.items()}
    return {role: str(path) for role, path in find_adapters(adapters).items()}


def _check_adapter_version(name: str, path: Path) -> None:
    """Warn when an adapter trained by `python -m train` learned another student answer format."""
    from distill.roles.roles import STUDENT_PROMPT_VERSION

    if not has_metadata(path):
        return  # an adapter from elsewhere: nothing recorded to check
    trained = read_metadata(path).get("prompt_version")
    if trained != STUDENT_PROMPT_VERSION:
        warnings.warn(
            f"adapter '{name}' ({path}) was trained on student prompt version {trained}, this version "
            f"expects {STUDENT_PROMPT_VERSION}: rebuild its dataset and retrain it",
            stacklevel=3,
        )


class AdapterSwitch:
    """The model generation runs on (`model`: the base, a `PeftModel` once an adapter is loaded) and which
    adapter is in effect. `switch_seconds`/`switches` count the time spent switching; the pipeline
    benchmark reports it as a share of pipeline time. `prepare_seconds`: merged weights built on load."""

    def __init__(self, model: torch.nn.Module, merge: bool = True, cache_merged_mb: int = 2048):
        self.model = model
        # Merging rewrites shared weights, so two threads (e.g. serve) must never generate at once.
        self.lock = threading.RLock()
        self.merge = merge
        # Merged weights kept per adapter (layer, merged weight) while they fit in cache_merged_mb;
        # the base's own weight tensors are kept by reference to swap back.
        self.cache_merged_mb = cache_merged_mb
        self._merged_cache: dict[str, list[tuple[torch.nn.Module, torch.Tensor]]] = {}
        self._pristine: dict[torch.nn.Module, torch.Tensor] = {}
        self.paths: dict[str, str] = {}
        self.prepare_seconds = 0.0
        self.switch_seconds = 0.0
        self.switches = 0

    @property
    def cached(self) -> list[str]:
        """Adapters whose merged weights are held (the rest merge per stage)."""
        return sorted(self._merged_cache)

    def check_loaded(self, adapter: str) -> None:
        if adapter not in self.paths:
            raise ValueError(f"no adapter loaded for role '{adapter}' (loaded: {', '.join(self.paths) or 'none'})")

    def load(self, name: str, path: str) -> None:
        """Add a LoRA adapter under `name`; the first one wraps the base model in a `PeftModel`."""
        from peft import PeftModel

        if not (Path(path) / PEFT_CONFIG_FILE).is_file():
            raise ValueError(f"adapter '{name}': {path} has no {PEFT_CONFIG_FILE}")
        _check_adapter_version(name, Path(path))
        with self.lock:
            if isinstance(self.model, PeftModel):
                self.model.load_adapter(path, adapter_name=name)
            else:
                self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name)
            self.model.eval()
            self.paths[name] = str(path)
            if self.merge:
                self._cache_merged(name)

    def _cache_merged(self, adapter: str) -> None:
        """Compute `adapter`'s merged weights once, if plain LoRA on plain Linear layers and within budget."""
        started = time.perf_counter()
        layers = [m for m in self.model.modules() if adapter in getattr(m, "lora_A", {})]
        plain = all(
            type(m.get_base_layer()) is torch.nn.Linear
            and not getattr(m, "lora_bias", {}).get(adapter)
            and adapter not in getattr(m, "lora_variant", {})
            for m in layers
        )
        embedding = any(adapter in getattr(m, "lora_embedding_A", {}) for m in self.model.modules())
        size_mb = (
            sum(m.get_base_layer().weight.numel() * m.get_base_layer().weight.element_size() for m in layers) / 2**20
        )
        used_mb = sum(w.numel() * w.element_size() for pairs in self._merged_cache.values() for _, w in pairs) / 2**20
        if not layers or not plain or embedding or used_mb + size_mb > self.cache_merged_mb:
            return  # this adapter merges per stage instead
        with torch.no_grad():
            pairs = []
            for m in layers:
                base = m.get_base_layer()
                self._pristine.setdefault(base, base.weight.data)
                # clone + in-place add rounds exactly as PEFT's merge does (the delta may be fp32 over a bf16 base)
                pairs.append((base, self._pristine[base].clone().add_(m.get_delta_weight(adapter))))
        self._merged_cache[adapter] = pairs
        self.prepare_seconds += time.perf_counter() - started

    @contextmanager
    def activate(self, adapter: Optional[str]) -> Iterator[None]:
        """Run the block with `adapter` in effect (merged when `merge_adapters`), or the bare base for None."""
        with self.lock:
            if adapter is None:
                ctx = self.model.disable_adapter() if self.paths else nullcontext()
                with ctx:
                    yield
                return
            self.check_loaded(adapter)
            cached = adapter in self._merged_cache
            # With cached merged weights the LoRA path is off: the swapped-in weights carry the adapter.
            with self.model.disable_adapter() if cached else nullcontext():
                with self._switching():
                    self.switches += 1
                    if cached:
                        restore = self._swap(adapter)
                    else:
                        self.model.set_adapter(adapter)
                        restore = self._merge(adapter) if self.merge else None
                try:
                    yield
                finally:
                    if restore is not None:
                        with self._switching():
                            restore()

    @contextmanager
    def _switching(self) -> Iterator[None]:
        """Add the block's wall time to `switch_seconds`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.switch_seconds += time.perf_counter() - started

    def _swap(self, adapter: str) -> Callable[[], None]:
        """Point each targeted layer at `adapter`'s cached merged weight; returns the swap back."""
        pairs = self._merged_cache[adapter]
        for base, merged in pairs:
            base.weight.data = merged

        def restore() -> None:
            for base, _ in pairs:
                base.weight.data = self._pristine[base]

        return restore

    def _merge(self, adapter: str) -> Callable[[], None]:
        """Merge `adapter` into the base; returns the function that puts the base back exactly."""
        # PEFT's unmerge subtracts the delta it added; in bf16 (W + d) - d != W, so each stage would
        # nudge the shared base and the drift would build up over many stages. We snapshot the base
        # tensors the adapter touches and copy them back after unmerging: exact, and the extra
        # memory (the targeted weights once) is held only while the stage runs.
        layers = [
            m
            for m in self.model.modules()
            if adapter in getattr(m, "lora_A", {}) or adapter in getattr(m, "lora_embedding_A", {})
        ]
        pristine = [[p.detach().clone() for p in layer.get_base_layer().parameters()] for layer in layers]
        self.model.base_model.merge_adapter([adapter])

        def restore() -> None:
            self.model.base_model.unmerge_adapter()
            with torch.no_grad():
                for layer, saved in zip(layers, pristine):
                    for param, original in zip(layer.get_base_layer().parameters(), saved):
                        param.copy_(original)

        return restore

    # --- prompts -------------------------------------------------------------------------------
