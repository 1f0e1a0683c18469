"""Ending a looping answer while it decodes (`stop_loops`): the rule, the decoder, the pipeline's retry.

The rule must never stop an answer that the `loop` check would pass in full, and the decoder must leave
every other answer exactly as it decodes without the rule.
"""

from __future__ import annotations

import json

import pytest
import torch

from distill.backends.base import GenerationRequest, GenerationResult
from distill.backends.continuous import decode
from distill.backends.loop_watch import LoopWatch, json_strings
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.quality.checks import loop, loop_so_far
from distill.quality.thresholds import QualityThresholds
from distill.roles.roles import ROLES

T = QualityThresholds()
LOOPING = [
    "anxiety_disorder_category_anxiety_disorder_category_anxiety_disorder_category_1",
    "I feel bad I feel bad I feel bad I feel bad about it",
    "no no no no no no no",  # an interjection: loop_interjection_repeats (6), found before the last word
    "That is awful. I am so sorry. That is awful. I am here. That is awful. Really.",
    "wow!!!!!!!!!!!! that is great",
    "hahahahahahahahahahahahahaha",  # a character run inside the word still being decoded
    "the fee was 100000000000000000000",
]
FINE = [
    "I'm so sorry, that sounds awful. Did you get to talk to her?",
    "It's it's fine, really. It's it'sy bitsy.",  # the unfinished word 'it' must not count as a repeat
    "sad sad sad sadness is everywhere",  # 'sad' x3 then 'sadness': a prefix must not call it 4 in a row
    "Go, go, go! We made it. Go team.",
    "I am sad. I am sad about it. I am sad about the rest.",  # prefixes end mid-sentence: not said 3 times
]


def test_loop_so_far_only_finds_what_loop_finds_in_the_whole_text():
    for text in FINE + LOOPING:
        hits = [n for n in range(1, len(text) + 1) if loop_so_far(text[:n], T)]
        if hits:
            assert loop(text, T), f"stopped {text!r} at {hits[0]} characters, but it does not loop in full"
    for text in LOOPING:  # and it finds each loop before the text ends
        assert any(loop_so_far(text[:n], T) for n in range(1, len(text))), text


def test_json_strings_reads_each_string_of_a_cut_answer():
    text = '{"triggers": ["my dog", "the vet \\"said\\" no"], "cause": "she lost her dog to an ill\\u00'
    assert json_strings(text) == ["triggers", "my dog", 'the vet "said" no', "cause", "she lost her dog to an ill"]
    assert json_strings('{"a": "b\\') == ["a", "b"]


class _Chars:
    """A tokenizer whose token i is the i-th character of `alphabet`."""

    def __init__(self, alphabet: str):
        self.alphabet = alphabet

    def decode(self, tokens, skip_special_tokens=True):
        return "".join(self.alphabet[t] for t in tokens)


def test_watch_reads_json_strings_apart_and_plain_text_whole():
    tok = _Chars('{}[]":, sadt')
    sad_list = [tok.alphabet.index(c) for c in '{"t": ["sad", "sad", "sad", "sad", "sad"']
    assert LoopWatch(tok, constrained=True)(sad_list) is None  # five triggers, each one word
    assert LoopWatch(tok, constrained=False)(sad_list).startswith("loop: the word 'sad'")


