"""`python -m distill <command>`: generate traces, respond, build datasets, serve.

Each command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
this file only dispatches, importing a command's module when it is used so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "generate": ("distill.cli_generate", "run the pipeline over a dialogue split and write traces"),
    "respond": ("distill.cli_respond", "run the pipeline on one dialogue and print every stage"),
    "datasets": ("distill.sft_data", "turn a trace run into one SFT dataset per role"),
    "serve": ("distill.serve", "OpenAI-compatible server over the local backend and role adapters"),
    "batch": ("distill.batch_api", "generate traces through OpenAI's Batch API (submit / poll / collect)"),
}


def build_parser(prog: str = "python -m distill") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m distill") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        module = importlib.import_module(COMMANDS[argv[0]][0])
        parser = argparse.ArgumentParser(prog=f"{prog} {argv[0]}", description=COMMANDS[argv[0]][1])
        module.add_arguments(parser)
        return int(module.run(parser.parse_args(argv[1:])) or 0)
    build_parser(prog).parse_args(argv)  # prints help / usage error
    return 2


if __name__ == "__main__":
    sys.exit(main())
