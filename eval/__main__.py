"""`python -m eval <command>`: score responses from any source, or compare systems on one test split.

    python -m eval score --responses <file.csv|file.jsonl> --column <name> [...]
    python -m eval compare --config configs/eval/<name>.yaml --out <dir>

Each command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
this file only dispatches, importing a command's module when it is used so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "score": ("eval.score", "automatic metrics (Dist, EAD, I-ACC, BERTScore, PPL) for a CSV/JSONL of responses"),
    "compare": (
        "eval.compare",
        "run/read every system of a config on one test split and write report.json/.md + plots",
    ),
}


def main(argv: list[str] | None = None, prog: str = "python -m eval") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        module = importlib.import_module(COMMANDS[argv[0]][0])
        parser = argparse.ArgumentParser(prog=f"{prog} {argv[0]}", description=COMMANDS[argv[0]][1])
        module.add_arguments(parser)
        return int(module.run(parser.parse_args(argv[1:])) or 0)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    parser.parse_args(argv)  # prints help / usage error
    return 2


if __name__ == "__main__":
    sys.exit(main())
