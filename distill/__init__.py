"""Distillation: the teacher pipeline, trace runs, role datasets and serving (`python -m distill`).

`__version__` is the installed package's version (pyproject.toml is its one source); run.json, each
role dataset's build record and each adapter's metadata record it, so an output names the code that
made it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trace-distill")
except PackageNotFoundError:  # a source tree on PYTHONPATH that was never pip-installed
    __version__ = "0+unknown"

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
