"""Constrained JSON decoding: xgrammar (the local backend's before llguidance) against llguidance, on every role schema.

    python benchmarks/constrained_decoders.py --out constrained_bench.json   # needs `pip install xgrammar`

For each role schema (teacher and student forms, and the reflection audit over every stage), with the
embedded SmolLM2 tokenizer and the backend's compact JSON layout (no free whitespace, "," and ":"):
- compile time of each;
- seeded random walks: from the start state, pick a random token that one library allows, feed it to
  both, and compare the two allowed-token sets at every step until the answer ends. Walks are led by
  each library in turn, so a token only one of them allows is found from either side;
- the time to compute one step's token mask, over the same walks;
- the installed size of each package and of what it pulls in that the toolkit does not otherwise need.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import random
import statistics
import time
from pathlib import Path

import torch

SEPARATORS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def schemas() -> dict[str, dict]:
    from distill.roles.roles import ROLES, STAGE_ORDER

    found = {}
    for name, spec in ROLES.items():
        if spec.stage_schema is not None:
            found[f"{name}:{len(STAGE_ORDER)} stages"] = spec.schema_for("teacher", STAGE_ORDER).model_json_schema()
            continue
        for style in ("teacher", "student"):
            schema = spec.schema_for(style)
            found.setdefault(f"{name}:{schema.__name__}", schema.model_json_schema())
    return found


class XGrammar:
    def __init__(self, tokenizer, vocab: int):
        import xgrammar

        self.xgr, self.vocab = xgrammar, vocab
        self.compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab))

    def compile(self, schema: dict):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"))

    def matcher(self, grammar):
        bitmask = self.xgr.allocate_token_bitmask(1, self.vocab)
        return _Walker(self.xgr.GrammarMatcher(grammar), bitmask, "xgr")


class LLGuidance:
    def __init__(self, tokenizer, vocab: int):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.llg, self.vocab = llguidance, vocab
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)

    def compile(self, schema: dict):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=SEPARATORS)
        self.llg.LLMatcher(self.tokenizer, grammar)  # compilation happens when a matcher is built
        return grammar

    def matcher(self, grammar):
        import llguidance.torch

        bitmask = llguidance.torch.allocate_token_bitmask(1, self.vocab)
        return _Walker(self.llg.LLMatcher(self.tokenizer, grammar), bitmask, "llg")


class _Walker:
    """One matcher and its bitmask, behind the two calls the comparison needs."""

    def __init__(self, matcher, bitmask, kind: str):
        self.m, self.bitmask, self.kind = matcher, bitmask, kind

    def allowed(self, vocab: int) -> tuple[set[int], float]:
        start = time.perf_counter()
        if self.kind == "xgr":
            self.m.fill_next_token_bitmask(self.bitmask, 0)
        else:
            import llguidance.torch

            llguidance.torch.fill_next_token_bitmask(self.m, self.bitmask, 0)
        seconds = time.perf_counter() - start
        bits = self.bitmask[0]
        ids = torch.arange(vocab)
        mask = ((bits[ids // 32] >> (ids % 32)) & 1).bool()
        return set(ids[mask].tolist()), seconds

    def accept(self, token: int) -> bool:
        if self.kind == "xgr":
            return bool(self.m.accept_token(token))
        return bool(self.m.consume_token(token))


def walk(leader: _Walker, other: _Walker, vocab: int, eos: int, rng: random.Random, max_steps: int) -> dict:
    """Follow random tokens the leader allows; record where the two allowed sets differ."""
    only = {leader.kind: [], other.kind: []}  # (step, example token ids) where only this library allows some
    times, rejected = {leader.kind: [], other.kind: []}, None
    for step in range(max_steps):
        mine, t_mine = leader.allowed(vocab)
        theirs, t_theirs = other.allowed(vocab)
        times[leader.kind].append(t_mine)
        times[other.kind].append(t_theirs)
        for kind, extra in ((leader.kind, mine - theirs), (other.kind, theirs - mine)):
            if extra:
                only[kind].append((step, sorted(extra)[:3]))
        token = rng.choice(sorted(mine))
        if token == eos or not leader.accept(token):
            break
        if not other.accept(token):
            rejected = token
            break
    return {"steps": step + 1, "only": only, "rejected_by_follower": rejected, "mask_seconds": times}


def compare_schema(libs: dict, schema: dict, decode, vocab: int, eos: int, walks: int, max_steps: int) -> dict:
    compiled, compile_s = {}, {}
    for name, lib in libs.items():
        start = time.perf_counter()
        compiled[name] = lib.compile(schema)
        compile_s[name] = round(time.perf_counter() - start, 4)
    rng = random.Random(0)
    runs = []
    for i in range(walks):
        lead, follow = ("xgrammar", "llguidance") if i % 2 == 0 else ("llguidance", "xgrammar")
        runs.append(
            (
                lead,
                walk(
                    libs[lead].matcher(compiled[lead]),
                    libs[follow].matcher(compiled[follow]),
                    vocab,
                    eos,
                    rng,
                    max_steps,
                ),
            )
        )
    summary = {"compile_s": compile_s, "steps": sum(r["steps"] for _, r in runs)}
    for name, kind in (("xgrammar", "xgr"), ("llguidance", "llg")):
        steps = [(s, ids) for _, r in runs for s, ids in r["only"][kind]]
        summary[f"steps_only_{name}_allows_some_token"] = len(steps)
        summary[f"examples_only_{name}"] = sorted({decode([t]) for _, ids in steps[:20] for t in ids})[:12]
        summary[f"mask_ms_median_{name}"] = round(
            1000 * statistics.median(t for _, r in runs for t in r["mask_seconds"][kind]), 4
        )
    summary["rejected_by_follower"] = [
        {"leader": lead, "token": decode([r["rejected_by_follower"]])}
        for lead, r in runs
        if r["rejected_by_follower"] is not None
    ]
    return summary


def installed_mb(packages: list[str]) -> dict[str, float]:
    sizes = {}
    for name in packages:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        total = sum(dist.locate_file(f).stat().st_size for f in dist.files or [] if dist.locate_file(f).exists())
        sizes[name] = round(total / 2**20, 1)
    return sizes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--walks", type=int, default=6, help="random walks per schema (half led by each library)")
    p.add_argument("--max-steps", type=int, default=400)
    args = p.parse_args(argv)
    from transformers import AutoConfig, AutoTokenizer

    from data_prep.models import resolve_model

    path = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    vocab = AutoConfig.from_pretrained(path).vocab_size
    libs = {"xgrammar": XGrammar(tokenizer, vocab), "llguidance": LLGuidance(tokenizer, vocab)}
    per_schema = {}
    for name, schema in schemas().items():
        r = compare_schema(libs, schema, tokenizer.decode, vocab, tokenizer.eos_token_id, args.walks, args.max_steps)
        per_schema[name] = r
        print(name, json.dumps({k: v for k, v in r.items() if not k.startswith("examples")}), flush=True)
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "versions": {n: importlib.metadata.version(n) for n in ("xgrammar", "llguidance")},
        "installed_mb": installed_mb(["xgrammar", "triton", "apache-tvm-ffi", "llguidance"]),
        "schemas": per_schema,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
