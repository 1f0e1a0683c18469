"""`trace-distill train` / `python -m train`: train per-role LoRA adapters, or export them.

    trace-distill train --config configs/train/smollm2-cpu.yaml [--roles asi,cae] [--max_steps 20]
    accelerate launch --config_file configs/accelerate/cpu-ddp.yaml --no_python trace-distill train \
        --config configs/train/smollm2-cpu.yaml    # several roles: each process trains its own (train.parallel)
    python -m train export --adapters runs/adapters --format merged|vllm --out runs/export

Training is the default command; `export` is the only subcommand.
"""

from __future__ import annotations

import sys

from data_prep.commands import USER_ERRORS, user_error
from distill.adapters.adapters import AdapterError
from train.config import ConfigError


def main(argv: list[str] | None = None, prog: str = "python -m train") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "export":
            from train import export

            return export.main(argv[1:], prog=f"{prog} export")
        from train.config_load import parse_config

        cfg = parse_config(argv, prog=prog)
        from train.parallel import train_this_ranks_roles, trains_roles_in_parallel

        if trains_roles_in_parallel(cfg):  # a launch of K processes and several roles: one role per process
            return train_this_ranks_roles(argv, cfg)
        from train.sft import train_roles

        train_roles(cfg)
        return 0
    except (ConfigError, AdapterError, *USER_ERRORS) as err:
        return user_error(prog, err)  # one line naming the file and field, never a traceback


if __name__ == "__main__":
    sys.exit(main())
