"""docs/reference/: every key of every config file and every flag of every command, written from the code.

The config keys come from the pydantic models the one config loader (`data_prep.config_file`) validates
against, and the local backend's signature; the flags from each command's own argparse parser (the tables in
`data_prep`, `distill` and `eval`'s `__main__`, train's parser, the quickstart). A key or command added later
is on the page at the next `python -m eval.reference write`; `--check`, and tests/test_reference.py, fail
while the page differs from the code or while a key or flag has no description. It is a maintainer's command, not
one of `python -m eval`'s: it reads the quickstart's parser, and the quickstart runs `python -m eval`'s commands.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from data_prep.commands import not_a_directory, user_error

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = "required"  # an Entry's default for a key or flag that must be given
REFERENCE = ROOT / "docs" / "reference"
HEADER = (
    "Written by `python -m eval.reference write` from the code ({source}); do not edit it by hand: "
    "`tests/test_reference.py` fails while it differs from what the code writes, or while a key or flag "
    "has no description."
)


@dataclass
class Entry:
    """One key or flag: its name, what it takes, its default (None: required or no value) and what it does."""

    name: str
    kind: str
    default: str | None
    text: str

    def line(self) -> str:
        kind = f" ({self.kind})" if self.kind else ""
        default = "" if self.default is None else f", default `{self.default}`"
        default = ", required" if self.default is REQUIRED else default
        return f"- `{self.name}`{kind}{default}: {' '.join(self.text.split())}"


def value_text(value: Any) -> str:
    """A default as YAML writes it; a path inside the repository relative to it, so the page is the same anywhere."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, Path)):
        text = str(value)
        return text[len(str(ROOT)) + 1 :] if text.startswith(f"{ROOT}/") else text
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json"))
    return json.dumps(value)


