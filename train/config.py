"""`TrainConfig`: every option of `python -m train`, and how YAML files and flags fill it.

A YAML config's keys are exactly the CLI flags (TRL style): `--config configs/train/asi.yaml` sets the
defaults, and any flag given on the command line overrides them. Unknown keys are an error that names
the file and the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from distill.roles import CORE_ROLES, ROLES


class ConfigError(ValueError):
    """A config file or flag is wrong; the message names the file and the field."""


@dataclass
class TrainConfig:
    """Per-role LoRA SFT on the student datasets built by `python -m distill datasets`."""

    model: str = field(
        default="smollm2-135m", metadata={"help": "Base model: alias (smollm2-135m), local dir or hub id."}
    )
    datasets: str = field(
        default="runs/datasets", metadata={"help": "Directory holding one saved DatasetDict per role (<dir>/<role>/)."}
    )
    roles: str = field(
        default="all",
        metadata={"help": "Comma-separated roles to train in turn (e.g. asi,cae) or 'all' (= asi,cae,srp,ers)."},
    )
    output_dir: str = field(default="runs/adapters", metadata={"help": "Adapters are written to <output_dir>/<role>/."})
    # LoRA
    r: int = field(default=16, metadata={"help": "LoRA rank."})
    alpha: int = field(default=32, metadata={"help": "LoRA alpha (scaling = alpha / r)."})
    dropout: float = field(
        default=0.0, metadata={"help": "LoRA dropout. 0 skips a copy of every LoRA input: 1.6x tokens/s on CPU here."}
    )
    target_modules: str = field(
        default="all-linear", metadata={"help": "'all-linear' or comma-separated module names (q_proj,v_proj)."}
    )
    load_in_4bit: bool = field(
        default=False, metadata={"help": "QLoRA: load the base in NF4 (bitsandbytes) with bf16 compute."}
    )
    # optimisation
    epochs: float = field(default=1.0, metadata={"help": "Number of epochs (ignored when max_steps > 0)."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many optimizer steps (-1: use epochs)."})
    max_tokens_budget: int = field(
        default=0, metadata={"help": "If > 0, cap max_steps so that roughly this many tokens are trained per role."}
    )
    learning_rate: float = field(default=2e-4, metadata={"help": "Peak learning rate."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule (transformers names)."})
    warmup_ratio: float = field(default=0.03, metadata={"help": "Fraction of steps used for linear warm-up."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    batch_size: int = field(default=8, metadata={"help": "Per-device train batch size."})
    grad_accum: int = field(default=1, metadata={"help": "Gradient accumulation steps."})
    max_length: int = field(
        default=512, metadata={"help": "Longest tokenized example; longer ones are truncated (keep start)."}
    )
    padding_free: bool = field(
        default=True,
        metadata={"help": "Flatten each batch into one sequence without padding (position_ids mark the boundaries)."},
    )
    packing: bool = field(
        default=False, metadata={"help": "Pack examples into max_length blocks (BFD; implies padding-free)."}
    )
    bf16: str = field(
        default="auto",
        metadata={
            "help": "bf16 mixed precision: auto (on where the hardware runs bf16 natively: recent GPUs, CPUs with "
            "AMX/AVX512-BF16), true or false."
        },
    )
    completion_head: str = field(
        default="auto",
        metadata={
            "help": "auto, true or false: run the LM head only on completion tokens (under autocast) instead of "
            "TRL's fp32 head over every position. Same loss; faster on CPU, slower than TRL's Triton head on a "
            "GPU (see the README's performance table), so auto = on for CPU training only."
        },
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Trade compute for memory; only worth it for big models on GPU."}
    )
    use_cpu: bool = field(
        default=False,
        metadata={"help": "Train on CPU even if an accelerator is present (needed for CPU DDP over gloo)."},
    )
    seed: int = field(default=42, metadata={"help": "Random seed (data order, LoRA init)."})
    # bookkeeping
    resume: bool = field(
        default=False,
        metadata={"help": "Resume each role from its last checkpoint in <output_dir>/<role>/checkpoints/."},
    )
    save_steps: int = field(
        default=0,
        metadata={"help": "Save a resumable checkpoint every N steps (0: four per role, so --resume always has one)."},
    )
    save_total_limit: int = field(default=2, metadata={"help": "Keep at most this many checkpoints per role."})
    logging_steps: int = field(default=5, metadata={"help": "Log loss every N steps."})
    eval: bool = field(default=False, metadata={"help": "Evaluate on the validation split at the end of each role."})
    report_to: str = field(default="none", metadata={"help": "'none', 'tensorboard', or any transformers integration."})
    run_name: str = field(
        default="",
        metadata={"help": "Run name for report_to; each role logs as <run_name>-<role> (default: output_dir's name)."},
    )
    push_to_hub: bool = field(
        default=False,
        metadata={"help": "Push each trained role adapter, with its model card, to the hub as <hub_model_id>-<role>."},
    )
    hub_model_id: str = field(
        default="", metadata={"help": "Repo prefix for --push_to_hub ('user/name'); also named in the model cards."}
    )
    hub_private_repo: bool = field(default=False, metadata={"help": "Create the hub repos as private."})
    num_threads: int = field(
        default=0,
        metadata={
            "help": "torch CPU threads per process (0: torch's default). Use 1 on a CPU shared with other jobs, "
            "where oversubscribed threads slow every step."
        },
    )
    dataloader_num_workers: int = field(default=0, metadata={"help": "Dataloader worker processes."})

    def role_list(self) -> list[str]:
        if self.roles.strip() == "all":
            return list(CORE_ROLES)
        names = [r.strip() for r in self.roles.split(",") if r.strip()]
        unknown = [r for r in names if r not in ROLES]
        if not names or unknown:
            raise ConfigError(f"roles: unknown role(s) {unknown or [self.roles]} (known: all, {', '.join(ROLES)})")
        return names

    def lora_targets(self) -> str | list[str]:
        if self.target_modules == "all-linear":
            return "all-linear"
        return [m.strip() for m in self.target_modules.split(",") if m.strip()]

    def device(self) -> str:
        """cpu or cuda: where this config trains."""
        import torch

        return "cpu" if self.use_cpu or not torch.cuda.is_available() else "cuda"

    def use_completion_head(self) -> bool:
        """Resolve `completion_head` (auto/true/false, or a YAML bool): auto is on for CPU training."""
        value = _tristate(self.completion_head, "completion_head")
        return self.device() == "cpu" if value is None else value

    def use_bf16(self) -> bool:
        """Resolve `bf16` (auto/true/false, or a YAML bool) against this machine."""
        value = _tristate(self.bf16, "bf16")
        if value is not None:
            return value
        import torch

        from distill.backends.local import resolve_dtype

        return resolve_dtype("auto", self.device()) == torch.bfloat16

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _tristate(value, name: str):
    """True/False for a bool or true/false string, None for auto; anything else is a ConfigError."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    if text == "auto":
        return None
    raise ConfigError(f"{name}: expected auto, true or false, got {value!r}")


