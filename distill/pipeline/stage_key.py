"""The reuse rule for every stage a recipe runs (dialogues, index, traces, datasets, adapters, generated systems,
reports, curve points): a stage's key is a hash of everything it reads, and the stage is reused exactly when its
key is unchanged.

A key is one short hash per named input (`stage_key`): the resolved options, the content of its input folders
(`content_fingerprint`), the rendered prompts (`prompt_fingerprint`: a prompt edited without a version bump
changes it), the base model's weights and the dtype they run in (`model_fingerprint`), and the paths it names
where they are, not as spelled (`placed`: inside the run folder relative to it, so a run moved, or named by a
relative `--out` where it was made with an absolute one, keeps every key). Keeping one hash per input
lets a rerun say which input changed, in one line (`regenerating <what>: its <input> changed`). The key is stored
beside the stage's output (`stage-key.json`), written only after the stage finished, so a killed stage is never
taken for a finished one (a generated system's when it starts: its trace store resumes it per dialogue). A folder
made before keys were recorded is either migrated, when the check it was made under still passes (its key is
written then), or computed again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from distill.roles.roles import RoleSpec

KEY_FILE = "stage-key.json"
# Files a folder's content fingerprint leaves out: its own key, and what a reader of the stage never reads.
_NOT_CONTENT = {KEY_FILE, KEY_FILE + ".tmp", ".DS_Store"}
_file_hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: a file is hashed once


def digest(value: Any) -> str:
    """A short, stable hash of a JSON-able value (dict keys sorted; anything else by its str)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def stage_key(inputs: Mapping[str, Any]) -> dict[str, str]:
    """One hash per named input, in the order given (the order the change line names them in)."""
    return {name: digest(value) for name, value in inputs.items()}


def changed_input(
    stored: Optional[Mapping[str, str]], now: Mapping[str, str], details: Optional[Mapping[str, Callable]] = None
) -> Optional[str]:
    """Which input differs between a stored key and today's, in a few words (`details[name]()`, where given and
    not None, says how it changed); None when they are the same."""
    if stored is None:
        return "no stage key recorded (made by an earlier version)"
    for name in [*now, *(n for n in stored if n not in now)]:
        if stored.get(name) == now.get(name):
            continue
        if detail := (details or {}).get(name, lambda: None)():
            return detail
        if name not in stored:
            return f"its {name} is new (not in the stored key)"
        return f"its {name} is no longer read" if name not in now else f"its {name} changed"
    return None