def test_watch_stops_a_character_run_while_its_word_is_still_growing():
    tok = _Chars('{}":, ha10')
    laugh = [tok.alphabet.index(c) for c in "ha" * 6]
    assert LoopWatch(tok, constrained=False)(laugh) == "loop: 'ha' repeated 6 times in a row"
    number = [tok.alphabet.index(c) for c in '{"a": "1' + "0" * 9]
    assert LoopWatch(tok, constrained=True)(number) == "loop: '0' repeated 9 times in a row"
    assert LoopWatch(tok, constrained=False)(laugh[:-2]) is None  # 'ha' 5 times: not yet a run


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_decoder_ends_the_answer_it_gives_up_on_and_decodes_the_rest_as_before(temperature):
    """Greedy and sampled: each request has its own random stream, so ending one changes no other's draws."""
    model = _tiny_llama()
    prompts = [[(7 * i + j) % 60 + 2 for j in range(5 + 3 * i)] for i in range(7)]
    settings = dict(rows=3, max_new_tokens=40, temperature=temperature, stop_ids=[1], vocab_size=64, seed=5)
    plain = decode(model, prompts, **settings)
    asked = []

    def give_up(tokens):  # the request whose answer starts like request 2's gives up at its 16th token
        asked.append(len(tokens))
        return "loop: scripted" if tokens[:16] == plain[2].tokens[:16] and len(tokens) == 16 else None

    watched = decode(model, prompts, **settings, give_up=give_up)
    assert watched[2].gave_up == "loop: scripted" and watched[2].tokens == plain[2].tokens[:16]
    for i in set(range(7)) - {2}:
        assert watched[i].tokens == plain[i].tokens and watched[i].gave_up is None
    assert asked and all(n % 8 == 0 for n in asked)  # asked every 8 tokens, not every token
    alone = decode(model, prompts[4:5], **settings)  # nor does who else shares the call
    assert alone[0].tokens == plain[4].tokens


class _LoopsOnce:
    """asi's first attempt gives up (its text even parses); the retry answers. Records each call's temperatures."""

    name = model = "scripted"

    def __init__(self):
        self.temperatures: list[list[float]] = []
        self.stop_loops: list[bool] = []

    def generate(self, requests, progress=None):
        self.temperatures.append([r.temperature for r in requests])
        self.stop_loops += [r.stop_loops for r in requests]
        first = len(self.temperatures) == 1
        asi = issubclass(requests[0].schema, ROLES["asi"].schema)
        answer = {"reasoning": "her dog died last week", "emotion": "sadness"} if asi else {"response": "Oh no."}
        looped = "loop: the word 'sad' repeated 4 times in a row" if first else None
        return [GenerationResult(text=json.dumps(answer), gave_up=looped) for _ in requests]

    def describe(self):
        return {"backend": self.name}


def test_a_given_up_answer_is_a_failed_attempt_that_is_retried(tiny_dialogues):
    backend = _LoopsOnce()
    config = PipelineConfig(rag=False, use_cae=False, use_srp=False, max_attempts=2, stop_loops=True)
    [trace] = Pipeline(config, backend).run(tiny_dialogues[:1], progress=False)
    step = trace.steps[0]
    assert trace.status != "failed" and step.attempts == 2 and step.parsed["emotion"] == "sadness"
    assert step.events == ["attempt 1: invalid output: loop: the word 'sad' repeated 4 times in a row"]
    assert backend.temperatures == [[0.0], [0.7], [0.5]]  # asi's retry samples, as after any invalid answer
    assert backend.stop_loops == [True, True, True]  # the config's stop_loops reaches every request, retries too


@pytest.fixture(scope="module")
def zeros_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model made to answer "000…" to any prompt: with attention and MLP outputs zeroed each position
    reads only its own token, and with the token "0" embedded as 10 × the newline (embeddings are tied), both the
    newline that ends the chat prompt and "0" itself score "0" highest."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    assert model.config.tie_word_embeddings
    newline, zero = tokenizer.convert_tokens_to_ids("\u010a"), tokenizer.convert_tokens_to_ids("0")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embeddings = model.model.embed_tokens.weight
        embeddings[zero] = 10 * embeddings[newline]
    out = tmp_path_factory.mktemp("zeros-llama")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def test_local_backend_stops_a_looping_answer_only_for_the_requests_that_ask(zeros_model_dir):
    """One call, the same prompt twice: the request with stop_loops ends at the watch's first look past the
    character run (16 tokens), the one without decodes to its cap; they never share a decode group."""
    from distill.backends.local import LocalBackend

    backend = LocalBackend(zeros_model_dir, dtype="fp32", batch_size=4)
    messages = [{"role": "user", "content": "My dog died."}]
    plain, watched = backend.generate(
        [
            GenerationRequest(messages, max_new_tokens=48),
            GenerationRequest(messages, max_new_tokens=48, stop_loops=True),
        ]
    )
    assert plain.text == "0" * 48 and plain.gave_up is None
    assert watched.text == "0" * 16 and watched.completion_tokens == 16
    assert watched.gave_up == "loop: '0' repeated 16 times in a row"
    assert watched.events == [f"stopped at 16 tokens: {watched.gave_up}"]