def _known_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


def read_yaml(path: str | Path) -> dict:
    """Load a train YAML and check every key against `TrainConfig`; errors name the file and key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot read YAML ({type(err).__name__}: {err})".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of option: value, got {type(data).__name__}")
    known = _known_fields()
    for key in data:
        if key.replace("-", "_") not in known:
            raise ConfigError(f"{path}: unknown key '{key}' (see `python -m train --help` for the options)")
    return {key.replace("-", "_"): value for key, value in data.items()}


_TRISTATE = ("bf16", "completion_head")  # declared str, but YAML's true/false are welcome too
_AT_LEAST = {
    "r": 1, "alpha": 1, "batch_size": 1, "grad_accum": 1, "max_length": 8, "logging_steps": 1,
    "save_total_limit": 1, "max_steps": -1, "max_tokens_budget": 0, "save_steps": 0, "num_threads": 0,
    "dataloader_num_workers": 0, "weight_decay": 0, "warmup_ratio": 0, "dropout": 0,
}  # fmt: skip
_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def check_values(cfg: TrainConfig, source: str) -> None:
    """Types and ranges of every option, before any model is loaded; errors name the source and field."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")  # HfArgumentParser resolves
        wanted = _TYPES.get(type_name, ())
        wrong_bool = isinstance(value, bool) and bool not in wanted
        if f.name not in _TRISTATE and wanted and (wrong_bool or not isinstance(value, wanted)):
            raise ConfigError(f"{source}: field '{f.name}': expected {type_name}, got {value!r}")
        if f.name in _AT_LEAST and value < _AT_LEAST[f.name]:
            raise ConfigError(f"{source}: field '{f.name}': must be >= {_AT_LEAST[f.name]}, got {value!r}")
    if not cfg.model.strip():
        raise ConfigError(f"{source}: field 'model': empty")
    if cfg.max_steps <= 0 and cfg.epochs <= 0:
        raise ConfigError(f"{source}: field 'epochs': must be > 0 when max_steps is not set, got {cfg.epochs!r}")
    if not (cfg.learning_rate > 0 and cfg.dropout < 1 and cfg.warmup_ratio <= 1):
        raise ConfigError(f"{source}: learning_rate must be > 0, dropout < 1 and warmup_ratio <= 1")
    if cfg.push_to_hub and cfg.hub_model_id.count("/") != 1:
        raise ConfigError(f"{source}: field 'hub_model_id': --push_to_hub needs 'user/name', got {cfg.hub_model_id!r}")
    if cfg.load_in_4bit and importlib.util.find_spec("bitsandbytes") is None:
        hint = "pip install 'trace-distill[qlora]'"
        raise ConfigError(f"{source}: field 'load_in_4bit': QLoRA needs bitsandbytes ({hint})")
    from transformers import SchedulerType

    schedulers = [s.value for s in SchedulerType]
    if cfg.lr_scheduler_type not in schedulers:
        raise ConfigError(
            f"{source}: field 'lr_scheduler_type': unknown '{cfg.lr_scheduler_type}' (known: {', '.join(schedulers)})"
        )


