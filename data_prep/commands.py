"""The command dispatcher behind `python -m <package> <command>` and `trace-distill <command>`.

A command is a module with ``add_arguments(parser)`` and ``run(args) -> int``, imported only when it
is used so that `--help` stays fast. Errors that mean bad input (`USER_ERRORS`, plus any a command
module lists in its own ``USER_ERRORS``) print one line and exit 2, never a traceback: `user_error` is
that one rule, and the commands raise rather than print.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from data_prep.ed_formats import DataError
from data_prep.models import ModelNotAvailable

USER_ERRORS: tuple[type[Exception], ...] = (DataError, ModelNotAvailable)
Commands = Mapping[str, tuple[str, str]]  # name -> (module, one-line help)


def not_a_directory(path: str | Path) -> str | None:
    """Why `path` cannot be an output directory (it, or a folder above it, is a file), else None.

    Commands check it before any model loads, so the error comes first and nothing is written."""
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            if folder.is_dir():
                return None
            return "it is a file" if folder == Path(path) else f"{folder} is a file"
    return None


def user_error(prog: str, err: BaseException) -> int:
    """Bad input, reported the one way every command reports it: `<prog>: error: <message>`, exit 2."""
    print(f"{prog}: error: {err}", file=sys.stderr)
    return 2


def run_command(module_name: str, argv: list[str], prog: str, help_text: str) -> int:
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=prog, description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return int(module.run(args) or 0)
    except USER_ERRORS + tuple(getattr(module, "USER_ERRORS", ())) as err:
        return user_error(prog, err)


def dispatch(commands: Commands, argv: list[str] | None, prog: str, description: str) -> int:
    """Run ``argv[0]``'s command with the rest; with no known command, print usage (exit 2) or help (0)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in commands:
        module_name, help_text = commands[argv[0]]
        return run_command(module_name, argv[1:], f"{prog} {argv[0]}", help_text)
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in commands.items():
        sub.add_parser(name, help=help_text)
    parser.parse_args(argv)  # prints help (exit 0) or a usage error (exit 2)
    return 2


def package_main(commands: Commands, prog: str, doc: str) -> Callable[..., int]:
    """A package's `main(argv, prog)`: `python -m <package> <command>` and the console script both call it."""

    def main(argv: list[str] | None = None, prog: str = prog) -> int:
        return dispatch(commands, argv, prog, doc.splitlines()[0])

    return main
