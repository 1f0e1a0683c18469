"""`__version__`: the installed package's version (pyproject.toml is its one source).

run.json, each role dataset's build record and each adapter's metadata record it, so an output names the code
that made it. Its own module, so that the modules that record it do not import the `distill` package, whose
public API imports them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trace-distill")
except PackageNotFoundError:  # a source tree on PYTHONPATH that was never pip-installed
    __version__ = "0+unknown"
