"""The one reader of the project's YAML config files: a file to a mapping, or to a validated pydantic model.

Every config file (teacher, compare, curve, train, quality thresholds) is read here, so each reports bad input
the same way: one line that names the file and the key, e.g. `configs/eval/x.yaml: field 'systems.0.nme': Extra
inputs are not permitted`, and no traceback. It lives in data_prep, the lowest package, so that distill, train
and eval all import it; `eval.reference` reads the same models to write docs/reference/. The declared pipelines
(distill.roles.declared) and import mappings (distill.imports.mapping) are read here too.

A key given twice in one mapping is refused, at any depth: PyYAML would keep the last one silently, so a config
edited by appending a key would run with a setting its reader never sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class ConfigFileError(ValueError):
    """A config file that cannot be used as written; the message is one line naming the file and the key."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that gives one key twice; the message names the key and both lines."""


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a repeated key in any mapping, nested or flow-style alike."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            _refuse_repeats(self, node)
        return super().construct_mapping(node, deep=deep)


def _refuse_repeats(loader: yaml.SafeLoader, node: yaml.MappingNode) -> None:
    # Checked before SafeLoader flattens `<<: *anchor` merges, whose keys a mapping may override on purpose.
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: SafeLoader's own error names it
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            where = f"lines {first} and {line}" if first != line else f"both on line {line}"
            raise DuplicateKeyError(f"key '{key}' given twice ({where})")
        seen[key] = line


def read_mapping(path: str | Path, error: type[ValueError] = ConfigFileError) -> dict[str, Any]:
    """The YAML file at `path` as a mapping (an empty file is {}); `error` with one line when it is not one."""
    file = Path(path)
    if not file.is_file():
        raise error(f"{path}: no such config file")
    try:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except DuplicateKeyError as err:
        raise error(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        raise error(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping of key: value, got {type(data).__name__}")
    return data


def first_error(err: ValidationError, prefix: str = "") -> str:
    """A validation error in one line: `field '<prefix><key>': message`, or the message alone for a check of the
    whole model (whose message starts with the key it names)."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if where or prefix:
        return f"field '{prefix}{where}': {message}" if where else f"{prefix.rstrip('.')}: {message}"
    return message


def load_config(
    path: str | Path,
    model: type[Model],
    overrides: Optional[dict[str, Any]] = None,
    error: type[ValueError] = ConfigFileError,
) -> Model:
    """The YAML file at `path`, with `overrides` (a command's flags) on top, validated as `model`."""
    raw = read_mapping(path, error)
    try:
        return model.model_validate({**raw, **(overrides or {})})
    except ValidationError as err:
        raise error(f"{path}: {first_error(err)}") from None
