"""Distillation: the teacher pipeline, trace runs, role datasets and serving (`python -m distill`).

The package also exports the public Python API (`Pipeline`, `PipelineConfig`, `make_backend`, ...), imported on
first use, and `__version__` (`distill.version`).
"""

from distill.version import __version__

# The public Python API (README, "In Python"): imported on first use, so `python -m distill --help` loads none of it.
_PUBLIC = {
    "Pipeline": "distill.pipeline.pipeline",
    "PipelineConfig": "distill.pipeline.config",
    "Trace": "distill.pipeline.trace",
    "TraceStore": "distill.pipeline.store",
    "make_backend": "distill.backends",
    "load_split": "data_prep.loaders",
    "parse_dialogue": "distill.pipeline.cli_respond",
    "ExemplarIndex": "data_prep.retrieval",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'distill' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)
