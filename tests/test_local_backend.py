"""The local transformers backend: constrained JSON, batching order, reproducibility, truncation, adapters.

Fast tests run a tiny random 2-layer llama (built `from_config`) with the real SmolLM2 tokenizer;
the `slow` test runs the embedded SmolLM2-135M-Instruct in bf16.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from distill.adapters.adapters import find_adapters
from distill.backends.base import Backend, GenerationRequest
from distill.backends.constrained import JSON_SEPARATORS, allocate_bitmask, apply_bitmask, fill_bitmask
from distill.backends.local import LocalBackend
from distill.roles import schemas

SYSTEM = {"role": "system", "content": "You are a careful annotator. Answer in JSON."}


def _messages(text: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return LocalBackend(tiny_model_dir, dtype="fp32", batch_size=4)


def _accepts(backend: LocalBackend, schema, text: str) -> bool:
    """Whether the grammar takes `text`, tokenized as a model trained on it would emit it, as a whole answer."""
    matcher = backend._grammars.compiled(schema).matcher()
    ids = backend.tokenizer.encode(text, add_special_tokens=False)
    return matcher.consume_tokens(ids) and matcher.is_accepting()


def _matches(backend: LocalBackend, schema, obj) -> bool:
    return _accepts(backend, schema, json.dumps(obj, separators=JSON_SEPARATORS))


def test_grammar_enforces_every_schema_constraint(tiny):
    g = tiny
    assert _matches(g, schemas.ASIOutput, {"reasoning": "x" * 240, "emotion": "fear"})
    assert not _matches(g, schemas.ASIOutput, {"reasoning": "x" * 241, "emotion": "fear"})  # maxLength
    assert not _matches(g, schemas.ASIOutput, {"reasoning": "x", "emotion": "joy"})  # enum
    assert not _matches(g, schemas.ASIOutput, {"reasoning": "x"})  # required key
    cae = {"cause": "c", "category": "Loss & Failure"}
    assert _matches(g, schemas.CAEOutput, {"triggers": ["a", "b"], **cae})
    assert not _matches(g, schemas.CAEOutput, {"triggers": [], **cae})  # minItems
    assert not _matches(g, schemas.CAEOutput, {"triggers": ["a", "b", "c"], **cae})  # maxItems
    check = {"stage": "asi", "passed": True}
    assert _matches(g, schemas.GRAOutput, {"checks": [check], "earliest_failure": None, "correction": ""})  # nullable
    assert _matches(g, schemas.GRAOutput, {"checks": [check]})  # optional keys may be left out
    assert not _matches(g, schemas.GRAOutput, {"checks": [check] * 9})
    assert not _matches(g, schemas.PhaseOutput, {"phase": "action", "extra": 1})  # extra="forbid"
    # Decoded JSON has the exact layout of the SFT targets (pydantic's compact dump).
    target = schemas.PlanOutput(goal="comfort", stance="curious", tactic="offer_hope", tone="warm").model_dump_json()
    assert _accepts(g, schemas.PlanOutput, target)


def _unfit_in_strings(tokenizer) -> tuple[list[int], list[int]]:
    """Token ids that hold raw control characters, and the added tokens but the stop token (`<|im_start|>`, ...)."""
    control = [i for i in range(len(tokenizer)) if any(ord(c) < 32 for c in tokenizer.decode([i]))]
    return control, [i for i in tokenizer.added_tokens_decoder if i != tokenizer.eos_token_id]


@pytest.fixture(scope="module")
def unruly_model_dir(tmp_path_factory, smollm_path):
    """A tiny llama whose every next token is, by preference, a raw control character, then a special
    token such as `<|im_start|>`, then a closing quote: what a JSON string must not hold comes first."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm_path)
    cfg = AutoConfig.from_pretrained(smollm_path)
    cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 1, 64, 128
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 4, 2, 16
    cfg.tie_word_embeddings = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        # No layer writes to the residual stream and every embedding is positive, so the last hidden
        # state is positive whatever the prompt, and the head's rows alone rank the next tokens.
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.abs_().add_(0.1)
        head = model.lm_head.weight.zero_()
        control, special = _unfit_in_strings(tokenizer)
        head[control] = 2.0
        head[special] = 1.5
        head[tokenizer.convert_tokens_to_ids('"')] = 0.5
    out = tmp_path_factory.mktemp("unruly-llama")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.mark.slow  # a few decoding passes: seconds alone, a minute on a shared 2-core machine