def type_text(annotation: Any) -> str:
    """A type as a reader of YAML needs it: `int`, `list[int]`, `"a" | "b"`, `mapping` (a section of its own)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin in (list, tuple, set):
        return f"list[{type_text(args[0])}]" if args else "list"
    if origin is dict:
        return f"mapping[{type_text(args[0])}, {type_text(args[1])}]" if args else "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation)).replace("Any", "any")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_list(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin is list or any(_is_list(a) for a in typing.get_args(annotation) if origin is not dict)


def field_entry(name: str, info: FieldInfo) -> Entry:
    default = REQUIRED if info.is_required() else value_text(info.get_default(call_default_factory=True))
    return Entry(name, type_text(info.annotation), default, info.description or "")


def model_sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, list[Entry]]]:
    """`(path, entries)` for `model` and, after it, each mapping nested in it (`systems[]`, `judge`, ...)."""
    yield path, [field_entry(name, info) for name, info in model.model_fields.items()]
    for name, info in model.model_fields.items():
        for nested in _models_in(info.annotation):
            yield from model_sections(nested, f"{path}.{name}{'[]' if _is_list(info.annotation) else ''}".lstrip("."))


def signature_entries(function: Callable) -> list[Entry]:
    """The keyword options of `function` (the local backend's), each described by its `Annotated` Field."""
    hints = typing.get_type_hints(function, include_extras=True)
    entries = []
    for name, parameter in inspect.signature(function).parameters.items():
        if name == "self":
            continue
        info = next((m for m in typing.get_args(hints[name])[1:] if isinstance(m, FieldInfo)), None)
        entries.append(
            Entry(name, type_text(hints[name]), value_text(parameter.default), info.description if info else "")
        )
    return entries


# --- commands --------------------------------------------------------------------------------------------


def _action_kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "switch"
    if action.choices:
        return " | ".join(str(c) for c in action.choices)
    kind = {int: "int", float: "float"}.get(action.type, "text")
    kind = action.metavar or ("bool" if "bool" in getattr(action.type, "__name__", "") else kind)
    return f"list of {kind}" if action.nargs in ("+", "*") else kind


def action_entry(parser: argparse.ArgumentParser, action: argparse.Action) -> Entry:
    """One argument of a parser: its flags, what it takes, its default and its help (with %(default)s filled)."""
    name = ", ".join(action.option_strings) or action.dest
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    text = re.sub(r"\s*\(default: [^()]*\)\.?$", "", text.strip())  # transformers' parser appends the default
    shown = action.default not in (None, argparse.SUPPRESS) and action.nargs != 0
    default = REQUIRED if action.required else value_text(action.default) if shown else None
    return Entry(name, _action_kind(action), default, text)


def parser_sections(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, str, list[Entry]]]:
    """`(prog, description, entries)` for a parser and each of its subcommands (`distill batch submit`)."""
    entries, subcommands = [], []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            subcommands += [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
        elif action.help != argparse.SUPPRESS and action.dest != "help":
            entries.append(action_entry(parser, action))
    if entries or not subcommands:
        yield prog, parser.description or "", entries
    for name, sub, text in subcommands:
        for sub_prog, description, sub_entries in parser_sections(sub, f"{prog} {name}"):
            yield sub_prog, description or text, sub_entries


def command_parser(module_name: str, prog: str, description: str) -> argparse.ArgumentParser:
    """The parser `data_prep.commands.run_command` builds for a command module."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    importlib.import_module(module_name).add_arguments(parser)
    return parser


def package_commands() -> Iterator[argparse.ArgumentParser]:
    """Every `python -m <package> <command>`, in each package's own table, then train's and the quickstart."""
    for package in ("data_prep", "distill", "eval"):
        for name, (module_name, help_text) in importlib.import_module(f"{package}.__main__").COMMANDS.items():
            yield command_parser(module_name, f"python -m {package} {name}", help_text)
    yield command_parser("train.export", "python -m train export", "merge role adapters into full models, or "
                         "write a vLLM multi-LoRA folder")  # fmt: skip
    yield command_parser("eval.quickstart", "trace-distill quickstart", "the whole loop on the shipped sample")


def train_entries(as_keys: bool = False) -> tuple[list[Entry], list[Entry]]:
    """`trace-distill train`'s own options, and TRL's options whose default trace-distill sets (the rest are TRL's
    as they are: too many to list here, and `trace-distill train --help` prints them). `as_keys`: named as a YAML
    key (`dataset_name`), else as flags."""
    from train.config import DistillArguments
    from train.config_load import _our_defaults, make_parser

    parser = make_parser()
    by_dest: dict[str, argparse.Action] = {}
    for action in parser._actions:  # a bool's --no_<name> comes after --<name>: keep the first
        by_dest.setdefault(action.dest, action)
    ours = [action_entry(parser, by_dest[f.name]) for f in fields(DistillArguments)]
    defaults = _our_defaults()
    changed = []
    for dest in defaults:
        entry = action_entry(parser, by_dest[dest])
        entry.default = MACHINE_DEFAULTS.get(dest, value_text(defaults[dest]))
        entry.text = entry.text.split(". ")[0].rstrip(".") + "."  # TRL's help, first sentence
        changed.append(entry)
    if as_keys:
        for entry in ours + changed:
            entry.name = entry.name.split(",")[0].removeprefix("--")
    return ours, changed


MACHINE_DEFAULTS = {"use_cpu": "true where torch finds no CUDA GPU"}  # a default that depends on the machine


# --- the pages -------------------------------------------------------------------------------------------


def _section(title: str, entries: list[Entry], intro: str = "") -> list[str]:
    return [f"### {title}", "", *([intro, ""] if intro else []), *(e.line() for e in entries), ""]


def _model_block(model: type[BaseModel], root: str, intro: str) -> list[str]:
    lines = [intro, ""]
    for path, entries in model_sections(model, root):
        lines += _section(f"`{path}`" if path else "top level", entries)
    return lines


def _teacher_lines() -> list[str]:
    from distill.backends.local import LocalBackend
    from distill.backends.openai_backend import OpenAIBackendConfig
    from distill.pipeline.config import PipelineConfig

    return [
        "## Teacher",
        "",
        "`configs/teacher/*.yaml`, read by `distill generate --config`. "
        "Two top-level keys: `backend` (what answers: `type: local` or `type: openai`) and `pipeline` (what runs). "
        "A compare or curve system's `backend:` and `pipeline:` take the same keys.",
        "",
        *_section(
            "`backend` with `type: local` (transformers, in this process)", signature_entries(LocalBackend.__init__)
        ),
        *_section(
            "`backend` with `type: openai` (any OpenAI-compatible server: OpenAI, vLLM, Ollama, llama.cpp)",
            [field_entry(n, i) for n, i in OpenAIBackendConfig.model_fields.items()],
        ),
        *_model_block(PipelineConfig, "pipeline", "The `pipeline:` keys (`distill generate`'s switches set the same):"),
    ]


def _eval_lines() -> list[str]:
    from distill.quality.thresholds import QualityThresholds
    from eval.compare.systems import CompareConfig
    from eval.curve.config import CurveConfig

    return [
        "## Quality thresholds",
        "",
        *_model_block(
            QualityThresholds,
            "",
            "`distill inspect --thresholds FILE`: each named check's limits "
            "(`docs/quality.md`); unset keys keep these.",
        ),
        "## Compare",
        "",
        *_model_block(
            CompareConfig,
            "",
            "`configs/eval/*.yaml`, read by `eval compare --config`: systems scored "
            "on one test split with the same metrics.",
        ),
        "## Learning curve",
        "",
        *_model_block(
            CurveConfig,
            "",
            "`configs/eval/curve*.yaml`, read by `eval curve --config`: students "
            "trained at each point and scored through `eval compare`.",
        ),
    ]


def _training_lines() -> list[str]:
    from train.config_load import RENAMED, TRL_SCRIPT_KEYS

    ours, changed = train_entries(as_keys=True)
    script_keys = [Entry(k, "", value_text(v), why) for k, (v, why) in TRL_SCRIPT_KEYS.items()]
    return [
        "## Training",
        "",
        "`configs/train/*.yaml`, read by `trace-distill train --config`. "
        "The keys are the flags, by TRL's names: `SFTConfig` and `ModelConfig` (transformers' `TrainingArguments` "
        "among them), plus trace-distill's own. Flags on the command line override the file; `env:` sets "
        "environment variables. TRL's options not listed here keep TRL's defaults: `trace-distill train --help` "
        "lists every one.",
        "",
        *_section("trace-distill's options", ours),
        *_section("TRL options whose default trace-distill sets", changed),
        *_section(
            "TRL's script keys",
            script_keys,
            "Accepted only at the value that means what trace-distill does; any other is refused by name.",
        ),
        "Old trace-distill names, refused with TRL's name in the message: "
        + ", ".join(f"`{old}` → `{new}`" for old, new in RENAMED.items())
        + ".",
    ]


def config_page() -> str:
    lines = [
        "# Config file reference",
        "",
        HEADER.format(source="the pydantic models and the local backend's signature"),
        "",
        "Every file is YAML read by one loader (`data_prep/config_file.py`): an unknown key or a bad value stops the "
        "command with one line naming the file and the key, before anything is written. Each line is `key` (type), "
        "its default, and what it does; "
        "`required` where there is no default.",
        "",
        *_teacher_lines(),
        *_eval_lines(),
        *_training_lines(),
    ]
    return "\n".join(lines) + "\n"


def commands_page() -> str:
    lines = [
        "# Command reference",
        "",
        HEADER.format(source="each command's argparse parser"),
        "",
        "`trace-distill data|distill|train|eval …` is `python -m data_prep|distill|train|eval …`; "
        "`trace-distill --version` prints the version. Bad input stops a command with one line, "
        "`<command>: error: <what, naming the file, row or key>`, and exit status 2.",
        "",
    ]
    for parser in package_commands():
        for prog, description, entries in parser_sections(parser, parser.prog):
            lines += [f"## `{prog}`", "", " ".join(description.split()) + ".", "", *(e.line() for e in entries), ""]
    ours, _ = train_entries()
    lines += [
        "## `trace-distill train`",
        "",
        "Per-role LoRA SFT (also `accelerate launch … --no_python trace-distill train`). Its flags are the keys of "
        "a train config, listed with their defaults in [the config reference](config-files.md#training); "
        "`--config FILE.yaml` reads one. trace-distill's own:",
        "",
        *(e.line() for e in ours),
        "",
    ]
    return "\n".join(lines)


PAGES: dict[str, Callable[[], str]] = {"config-files.md": config_page, "commands.md": commands_page}


class PageError(ValueError):
    """A reference folder or page that cannot be read or written; the message names it."""


def stale_pages(folder: Path | None = None) -> list[str]:
    """The pages in `folder` (docs/reference/) that differ from what the code writes now."""
    folder = folder or REFERENCE
    return [name for name, page in PAGES.items() if _page_text(folder / name) != page()]


def _page_text(path: Path) -> str | None:
    """A page as written (None where there is none); one that is not UTF-8 was not written by this module."""
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PageError(f"{path}: not UTF-8 (byte {err.object[err.start]:#04x} at offset {err.start})") from None


def undescribed() -> list[str]:
    """Keys and flags of ours with no description: each must say what it does."""
    from distill.backends.local import LocalBackend
    from distill.backends.openai_backend import OpenAIBackendConfig
    from distill.pipeline.config import PipelineConfig
    from distill.quality.thresholds import QualityThresholds
    from eval.compare.systems import CompareConfig
    from eval.curve.config import CurveConfig

    missing = [f"backend (local).{e.name}" for e in signature_entries(LocalBackend.__init__) if not e.text]
    models = {"backend (openai)": OpenAIBackendConfig, "pipeline": PipelineConfig, "thresholds": QualityThresholds,
              "compare": CompareConfig, "curve": CurveConfig}  # fmt: skip
    for root, model in models.items():
        for path, entries in model_sections(model, root):
            missing += [f"{path}.{e.name}" for e in entries if not e.text.strip()]
    for parser in package_commands():
        for prog, _, entries in parser_sections(parser, parser.prog):
            missing += [f"{prog} {e.name}" for e in entries if not e.text.strip()]
    missing += [f"trace-distill train {e.name}" for e in train_entries()[0] if not e.text.strip()]
    return missing


def main(argv: list[str] | None = None) -> int:
    """`python -m eval.reference write [--check]`: rewrite docs/reference/, or exit 1 when it differs from the code."""
    parser = argparse.ArgumentParser(prog="python -m eval.reference", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("write",), help="write the reference pages from the code")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    try:
        return _run(args.check)
    except (PageError, OSError) as err:  # bad input: one line, exit 2, as every command reports it
        return user_error(parser.prog, err)


def _run(check: bool) -> int:
    missing = undescribed()
    if missing:
        print(f"no description: {', '.join(missing)}")
        return 1
    why = not_a_directory(REFERENCE)
    if why:
        raise PageError(f"{REFERENCE}: {why}, not the folder the reference pages are written into")
    if check:
        stale = stale_pages()
        print("\n".join(f"{REFERENCE / name} differs from the code" for name in stale) or "the reference is current")
        return 1 if stale else 0
    pages = {name: page() for name, page in PAGES.items()}  # every page made before any is written
    REFERENCE.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (REFERENCE / name).write_text(text, encoding="utf-8")
        print(f"wrote {REFERENCE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
