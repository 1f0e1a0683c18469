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