@pytest.mark.parametrize("continuous", [True, False])
def test_json_strings_refuse_control_characters_and_special_tokens(unruly_model_dir, continuous):
    backend = LocalBackend(unruly_model_dir, dtype="fp32", batch_size=2, continuous=continuous)
    prompts = [_messages("How did you feel?"), _messages("Tell me more " * 9)]
    [free, _] = backend.generate([GenerationRequest(m, max_new_tokens=8) for m in prompts])
    assert any(ord(c) < 32 for c in free.text)  # unconstrained, the model writes raw control characters
    reqs = [GenerationRequest(m, schema=schemas.ASIOutput, max_new_tokens=60) for m in prompts]
    sampled = [
        GenerationRequest(m, schema=schemas.ASIOutput, max_new_tokens=60, temperature=1.0, seed=3) for m in prompts
    ]
    for res in backend.generate(reqs + sampled):  # one attempt each: no retry needed
        assert not res.events
        schemas.ASIOutput.model_validate_json(res.text)
    # Inside a string the mask itself refuses them (decoded text would hide a special token).
    matcher = backend._grammars.compiled(schemas.ASIOutput).matcher()
    assert matcher.consume_tokens(backend.tokenizer.encode('{"reasoning":"I', add_special_tokens=False))
    bitmask = allocate_bitmask(1, backend.hf_model.config.vocab_size)
    fill_bitmask(bitmask, [matcher])
    allowed = torch.zeros(1, backend.hf_model.config.vocab_size)
    apply_bitmask(allowed, bitmask)
    control, special = _unfit_in_strings(backend.tokenizer)
    assert allowed[0, control + special].eq(float("-inf")).all()
    assert allowed[0, backend.tokenizer.convert_tokens_to_ids(['"', "Ġfelt"])].eq(0).all()


def test_conforms_to_backend_protocol_and_describes_itself(tiny, tiny_model_dir):
    assert isinstance(tiny, Backend)
    desc = tiny.describe()
    assert desc["model"] == tiny_model_dir and desc["dtype"] == "float32" and desc["adapters"] == {}
    json.dumps(desc)


@pytest.mark.slow  # a few decoding passes: seconds alone, a minute on a shared 2-core machine
def test_mixed_batch_keeps_request_order(tiny):
    # Interleave schemas and lengths so grouping and length-sorting both reorder internally.
    # Generous max_new_tokens: a random model may spell an enum value one character per token.
    reqs = [
        GenerationRequest(_messages("word " * n), schema=schema, max_new_tokens=120)
        for n, schema in [
            (40, schemas.PlanOutput),
            (3, schemas.PhaseOutput),
            (25, schemas.PhaseOutput),
            (1, schemas.PlanOutput),
            (60, schemas.PhaseOutput),
            (9, schemas.PhaseOutput),
        ]
    ]
    results = tiny.generate(reqs)
    for req, res in zip(reqs, results):
        req.schema.model_validate_json(res.text)
        assert res.prompt_tokens == len(tiny.encode(req.messages)[0])
        assert 0 < res.completion_tokens < 120 and res.latency_s > 0 and not res.events


@pytest.mark.slow  # a few decoding passes: seconds alone, a minute on a shared 2-core machine
def test_greedy_is_deterministic_and_sampling_follows_the_seed(tiny):
    prompts = [_messages(f"prompt number {i} " * (i + 1)) for i in range(5)]
    greedy = [GenerationRequest(m, max_new_tokens=12) for m in prompts]
    assert [r.text for r in tiny.generate(greedy)] == [r.text for r in tiny.generate(greedy)]

    def sample(seed):
        reqs = [GenerationRequest(m, temperature=1.0, max_new_tokens=12, seed=seed) for m in prompts]
        return [r.text for r in tiny.generate(reqs)]

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)
    # one prompt asked four times in one call, each with its own seed (consensus samples): four samples, and
    # each is what its seed gives when asked alone
    copies = [GenerationRequest(prompts[2], temperature=1.0, max_new_tokens=12, seed=7 + 1000 * j) for j in range(4)]
    texts = [r.text for r in tiny.generate(copies)]
    assert len(set(texts)) == 4 and texts[0] == sample(7)[2]
    assert texts[3] == tiny.generate([copies[3]])[0].text


