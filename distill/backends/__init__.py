"""Backends that run the pipeline's requests: `local` (transformers) and `openai` (any compatible server).

`make_backend` builds one from a config dict such as a YAML file's `backend:` section. Backend
modules are imported by type name only when used, so the `openai` stack never loads for a local
run and torch never loads for an API run; a new backend is one line in `BACKEND_TYPES`.
"""

from __future__ import annotations

import importlib
from typing import Any

from distill.backends.base import Backend, GenerationRequest, GenerationResult

BACKEND_TYPES: dict[str, str] = {
    "local": "distill.backends.local:LocalBackend",
    "openai": "distill.backends.openai_backend:OpenAIBackend",
}


def make_backend(cfg: dict[str, Any], **extra: Any) -> Backend:
    """The backend named by `cfg["type"]`, built from the other keys (plus `extra`, e.g. a cost guard)."""
    if not isinstance(cfg, dict) or "type" not in cfg:
        raise ValueError(f"backend config needs a 'type' ({', '.join(BACKEND_TYPES)}), got {cfg!r}")
    options = {k: v for k, v in cfg.items() if k != "type"}
    kind = cfg["type"]
    if kind not in BACKEND_TYPES:
        raise ValueError(f"backend.type: unknown backend '{kind}' (known: {', '.join(BACKEND_TYPES)})")
    module_name, class_name = BACKEND_TYPES[kind].split(":")
    backend_class = getattr(importlib.import_module(module_name), class_name)
    from pydantic import ValidationError

    from data_prep.config_file import first_error
    from data_prep.models import ModelNotAvailable

    try:
        return backend_class(**options, **extra)
    except TypeError as exc:  # an unknown or missing option, or a value of the wrong type: name it
        raise ValueError(f"backend '{kind}': {exc} (options given: {', '.join(sorted(options)) or 'none'})") from None
    except ValidationError as exc:  # pydantic's own text is several lines naming our __init__
        got = exc.errors()[0].get("input")
        raise ValueError(f"{first_error(exc, prefix='backend.')} (got {got!r})") from None
    except ModelNotAvailable as exc:
        raise ValueError(f"field 'backend.model': {exc}") from None


__all__ = ["Backend", "BACKEND_TYPES", "GenerationRequest", "GenerationResult", "make_backend"]
