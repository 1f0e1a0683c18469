"""Serving: the OpenAI-compatible server over the local backend and role adapters."""