def test_overlong_input_is_truncated_not_fatal(tiny_model_dir):
    backend = LocalBackend(tiny_model_dir, dtype="fp32", max_input_tokens=256)
    long_turn = "The storm took the roof off our shed and then the fence went too. " * 760  # ~50k chars
    assert len(long_turn) >= 50_000
    [res] = backend.generate([GenerationRequest(_messages(long_turn), schema=schemas.PhaseOutput, max_new_tokens=40)])
    assert res.prompt_tokens <= 256
    assert any("truncated" in e for e in res.events)
    schemas.PhaseOutput.model_validate_json(res.text)
    # The system message and the end of the turn survive; the oldest text is what goes.
    ids, _ = backend.encode(_messages(long_turn))
    assert SYSTEM["content"] in backend.tokenizer.decode(ids) and "fence went too." in backend.tokenizer.decode(ids)


@pytest.mark.slow  # a few decoding passes: seconds alone, a minute on a shared 2-core machine
def test_continuous_batching_matches_one_request_at_a_time(tiny_model_dir, monkeypatch):
    """Refilled slots, batched prefills and buffer compaction give the text of plain `generate`, row by row."""
    from distill.backends import continuous as cb

    shifts, shared = [], []
    shift_left, common_prefix = cb._Pool.shift_left, cb._common_prefix
    monkeypatch.setattr(cb._Pool, "shift_left", lambda pool, by: (shifts.append(by), shift_left(pool, by)))
    monkeypatch.setattr(cb, "_common_prefix", lambda prompts: shared.append(common_prefix(prompts)) or shared[-1])
    continuous = LocalBackend(tiny_model_dir, dtype="fp32", batch_size=3)
    lockstep = LocalBackend(tiny_model_dir, dtype="fp32", batch_size=1, continuous=False)
    assert continuous.describe()["continuous"] and not lockstep.describe()["continuous"]
    # 14 prompts of many lengths through 3 slots: rows finish at different steps and are refilled
    # (some in groups), and ~14*40/3 steps overflow the buffer's longest + 2*40 + 1 columns, so
    # columns are compacted several times.
    # Half the calls share long instructions, as a teacher role's prompts do: the prefix is prefilled once.
    instructions = {"role": "system", "content": "You label the feeling in a short conversation. " * 6}
    plain = [_messages("tell me " * (1 + (7 * i) % 23) + f"story {i}") for i in range(14)]
    instructed = [[instructions, *m[1:]] for m in plain]
    for prompts, schema in [(plain, None), (plain, schemas.PlanOutput), (instructed, schemas.PlanOutput)]:
        reqs = [GenerationRequest(m, schema=schema, max_new_tokens=40) for m in prompts]
        got, want = continuous.generate(reqs), lockstep.generate(reqs)
        assert [r.text for r in got] == [r.text for r in want]
        assert [r.completion_tokens for r in got] == [r.completion_tokens for r in want]
        if (
            schema is not None and prompts is plain
        ):  # the grammar ends these at different steps (the random model never stops)
            assert len({r.completion_tokens for r in got}) > 1
        assert all(r.latency_s > 0 and r.prompt_tokens == len(continuous.encode(m)[0]) for r, m in zip(got, prompts))
        if schema is not None:
            for r in got:
                if not r.events:  # not cut at max_new_tokens
                    schema.model_validate_json(r.text)
    assert shifts and all(by > 0 for by in shifts)
    assert max(shared) > 32 and min(len(continuous.encode(m)[0]) for m in instructed) > max(shared)


