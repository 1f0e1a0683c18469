"""The `local` backend: one transformers model in this process, with optional per-role LoRA adapters.

Used both as a teacher (a base model prompted with the full instructions) and as the student (the
same base model with each role's adapter switched in for its stage). Requests are grouped by
(adapter, schema, temperature, max_new_tokens, top_p, min_p, typical_p) (`decode_groups`) and sorted by prompt
length. Each group then runs through continuous batching over `batch_size` slots
(`distill.backends.continuous`: a finished row is refilled at once) or, where the architecture does not
allow it or `continuous=False`, through left-padded `model.generate` chunks. Results come back in the
caller's order.

How adapters are switched in for a stage (merged, with merged weights cached while they fit in
`cache_merged_mb`) is `distill.backends.adapter_switch`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Annotated, Any, Literal, Optional

import torch
from pydantic import Field, validate_call
from tqdm import tqdm

from data_prep.models import resolve_dtype, resolve_model
from distill.adapters.adapters import adapter_fingerprint
from distill.backends.adapter_switch import AdapterSwitch, adapter_dirs
from distill.backends.attention import use_cpu_attention
from distill.backends.base import TRUNCATED_EVENT, GenerationRequest, GenerationResult, ProgressFn
from distill.backends.constrained import SchemaGrammars
from distill.backends.continuous import decode as continuous_decode
from distill.backends.continuous import supports as continuous_supports
from distill.backends.loop_watch import LoopWatch

# Re-tokenising a string cut at a token boundary can merge a few tokens differently; this slack
# keeps the first truncation attempt under the limit.
_TRUNCATION_SLACK = 8


class LocalBackend:
    """In-process transformers generation; `hf_model` and `tokenizer` are shared with eval and serve."""

    name = "local"
    typical_sampling = True  # the pipeline refuses typical_p for a backend without it
    ranks_labels = True  # and label_decoding (requests with a `LabelRanking`: distill.backends.label_rank)

    @validate_call  # a YAML value of the wrong type is named here, before any model loads
    def __init__(
        self,
        model: Annotated[str, Field(description="a model alias (smollm2-135m), a local model folder or a hub id")] = (
            "smollm2-135m"
        ),
        adapters: Annotated[
            str | dict[str, str] | None,
            Field(description="a folder of <role>/ LoRA adapters (train's output_dir), or {role: folder}; none = base"),
        ] = None,
        dtype: Annotated[
            str,
            Field(description="auto (bf16 where the CPU or GPU runs it natively, else float32), float32 or bfloat16"),
        ] = "auto",
        batch_size: Annotated[int, Field(description="prompts decoded together")] = 16,
        max_input_tokens: Annotated[int, Field(description="a longer prompt is cut to this many tokens")] = 2048,
        merge_adapters: Annotated[
            bool, Field(description="merge a stage's adapter into the base while it runs (unmerged LoRA: ~2x slower)")
        ] = True,
        device: Annotated[str, Field(description="cpu, cuda or cuda:N: where the model runs")] = "cpu",
        cache_merged_mb: Annotated[
            int, Field(description="memory for adapters' merged weights, built once and swapped per stage")
        ] = 2048,
        continuous: Annotated[
            bool, Field(description="continuous batching where the architecture allows it, else model.generate")
        ] = True,
        quantize: Annotated[
            Optional[Literal["int8"]], Field(description="int8: dynamic int8 linear layers (bare base, float32, CPU)")
        ] = None,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1 or max_input_tokens < 16:
            raise ValueError(
                f"batch_size must be >= 1 and max_input_tokens >= 16 (got {batch_size}, {max_input_tokens})"
            )
        adapter_paths = adapter_dirs(adapters)  # a missing adapters folder is reported before the model loads
        if quantize and (adapter_paths or device != "cpu"):
            raise ValueError("quantize: int8 runs the bare base model on a CPU (no adapters, device: cpu)")
        self.model = model
        self.model_path = resolve_model(model)
        self.device = device
        self.torch_dtype = resolve_dtype(dtype, device)
        if quantize and self.torch_dtype != torch.float32:  # checked before the weights load
            raise ValueError(f"quantize: int8 needs dtype float32 (dtype {dtype!r} is {self.torch_dtype} here)")
        self.batch_size = batch_size
        self.max_input_tokens = max_input_tokens
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer.padding_side = "left"
        base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=self.torch_dtype).to(device).eval()
        self.quantize = quantize
        if quantize:
            base = quantize_linear_int8(base)
        # One-token decode steps use two matmuls instead of CPU sdpa (distill.backends.attention).
        self.cpu_attention = use_cpu_attention(base)
        self._adapters = AdapterSwitch(base, merge_adapters, cache_merged_mb)
        self._eos_ids = self._stop_token_ids()
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self._eos_ids[0]
        self._grammars = SchemaGrammars(self.tokenizer, base.config.vocab_size, self._eos_ids)
        # Continuous batching (distill.backends.continuous) where the architecture allows it, else
        # lockstep chunks through `model.generate`.
        self.continuous = continuous and continuous_supports(base.config)
        self._fingerprints: dict[str, dict[str, Optional[str]]] = {}
        for role, path in adapter_paths.items():
            self.load_adapter(role, path)

    # --- adapters (distill.backends.adapter_switch) ------------------------------------------------

    @property
    def hf_model(self) -> torch.nn.Module:
        return self._adapters.model

    @property
    def merge_adapters(self) -> bool:
        return self._adapters.merge

    @property
    def adapter_names(self) -> list[str]:
        return list(self._adapters.paths)

    @property
    def switch_seconds(self) -> float:
        return self._adapters.switch_seconds

    @property
    def switches(self) -> int:
        return self._adapters.switches

    @property
    def prepare_seconds(self) -> float:
        return self._adapters.prepare_seconds

    def load_adapter(self, name: str, path: str) -> None:
        """Add a LoRA adapter under `name`; the first one wraps the base model in a `PeftModel`."""
        self._adapters.load(name, path)
        # recorded with the path (`describe`), so a stored run tells a retrained adapter from the one it ran
        self._fingerprints[name] = adapter_fingerprint(path)

    def activate(self, adapter: Optional[str]) -> AbstractContextManager[None]:
        """The block runs with `adapter` in effect (merged when `merge_adapters`), or the bare base for None."""
        return self._adapters.activate(adapter)

    # --- prompts -------------------------------------------------------------------------------

    def _render_ids(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # The chat template already writes the special tokens it wants.
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode(self, messages: list[dict[str, str]]) -> tuple[list[int], list[str]]:
        """Prompt ids, cut to `max_input_tokens` from the left of the longest message if needed."""
        ids = self._render_ids(messages)
        if len(ids) <= self.max_input_tokens:
            return ids, []
        original = len(ids)
        messages = [dict(m) for m in messages]
        # The oldest part of the longest message goes first: the dialogue's latest turns, the
        # instructions and the generation prompt all sit elsewhere or at its end.
        longest = max(range(len(messages)), key=lambda i: len(messages[i].get("content", "")))
        content_ids = self.tokenizer(messages[longest]["content"], add_special_tokens=False)["input_ids"]
        keep = max(0, len(content_ids) - (original - self.max_input_tokens) - _TRUNCATION_SLACK)
        messages[longest]["content"] = ("..." + self.tokenizer.decode(content_ids[-keep:])) if keep else ""
        ids = self._render_ids(messages)
        if len(ids) > self.max_input_tokens:  # the other messages alone exceed the limit
            ids = ids[-self.max_input_tokens :]
        note = f"{TRUNCATED_EVENT} from {original} to {len(ids)} tokens (max_input_tokens={self.max_input_tokens})"
        return ids, [note]

    # --- generation ----------------------------------------------------------------------------

    @cached_property
    def label_ranker(self) -> Any:
        from distill.backends.label_rank import LabelRanker

        return LabelRanker(self)  # built once: it caches content-free scores

    def generate(
        self, requests: Sequence[GenerationRequest], progress: Optional[ProgressFn] = None
    ) -> list[GenerationResult]:
        if any(req.label_ranking is not None for req in requests):
            return self.label_ranker.generate(requests, progress)  # it generates the rest through here
        for req in requests:
            if req.adapter is not None:
                self._adapters.check_loaded(req.adapter)
        encoded = [self.encode(req.messages) for req in requests]
        groups = decode_groups(requests)
        results: list[Optional[GenerationResult]] = [None] * len(requests)
        # Sorting keys by adapter name first keeps each adapter merged once per call.
        bar = tqdm(
            total=len(requests),
            desc=f"local {self.model}",
            unit="req",
            disable=progress is not None or len(requests) <= self.batch_size,
        )
        with bar:
            for key in sorted(groups, key=lambda k: tuple(map(str, k))):
                idxs = sorted(groups[key], key=lambda i: len(encoded[i][0]))
                with self.activate(requests[idxs[0]].adapter):
                    if self.continuous:
                        self._generate_continuous(requests, encoded, idxs, results, bar, progress)
                        continue
                    for start in range(0, len(idxs), self.batch_size):
                        chunk = idxs[start : start + self.batch_size]
                        outs = self._generate_chunk([requests[i] for i in chunk], [encoded[i][0] for i in chunk])
                        for i, out in zip(chunk, outs):
                            out.events = encoded[i][1] + out.events
                            results[i] = out
                        bar.update(len(chunk))
                        if progress is not None:
                            progress(len(chunk))
        return results  # type: ignore[return-value]

    def _generate_continuous(
        self,
        requests: Sequence[GenerationRequest],
        encoded: list[tuple[list[int], list[str]]],
        idxs: list[int],
        results: list[Optional[GenerationResult]],
        bar: Any,
        progress: Optional[ProgressFn],
    ) -> None:
        """One group (same adapter, schema, sampling settings, length) through the continuous decoder."""
        first = requests[idxs[0]]
        prompts = [encoded[i][0] for i in idxs]
        top_p, min_p, typical_p = first.truncation()

        def finished(done: Any) -> None:
            i = idxs[done.request]
            out = self._result(done.tokens, len(prompts[done.request]), first.max_new_tokens, done.seconds)
            if done.gave_up is not None:
                out.gave_up = done.gave_up
                out.events = [f"stopped at {len(done.tokens)} tokens: {done.gave_up}"]
            out.events = encoded[i][1] + out.events
            results[i] = out
            bar.update(1)
            if progress is not None:
                progress(1)

        continuous_decode(
            self.hf_model,
            prompts,
            rows=self.batch_size,
            max_new_tokens=first.max_new_tokens,
            temperature=first.temperature,
            stop_ids=self._eos_ids,
            grammar=self._grammars.compiled(first.schema) if first.schema is not None else None,
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            vocab_size=self.hf_model.config.vocab_size,
            seed=first.seed,
            seeds=[requests[i].seed for i in idxs],
            device=self.device,
            on_finish=finished,
            give_up=LoopWatch(self.tokenizer, constrained=first.schema is not None) if first.stop_loops else None,
        )

    def _generate_chunk(self, reqs: list[GenerationRequest], prompts: list[list[int]]) -> list[GenerationResult]:
        """One left-padded `generate` over requests that share adapter, schema, sampling settings and length."""
        first = reqs[0]
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self._pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        config = self._generation_config(first.temperature, first.max_new_tokens, *first.truncation())
        processors = [self._grammars.logits_processor(first.schema)] if first.schema is not None else []
        if first.temperature > 0 and first.seed is not None:
            # One seed per chunk: the same requests in the same order sample the same text.
            torch.manual_seed(first.seed)
        started = time.perf_counter()
        with torch.inference_mode():
            out = self.hf_model.generate(
                input_ids=input_ids, attention_mask=attention, generation_config=config, logits_processor=processors
            )
        # Rows of a batch run in lockstep, so the chunk's wall time is split evenly across them.
        latency = (time.perf_counter() - started) / len(reqs)
        return [
            self._result(row[width:].tolist(), len(prompt), req.max_new_tokens, latency)
            for row, prompt, req in zip(out, prompts, reqs)
        ]

    def _result(self, new_ids: list[int], prompt_tokens: int, max_new_tokens: int, latency: float) -> GenerationResult:
        stop = next((j for j, tok in enumerate(new_ids) if tok in self._eos_ids), None)
        completion = new_ids if stop is None else new_ids[:stop]
        events = [] if stop is not None else [f"output cut at max_new_tokens={max_new_tokens}"]
        return GenerationResult(
            text=self.tokenizer.decode(completion, skip_special_tokens=True),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(completion),
            latency_s=latency,
            events=events,
        )

    def _generation_config(
        self, temperature: float, max_new_tokens: int, top_p: float = 1.0, min_p: float = 0.0, typical_p: float = 1.0
    ) -> Any:
        from transformers import GenerationConfig

        # Built from scratch so a model's own sampling defaults (top_k, top_p, repetition penalty)
        # never leak in: the request alone decides, as it does for the OpenAI-compatible backend.
        # transformers applies top-p, min-p, then typical-p after the grammar's processor, as
        # `distill.backends.sampler` does.
        cuts = dict(top_p=top_p, min_p=min_p if min_p > 0 else None, typical_p=typical_p)
        sampling = (
            dict(do_sample=True, temperature=temperature, top_k=0, **cuts) if temperature > 0 else dict(do_sample=False)
        )
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            eos_token_id=self._eos_ids,
            pad_token_id=self._pad_id,
            bos_token_id=self.hf_model.config.bos_token_id,
            **sampling,
        )

    def _stop_token_ids(self) -> list[int]:
        configured = self.hf_model.generation_config.eos_token_id
        ids = list(configured) if isinstance(configured, list) else [configured] if configured is not None else []
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        if not ids:
            raise ValueError(f"model {self.model}: neither its generation config nor its tokenizer names an EOS token")
        return ids

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "model_path": self.model_path,
            "device": self.device,
            "dtype": str(self.torch_dtype).removeprefix("torch."),
            "batch_size": self.batch_size,
            "max_input_tokens": self.max_input_tokens,
            "merge_adapters": self.merge_adapters,
            "merged_cached": self._adapters.cached,
            "continuous": self.continuous,
            "decode_attention": self.cpu_attention,  # the key older runs recorded
            "adapters": dict(self._adapters.paths),
            **({"adapter_fingerprints": dict(self._fingerprints)} if self._fingerprints else {}),
            **({"quantize": self.quantize} if self.quantize else {}),  # unset keeps older runs' records equal
        }


def decode_groups(requests: Sequence[GenerationRequest]) -> dict[tuple, list[int]]:
    """Request indices by what one decode must share: adapter, schema, temperature, length and truncation.

    Greedy requests share a group whatever their top_p/min_p/typical_p, since greedy decoding ignores them.
    """
    groups: dict[tuple, list[int]] = {}
    for i, req in enumerate(requests):
        schema = f"{req.schema.__module__}.{req.schema.__qualname__}" if req.schema else ""
        key = (req.adapter or "", schema, req.temperature, req.max_new_tokens, *req.truncation(), req.stop_loops)
        groups.setdefault(key, []).append(i)
    return groups


def quantize_linear_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Every Linear layer (the LM head too) as int8 weights with activations quantised per call (torch's
    dynamic quantisation: fbgemm/oneDNN int8 GEMMs), for CPUs without a fast bf16 path.

    Answers differ from fp32's a little (int8 weights); attention, norms and embeddings stay in fp32. The
    model must be fp32 (`LocalBackend` checks its dtype before loading it).
    """
    import warnings

    with warnings.catch_warnings():  # torch's notices that its quantized tensors are deprecated
        warnings.filterwarnings("ignore", ".*deprecated.*")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
