"""`python -m distill serve`: parse the flags, build the local backend and run the server app."""

from __future__ import annotations

import argparse
import os
from typing import Optional

from distill.serving.serve import create_app
from distill.serving.serve_guard import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT_S, timed_protocol


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m", help="base model: alias, local path or hub id")
    parser.add_argument("--adapters", default=None, help="directory of role adapters (one subdirectory per role)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on. 127.0.0.1 (the default) answers this machine only; 0.0.0.0 answers every "
        "network interface, so anyone who can reach the machine can use the model: set --api-key-env then",
    )
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="require 'Authorization: Bearer <key>' (what the OpenAI client sends), the key read from this "
        "environment variable; /health stays open",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help="larger request bodies get a 413 before they are read",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="seconds a client has to send a request's headers, and again its body; a stalled connection is closed",
    )
    parser.add_argument(
        "--keep-alive-timeout", type=int, default=5, help="seconds an idle connection stays open between requests"
    )
    parser.add_argument("--port", type=int, default=8000, help="the port it listens on")
    parser.add_argument("--max-batch", type=int, default=16, help="requests generated together")
    parser.add_argument("--batch-window-ms", type=float, default=10.0, help="how long to wait for a batch to fill")
    parser.add_argument("--max-input-tokens", type=int, default=2048, help="longer prompts get a 400")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="largest max_tokens accepted")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16 or float32")
    parser.add_argument(
        "--label-decoding",
        choices=("generate", "rank", "rank-calibrated"),
        default="generate",
        help="how a json_schema request with one label (enum) field gets that label when it does not say "
        "(its `label_decoding`): generated, or ranked by log-likelihood over every value (calibrated: less each "
        "value's score with the user's text replaced by N/A)",
    )


USER_ERRORS = (ValueError,)  # reported as one line by data_prep.commands


def _api_key(env_name: Optional[str]) -> Optional[str]:
    if not env_name:
        return None
    key = os.environ.get(env_name, "").strip()
    if not key:
        raise ValueError(f"--api-key-env {env_name}: that environment variable is unset or empty")
    return key


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from distill.backends.local import LocalBackend

    api_key = _api_key(args.api_key_env)
    if args.request_timeout <= 0 or args.keep_alive_timeout < 1:
        raise ValueError("--request-timeout must be > 0 and --keep-alive-timeout >= 1")

    backend = LocalBackend(
        model=args.model,
        adapters=args.adapters,
        dtype=args.dtype,
        batch_size=args.max_batch,
        max_input_tokens=args.max_input_tokens,
    )
    base_names = [args.model, getattr(backend, "model", None), "base"]
    app = create_app(
        backend,
        base_names,
        max_batch=args.max_batch,
        max_input_tokens=args.max_input_tokens,
        max_new_tokens_cap=args.max_new_tokens,
        batch_window_ms=args.batch_window_ms,
        max_body_bytes=args.max_body_bytes,
        api_key=api_key,
        request_timeout_s=args.request_timeout,
        label_decoding=args.label_decoding,
    )
    print(
        f"[distill serve] {args.model} with adapters {list(getattr(backend, 'adapter_names', []) or [])} "
        f"on http://{args.host}:{args.port}/v1",
        flush=True,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        http=timed_protocol(args.request_timeout),
        timeout_keep_alive=args.keep_alive_timeout,
    )
    return 0
