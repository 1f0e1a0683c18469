"""Backends that run the pipeline's requests: `local` (transformers) and `openai` (any compatible server)."""

from distill.backends.base import Backend, GenerationRequest, GenerationResult

__all__ = ["Backend", "GenerationRequest", "GenerationResult"]