def test_cpu_attention_equals_sdpa_on_a_decode_step():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from distill.backends.attention import MIN_ROWS, cpu_attention

    class Attn(torch.nn.Module):
        num_key_value_groups, is_causal = 3, True

    torch.manual_seed(0)
    rows, cols = MIN_ROWS + 2, 37
    q = torch.randn(rows, 9, 1, 16)
    k, v = torch.randn(rows, 3, cols, 16), torch.randn(rows, 3, cols, 16)
    mask = torch.rand(rows, 1, 1, cols) > 0.3
    mask[:, :, :, -1] = True  # every row attends to its own token
    want, _ = sdpa_attention_forward(Attn(), q, k, v, mask, scaling=0.25)
    got, _ = cpu_attention(Attn(), q, k, v, mask, scaling=0.25)
    assert got.shape == want.shape == (rows, 1, 9, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # float masks (additive) and a single row (handed to sdpa) agree too
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(cpu_attention(Attn(), q, k, v, additive, scaling=0.25)[0], want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        cpu_attention(Attn(), q[:1], k[:1], v[:1], mask[:1], scaling=0.25)[0], want[:1], rtol=1e-5, atol=1e-5
    )


def test_cpu_attention_attends_by_example_in_a_flattened_row_with_sdpas_outputs_and_gradients(monkeypatch):
    """Padding-free training: one row of examples whose positions restart at 0, a block-causal mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from distill.backends import attention

    class Attn(torch.nn.Module):
        num_key_value_groups, is_causal = 3, True

    torch.manual_seed(0)
    lengths = [3, 5, 4]
    n = sum(lengths)
    position_ids = torch.cat([torch.arange(k) for k in lengths])[None]
    example = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    block = (example[:, None] == example[None, :]) & torch.ones(n, n, dtype=torch.bool).tril()
    tensors = [torch.randn(1, 9, n, 16), torch.randn(1, 3, n, 16), torch.randn(1, 3, n, 16)]

    def run(fn, mask):
        q, k, v = (t.clone().requires_grad_() for t in tensors)
        out, _ = fn(Attn(), q, k, v, mask[None, None], scaling=0.25, position_ids=position_ids)
        out.pow(2).sum().backward()
        return out, [t.grad for t in (q, k, v)]

    calls = []
    real = attention._by_example
    monkeypatch.setattr(attention, "_by_example", lambda *a: calls.append(a[3]) or real(*a))
    want, want_grads = run(sdpa_attention_forward, block)
    got, got_grads = run(attention.cpu_attention, block)
    assert calls == [[0, 3, 8]] and got.shape == want.shape == (1, n, 9, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    # a mask that is not the examples' blocks (here plain causal: one long example) goes to sdpa as given
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    torch.testing.assert_close(run(attention.cpu_attention, causal)[0], run(sdpa_attention_forward, causal)[0])
    assert len(calls) == 1


def _save_random_lora(model_dir: str, out_dir, seed: int) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    # init_lora_weights=False makes B random too, so the adapter visibly changes the output.
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(base, cfg).save_pretrained(out_dir)


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("adapters")
    _save_random_lora(tiny_model_dir, root / "asi", seed=1)
    _save_random_lora(tiny_model_dir, root / "cae", seed=2)
    return root


def _base_weights(backend: LocalBackend) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in backend.hf_model.state_dict().items() if "lora_" not in k}


@pytest.mark.slow  # a few decoding passes: seconds alone, a minute on a shared 2-core machine
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_adapters_switch_per_request_and_leave_the_base_intact(tiny_model_dir, adapter_dir, dtype):
    plain = LocalBackend(tiny_model_dir, dtype=dtype)
    merged = LocalBackend(tiny_model_dir, adapters=str(adapter_dir), dtype=dtype, merge_adapters=True)
    assert merged.adapter_names == ["asi", "cae"]
    prompts = [_messages("I finally finished the marathon."), _messages("My cat is sick and I am scared.")]

    def texts(backend, adapter):
        return [
            r.text
            for r in backend.generate([GenerationRequest(m, max_new_tokens=10, adapter=adapter) for m in prompts])
        ]

    base_before = texts(merged, None)
    assert base_before == texts(plain, None)
    weights_before = _base_weights(merged)
    assert merged.describe()["merged_cached"] == ["asi", "cae"]  # both fit the cache: a stage swaps weights in
    lora_layers = [m for m in merged.hf_model.modules() if hasattr(m, "lora_A") and "asi" in m.lora_A]
    with merged.activate("asi"):  # the stage really runs on merged weights, not through the LoRA path
        assert all(m.disable_adapters for m in lora_layers)
        assert all(
            torch.equal(
                m.get_base_layer().weight,
                weights_before[n + ".base_layer.weight"].clone().add_(m.get_delta_weight("asi")),
            )
            for n, m in merged.hf_model.named_modules()
            if m in lora_layers
        )
    asi, cae = texts(merged, "asi"), texts(merged, "cae")
    # without the cache each stage merges and restores in place: the same weights, the same text
    per_stage = LocalBackend(tiny_model_dir, adapters=str(adapter_dir), dtype=dtype, cache_merged_mb=0)
    assert per_stage.describe()["merged_cached"] == []
    with per_stage.activate("asi"):
        assert all(m.merged for m in per_stage.hf_model.modules() if hasattr(m, "lora_A") and "asi" in m.lora_A)
    assert texts(per_stage, "asi") == asi and texts(per_stage, "cae") == cae
    per_stage_before = _base_weights(per_stage)
    for _ in range(5):  # bf16 unmerge alone would drift the shared base
        texts(per_stage, "asi")
    assert all(torch.equal(per_stage_before[k], v) for k, v in _base_weights(per_stage).items())
    assert asi != base_before and cae != base_before and asi != cae
    switches, switch_seconds = merged.switches, merged.switch_seconds
    for _ in range(20):  # many stage cycles leave the shared base exactly as it was
        texts(merged, "asi")
        texts(merged, "cae")
    # one switch per adapter group per generate call, each timed (the pipeline benchmark reports the share)
    assert merged.switches == switches + 40 and merged.switch_seconds > switch_seconds
    assert texts(merged, None) == base_before
    assert all(torch.equal(weights_before[k], v) for k, v in _base_weights(merged).items())
    if dtype == "fp32":  # in bf16 a merged weight rounds differently from base + LoRA, so only fp32 is exact
        unmerged = LocalBackend(tiny_model_dir, adapters=str(adapter_dir), dtype=dtype, merge_adapters=False)
        assert texts(unmerged, "asi") == asi and texts(unmerged, "cae") == cae


def test_unknown_adapter_is_a_clear_error(tiny, tmp_path):
    with pytest.raises(ValueError, match="no adapter loaded for role 'srp'"):
        tiny.generate([GenerationRequest(_messages("hi"), adapter="srp")])
    with pytest.raises(ValueError, match="no adapters found"):
        find_adapters(str(tmp_path))


# --- top-p and min-p ------------------------------------------------------------------------------


def test_top_p_and_min_p_keep_exactly_the_likely_tokens():
    from distill.backends.sampler import Sampler

    # at temperature 1 the first row's probabilities are [0.5, 0.3, 0.15, 0.05]; the second row reverses them
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]).log()

    def kept(temperature=1.0, **cut):
        probs = Sampler.make(temperature, None, 4, seed=0, device="cpu", rows=2, **cut).probabilities(logits)
        return [row.nonzero().flatten().tolist() for row in probs]

    assert kept() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert kept(top_p=0.3) == [[0], [3]]  # the top token alone reaches 0.3
    assert kept(top_p=0.75) == [[0, 1], [2, 3]]  # 0.5 + 0.3 reaches it, 0.5 alone does not
    assert kept(top_p=0.85) == [[0, 1, 2], [1, 2, 3]]
    assert kept(min_p=0.2) == [[0, 1, 2], [1, 2, 3]]  # at least 0.2 x 0.5 = 0.1
    assert kept(min_p=0.5) == [[0, 1], [2, 3]]  # at least 0.25
    assert kept(top_p=0.85, min_p=0.5) == [[0, 1], [2, 3]]  # both cuts
    assert kept(temperature=0.5, min_p=0.2) == [[0, 1], [2, 3]]  # after the temperature: 0.07/0.68 < 0.2
    # survivors keep their probabilities, and sampling draws from them alone
    sampler = Sampler.make(1.0, None, 4, seed=0, device="cpu", rows=2, top_p=0.75)
    assert sampler.probabilities(logits)[0, :2].tolist() == pytest.approx([0.5, 0.3])
    streams = [sampler.generator([5, 6]), sampler.generator([7])]
    drawn = {tuple(sampler.choose(logits, [None, None], streams)) for _ in range(200)}
    assert {a for a, _ in drawn} == {0, 1} and {b for _, b in drawn} == {2, 3}


def test_typical_p_cuts_as_transformers_typical_warper_does():
    """The continuous decoder's typical cut keeps the same tokens as transformers' chain (temperature, top-p,
    min-p, typical), which the `generate` fallback runs, on random and on hand-made distributions."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopPLogitsWarper,
        TypicalLogitsWarper,
    )

    from distill.backends.sampler import Sampler

    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3
    for temperature, top_p, min_p, typical_p in ((1.0, 1.0, 0.0, 0.9), (0.7, 0.95, 0.0, 0.5), (1.3, 1.0, 0.05, 0.2)):
        chain = [TemperatureLogitsWarper(temperature)]
        chain += [TopPLogitsWarper(top_p)] if top_p < 1 else []
        chain += [MinPLogitsWarper(min_p)] if min_p > 0 else []
        chain += [TypicalLogitsWarper(typical_p)]
        theirs = LogitsProcessorList(chain)(None, logits.clone()).isfinite()
        sampler = Sampler.make(temperature, None, 50, 0, "cpu", 6, top_p, min_p, typical_p)
        ours = sampler.probabilities(logits) > 0
        assert torch.equal(ours, theirs), (temperature, top_p, min_p, typical_p)
        assert 1 <= ours.sum(dim=-1).min() and ours.sum() < logits.numel()  # it cuts, and keeps one at least
    # [0.5, 0.3, 0.15, 0.05]: entropy 1.14 nats; surprise 0.69, 1.20, 1.90, 3.00, so 0.3's token is the most
    # typical, then 0.5's: a mass of 0.25 keeps the second token alone, 0.7 the first two
    sampler = Sampler.make(1.0, None, 4, 0, "cpu", 1, typical_p=0.25)
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert (sampler.probabilities(probs.log()) > 0).tolist() == [[False, True, False, False]]
    sampler = Sampler.make(1.0, None, 4, 0, "cpu", 1, typical_p=0.7)
    assert (sampler.probabilities(probs.log()) > 0).tolist() == [[True, True, False, False]]