def read_key(folder: Path) -> Optional[dict[str, str]]:
    """The key stored in `folder`, None when there is none (or it is unreadable: then it counts as absent)."""
    try:
        data = json.loads((Path(folder) / KEY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_key(folder: Path, inputs: Mapping[str, Any]) -> None:
    """Record `inputs`' key in `folder`, atomically: a key is either absent or whole."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (KEY_FILE + ".tmp")
    tmp.write_text(json.dumps(stage_key(inputs), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / KEY_FILE)


def stale(
    folder: Path,
    inputs: Mapping[str, Any],
    migrate: Optional[Callable[[], Optional[str]]] = None,
    details: Optional[Mapping[str, Callable]] = None,
) -> Optional[str]:
    """Why the stage stored in `folder` must be computed again from `inputs`, None when it is reused as it is.

    A folder without a key whose older check still passes (`migrate()` returns None) gets today's key: made
    before keys, from the same inputs as far as its own record tells."""
    stored = read_key(folder)
    if stored is None and migrate is not None and Path(folder).exists():
        why = migrate()
        if why is not None:
            return why
        write_key(folder, inputs)
        return None
    return changed_input(stored, stage_key(inputs), details)


# The fields of a config or a run record whose strings name files or folders: a key holds where they are
# (`located`), never how they were spelled. A mapping under `adapters` names one folder per role.
PATH_FIELDS = frozenset(
    ("adapters", "data", "dialogues", "index", "mapping", "model", "model_name_or_path", "oracle_traces",
     "paper_reference", "pipeline", "reuse_from", "traces")
)  # fmt: skip
_REPO = Path(__file__).resolve().parents[2]


def located(path: str, root: Optional[Path | str] = None) -> str:
    """Where `path` is, as a key holds it: resolved, then relative to the run folder `root` when inside it (a run
    moved or named another way keeps its keys), else to the repository when inside it (a checkout's configs), else
    absolute. A string that names nothing on disk (a model alias, a shipped table's name) is kept as written."""
    where = Path(path)
    if not where.exists():
        return path
    where = where.resolve()
    if root is not None and where.is_relative_to(base := Path(root).resolve()):
        return "<run>/" + where.relative_to(base).as_posix()
    return where.relative_to(_REPO).as_posix() if where.is_relative_to(_REPO) else where.as_posix()


def placed(value: Any, root: Optional[Path | str] = None) -> Any:
    """`value` (a config or record as JSON) with the string of every path field (`PATH_FIELDS`) `located`."""
    if isinstance(value, list):
        return [placed(v, root) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for name, item in value.items():
        if name in PATH_FIELDS and isinstance(item, str):
            out[name] = located(item, root)
        elif name == "adapters" and isinstance(item, dict):
            out[name] = {k: located(v, root) if isinstance(v, str) else placed(v, root) for k, v in item.items()}
        else:
            out[name] = placed(item, root)
    return out


def regenerating(what: str, why: str) -> None:
    """The one line a recomputed stage prints."""
    print(f"regenerating {what}: {why}", flush=True)


# --- what the inputs hold ------------------------------------------------------------------------------


def content_fingerprint(path: Path | str, suffixes: Optional[tuple[str, ...]] = None) -> Optional[str]:
    """The hash of a file's or a folder's content (every file's relative name and bytes, links followed; only
    names ending in `suffixes` when given); None when nothing is there. Each file is hashed once per process
    while its size and time stay the same."""
    path = Path(path)
    if path.is_file():
        return file_sha256(path)[:16]
    if not path.is_dir():
        return None
    parts = []
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        if file.name in _NOT_CONTENT or (suffixes and not file.name.endswith(suffixes)):
            continue
        parts.append((file.relative_to(path).as_posix(), file_sha256(file)))
    return digest(parts)


def file_sha256(file: Path | str) -> str:
    """The sha256 of a file's bytes, read in 1 MB blocks; hashed once per process while its size and time stay."""
    file = Path(file)
    st = file.stat()
    cache_key = (str(file.resolve()), st.st_size, st.st_mtime_ns)
    if cache_key not in _file_hashes:
        sha = hashlib.sha256()
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
        _file_hashes[cache_key] = sha.hexdigest()
    return _file_hashes[cache_key]


_WEIGHTS = (".safetensors", ".bin", ".gguf", ".json", ".model", ".txt")  # weights, config, tokenizer


def model_fingerprint(backend: Mapping[str, Any]) -> dict[str, Optional[str]]:
    """What a local backend's base model is: the content of its weights (the embedded model's shipped file, not
    its converted cache, so nothing is converted to ask) and the dtype `dtype: auto` resolves to on this machine.
    A backend that is not local (an API) is named by its model alone."""
    from data_prep import models

    name = str(backend.get("model", "smollm2-135m"))
    if backend.get("type", "local") != "local":
        return {"model": name}
    alias = name.strip().lower()
    try:
        if alias == models.SMOLLM2_ALIAS:
            source = models.smollm2_gguf()
        elif alias == models.MINILM_ALIAS:
            source = models.minilm_dir()
        else:
            source = Path(models.resolve_model(name))
    except (models.ModelNotAvailable, OSError):
        return {"model": name}  # the stage that loads it says why it cannot, in its own line
    try:
        dtype = str(models.resolve_dtype(str(backend.get("dtype", "auto")), str(backend.get("device", "cpu"))))
    except Exception:  # an unknown dtype, or a GPU this machine lacks: the stage that runs it says so
        dtype = str(backend.get("dtype", "auto"))
    return {"model": name, "weights": content_fingerprint(source, _WEIGHTS), "dtype": dtype}


def index_fingerprint(index) -> Optional[str]:
    """What an exemplar index holds (its vectors and entries), None for no index."""
    if index is None:
        return None
    return digest([hashlib.sha256(index.vectors.tobytes()).hexdigest(), [vars(e) for e in index.entries]])


def generation_inputs(pipeline_config, backend: Mapping[str, Any], adapters: Mapping[str, Any], index) -> dict:
    """What a generated trace run's traces are computed from, besides its dialogues and how its config is written
    (`distill generate`'s and a compare's generated systems alike): the pipeline settings, the prompt version and
    the rendered prompts of its style, what its adapters hold, its base model (weights and dtype) and its index."""
    from distill.roles.roles import prompt_version

    style = pipeline_config.prompt_style
    declared = pipeline_config.pipeline is not None  # its roles' prompts; TRACE's keys hold every built-in role's
    return {
        "pipeline settings": pipeline_config.key_dict(),
        "prompt version": prompt_version(style),
        "prompts": prompt_fingerprint(style, _declared_prompts(pipeline_config) if declared else None),
        "adapters": dict(adapters),
        "base model": model_fingerprint(backend),
        "index": index_fingerprint(index),
    }


def _declared_prompts(pipeline_config) -> list[RoleSpec]:
    """The roles whose prompts key a declared pipeline's run: its stages, then the audit where reflection runs it
    (a run without reflection keeps the key it had before the audit was a declared option)."""
    roles = pipeline_config.roles
    after = [name for name, spec in roles.items() if not spec.stage and pipeline_config.runs(name)]
    return [roles[name] for name in (*pipeline_config.stages(), *after)]


def prompt_fingerprint(style: str, roles: Optional[Sequence[RoleSpec]] = None) -> str:
    """The hash of what the `style` renderer of each of `roles` (default: every built-in role) writes for one fixed
    input (a dialogue, an answer from each upstream role, an exemplar): prompt text edited without a
    `PROMPT_VERSION` bump changes it. Only the roles given: another pipeline's roles must not change a stage's key."""
    from data_prep.dialogues import Dialogue, Turn
    from data_prep.retrieval import Exemplar
    from distill.roles.roles import ROLES, RoleInput, prompt_version

    dialogue = Dialogue(
        id="probe#1",
        conv_id="probe",
        turns=[Turn(speaker="seeker", text="My dog ran away last night.")],
        situation="I lost my dog.",
        emotion="sadness",
        gold_response="Oh no, I hope you find him.",
    )
    exemplar = Exemplar(
        dialogue_id="ex#1", conv_id="ex", emotion="joy", situation="I passed.", response="Well done!", score=0.9,
        search="precise",
    )  # fmt: skip
    rendered: dict[str, Any] = {"version": prompt_version(style)}
    for spec in roles if roles is not None else ROLES.values():
        upstream = {r: _probe_answer(spec.input_spec(r).schema) for r in spec.inputs}
        inp = RoleInput(dialogue=dialogue, upstream=upstream, exemplars=[exemplar] if spec.uses_exemplars else None)
        rendered[spec.name] = spec.render(inp, style)
    return digest(rendered)


def _probe_answer(schema) -> Any:
    """An answer of `schema`, each field a placeholder of its type (a label: the first one; text: its name)."""
    from typing import Literal, get_args, get_origin

    def placeholder(name: str, annotation: Any) -> Any:
        if annotation is bool:
            return True
        if get_origin(annotation) is Literal:
            return get_args(annotation)[0]
        if get_origin(annotation) is list:
            return [f"<{name}>"]
        return f"<{name}>"

    return schema.model_construct(**{f: placeholder(f, info.annotation) for f, info in schema.model_fields.items()})
