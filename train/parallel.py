"""Several roles in one multi-process launch: each process trains its own roles, alone.

    accelerate launch --config_file configs/accelerate/multi-gpu-ddp.yaml --num_processes 4 --no_python \\
        trace-distill train --config configs/train/qwen0.5b-gpu.yaml --roles all

Role adapters are independent jobs: data parallelism would sync every step of each role over all K processes,
one role after another. With more than one role, rank r of a K-process launch takes roles r, r+K, r+2K, ... of the
role list and trains them as a one-process run would (`python -m train --roles <its roles>`, in a child process
that sees no launch: no process group, no gradient sync, and on GPUs only the rank's own device). So up to K roles
train at once, and each adapter is the one a one-process run of that role makes. With one role (`--roles asi`),
the launch stays data parallel over all K processes, as before.

A child process, rather than this one, because the launch has already made this process one rank of K: the
Trainer would wrap the model for DDP, and on GPUs a single-process Trainer takes every visible device
(`nn.DataParallel`) unless the process is started seeing one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from train.config import TrainConfig

# What torchrun and accelerate set to make a process one rank of a launch; the child of a rank gets none of them.
LAUNCH_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED",
)  # fmt: skip


def world_size(environ: Mapping[str, str] = os.environ) -> int:
    return int(environ.get("WORLD_SIZE", "1") or 1)


def trains_roles_in_parallel(cfg: TrainConfig, environ: Mapping[str, str] = os.environ) -> bool:
    """A launch of several processes asked for several roles: one role per process, not data parallel."""
    return world_size(environ) > 1 and len(cfg.role_list()) > 1


def roles_of_rank(roles: list[str], rank: int, world: int) -> list[str]:
    """Rank r's roles: r, r+K, ... (the first K roles start at once; none is trained twice or left out)."""
    return roles[rank::world]


def child_environment(cfg: TrainConfig, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """This rank's environment without the launch, and on a GPU seeing only the rank's own device."""
    env = {k: v for k, v in environ.items() if k not in LAUNCH_VARIABLES and not k.startswith("TORCHELASTIC_")}
    if cfg.device() == "cuda":
        import torch

        visible = environ.get("CUDA_VISIBLE_DEVICES")
        devices = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
        env["CUDA_VISIBLE_DEVICES"] = devices[int(environ.get("LOCAL_RANK", "0")) % len(devices)]
    return env


def train_this_ranks_roles(argv: list[str], cfg: TrainConfig, environ: Mapping[str, str] = os.environ) -> int:
    """Train this rank's roles in a one-process run; returns its exit status (0 when the rank has none)."""
    import torch

    from train.preflight import check_launch

    check_launch(cfg, environ)
    rank, world, roles = int(environ.get("RANK", "0")), world_size(environ), cfg.role_list()
    mine = roles_of_rank(roles, rank, world)
    print(
        f"[train] rank {rank} of {world}: {', '.join(mine) or 'no role left'} "
        f"({len(roles)} roles over {world} processes, each trained alone: no gradient sync)",
        flush=True,
    )
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # the launch's group: nothing is synced over it from here
    if not mine:
        return 0
    command = [sys.executable, "-m", "train", *argv, "--roles", ",".join(mine)]
    return subprocess.run(command, env=child_environment(cfg, environ), check=False).returncode