def test_requests_that_cut_differently_never_share_a_decode():
    from distill.backends.local import decode_groups

    m = _messages("hi")
    reqs = [
        GenerationRequest(m, temperature=1.0, top_p=0.5),
        GenerationRequest(m, temperature=1.0),
        GenerationRequest(m, temperature=1.0, min_p=0.1),
        GenerationRequest(m, temperature=1.0, top_p=0.5),
        GenerationRequest(m, top_p=0.5),  # greedy: no distribution to cut, so it decodes with other greedy rows
        GenerationRequest(m),
        GenerationRequest(m, temperature=1.0, typical_p=0.9),
        GenerationRequest(m, typical_p=0.9),
    ]
    assert sorted(decode_groups(reqs).values()) == [[0, 3], [1], [2], [4, 5, 7], [6]]


@pytest.mark.parametrize(
    "cut, message",
    [
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0.0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
        ({"top_p": float("nan")}, "top_p must be in (0, 1], got nan"),
        ({"min_p": 1.0}, "min_p must be in [0, 1), got 1.0"),
        ({"min_p": -0.1}, "min_p must be in [0, 1), got -0.1"),
        ({"typical_p": 0.0}, "typical_p must be in (0, 1], got 0.0"),
    ],
)
def test_out_of_range_top_p_or_min_p_is_refused(cut, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GenerationRequest(_messages("hi"), temperature=1.0, **cut)


@pytest.mark.parametrize("continuous", [True, False])
def test_top_p_and_min_p_sample_inside_the_grammar(tiny_model_dir, continuous):
    """Both decoders: a cut that leaves only the most likely token samples the greedy answer (uncut sampling
    does not), and sampled answers under a cut still validate against the schema."""
    backend = LocalBackend(tiny_model_dir, dtype="fp32", batch_size=4, continuous=continuous)
    prompts = [_messages(f"tell me about day {i} " * (i + 1)) for i in range(3)]

    def texts(schema=None, max_new_tokens=10, **sampling):
        sampling = {"seed": 3, **sampling}
        reqs = [GenerationRequest(m, schema=schema, max_new_tokens=max_new_tokens, **sampling) for m in prompts]
        return [r.text for r in backend.generate(reqs)]

    greedy = texts()
    assert texts(temperature=1.0) != greedy
    assert texts(temperature=1.0, top_p=1e-6) == greedy
    assert texts(temperature=1.0, min_p=1 - 1e-6) == greedy
    # typical_p reaches the decoder: at the same seed, its cut changes what is sampled
    assert texts(temperature=1.0, typical_p=1e-6) != texts(temperature=1.0)
    constrained = texts(schemas.PhaseOutput, 120, temperature=1.0, top_p=1e-6)
    assert constrained == texts(schemas.PhaseOutput, 120)
    cut = texts(schemas.PhaseOutput, 120, temperature=1.5, top_p=0.9, min_p=0.01, typical_p=0.9)
    for text in constrained + cut:
        schemas.PhaseOutput.model_validate_json(text)


def test_serve_accepts_top_p_and_min_p_and_refuses_them_out_of_range(tiny, tiny_model_dir):
    """`distill serve` in process: the request's top_p, min_p and typical_p reach the local backend's sampler."""
    from fastapi.testclient import TestClient

    from distill.serving.serve import create_app

    schema = {
        "type": "json_schema",
        "json_schema": {"name": "Phase", "schema": schemas.PhaseOutput.model_json_schema()},
    }
    body = {"model": tiny_model_dir, "messages": _messages("hi"), "max_tokens": 120, "response_format": schema}
    with TestClient(create_app(tiny, [tiny_model_dir])) as client:
        greedy = client.post("/v1/chat/completions", json={**body, "temperature": 0})
        cut = client.post("/v1/chat/completions", json={**body, "temperature": 1, "top_p": 1e-6, "seed": 5})
        assert greedy.status_code == cut.status_code == 200, cut.text
        # only the most likely token survives top_p=1e-6, so the sampled answer is the greedy one
        assert cut.json()["choices"][0]["message"]["content"] == greedy.json()["choices"][0]["message"]["content"]
        schemas.PhaseOutput.model_validate_json(cut.json()["choices"][0]["message"]["content"])
        cuts = {"top_p": 0.9, "min_p": 0.05, "typical_p": 0.9}
        both = client.post("/v1/chat/completions", json={**body, "temperature": 1, **cuts})
        assert both.status_code == 200, both.text
        for field, value in (("top_p", 1.5), ("top_p", 0), ("min_p", 1), ("typical_p", 0)):
            reply = client.post("/v1/chat/completions", json={**body, field: value})
            assert reply.status_code == 400 and field in reply.json()["error"]["message"], reply.text


@pytest.mark.slow
def test_embedded_model_bf16_batches_validate_for_every_role(tiny_dialogues):
    from distill.roles.roles import ROLES, STAGE_ORDER, RoleInput

    # the schema the pipeline sends: the audit's enumerates the run's stages
    schemas = {name: spec.schema_for("teacher", STAGE_ORDER) for name, spec in ROLES.items()}

    # bf16 asked for explicitly: `auto` picks it only on CPUs with native bf16, and not every CI machine has it
    backend = LocalBackend("smollm2-135m", dtype="bfloat16", batch_size=4)
    assert backend.describe()["dtype"] == "bfloat16"
    # Real teacher prompts, two dialogues of different lengths per role (one for the long gra), so
    # each role's rows share a left-padded constrained batch. Room beyond the registry's budgets:
    # the untuned base rambles inside strings (gra took 197 tokens on these prompts).
    reqs = [
        GenerationRequest(spec.render(RoleInput(dialogue), "teacher"), schema=schemas[spec.name], max_new_tokens=256)
        for k, spec in enumerate(ROLES.values())
        for dialogue in (tiny_dialogues[(k + 2) % 8], tiny_dialogues[1])[: 1 if spec.name == "gra" else 2]
    ]
    assert len({len(backend.encode(r.messages)[0]) for r in reqs}) > len(ROLES)  # lengths really differ
    results = backend.generate(reqs)
    assert len(results) == len(reqs)
    for req, res in zip(reqs, results):
        req.schema.model_validate_json(res.text)
        assert res.prompt_tokens == len(backend.encode(req.messages)[0])


def test_int8_quantisation_replaces_every_linear_and_keeps_the_logits_close(tiny, tiny_model_dir, adapter_dir):
    int8 = LocalBackend(tiny_model_dir, dtype="fp32", batch_size=4, quantize="int8")
    assert int8.describe()["quantize"] == "int8" and "quantize" not in tiny.describe()
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    linears = [m for m in int8.hf_model.modules() if isinstance(m, torch.nn.Linear)]
    quantized = [m for m in int8.hf_model.modules() if isinstance(m, Int8Linear)]
    assert not linears and len(quantized) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the LM head
    ids = torch.tensor([tiny.encode(_messages("how are you today"))[0]])
    with torch.inference_mode():
        full, reduced = tiny.hf_model(ids).logits, int8.hf_model(ids).logits
    assert (full - reduced).abs().max() < 0.05 * full.abs().max()  # int8 weights: close, not equal
    result = int8.generate([GenerationRequest(_messages("word " * 9), schema=schemas.PhaseOutput, max_new_tokens=120)])
    schemas.PhaseOutput.model_validate_json(result[0].text)
    with pytest.raises(ValueError, match="bare base model"):
        LocalBackend(tiny_model_dir, dtype="fp32", adapters=str(adapter_dir), quantize="int8")
    with pytest.raises(ValueError, match="needs dtype float32"):
        LocalBackend(tiny_model_dir, dtype="bfloat16", quantize="int8")
