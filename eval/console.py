"""The `trace-distill` console script: one entry point that dispatches to every package.

trace-distill data ...        == python -m data_prep ...
trace-distill distill ...     == python -m distill ...
trace-distill train ...       == python -m train ...  (multi-process: accelerate launch --no_python trace-distill train)
trace-distill eval ...        == python -m eval ...
trace-distill quickstart ...  the whole loop on the embedded default
trace-distill --version       the installed version

It lives in eval, the top floor, because it is the one module that loads every package.
"""

from __future__ import annotations

import importlib
import sys

TARGETS = {
    "data": "data_prep.__main__",
    "distill": "distill.__main__",
    "train": "train.__main__",
    "eval": "eval.__main__",
    "quickstart": "eval.quickstart",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        from distill.version import __version__

        print(f"trace-distill {__version__}")
        return 0
    if not argv or argv[0] not in TARGETS:
        print(__doc__.strip(), file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    module = importlib.import_module(TARGETS[argv[0]])
    return int(module.main(argv[1:], prog=f"trace-distill {argv[0]}") or 0)


if __name__ == "__main__":
    sys.exit(main())