def parse_config(argv: list[str], prog: str = "python -m train") -> TrainConfig:
    """`--config file.yaml` sets the defaults, flags override them (HfArgumentParser, TrlParser-style)."""
    argv = list(argv)
    parser = HfArgumentParser(
        TrainConfig,
        prog=prog,
        description=TrainConfig.__doc__,
        epilog="--config FILE.yaml sets defaults from a YAML file whose keys are these flags; "
        "flags on the command line override it. `python -m train export --help` for export.",
    )
    source = "command line"
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ConfigError("--config needs a YAML file path")
        parser.set_defaults(**read_yaml(argv[i + 1]))
        source = f"{argv[i + 1]} (or its command-line overrides)"
        del argv[i : i + 2]
    cfg, extra = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if extra:
        raise ConfigError(f"unknown arguments: {' '.join(extra)}")
    check_values(cfg, source)
    cfg.role_list()  # validate early, before any model is loaded
    cfg.use_bf16()
    cfg.use_completion_head()
    return cfg


def config_from_dict(values: dict, source: str = "<dict>") -> TrainConfig:
    """Build a config from a mapping (tests, benchmarks); unknown keys name `source`."""
    known = _known_fields()
    for key in values:
        if key not in known:
            raise ConfigError(f"{source}: unknown key '{key}'")
    cfg = TrainConfig(**values)
    check_values(cfg, source)
    cfg.role_list()
    cfg.use_bf16()
    cfg.use_completion_head()
    return cfg
