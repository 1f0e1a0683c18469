"""One rank of the FSDP2 save check (tests/test_adapter_save.py runs two under torchrun, gloo, CPU).

accelerate sets FSDP up only for accelerator devices, so this drives FSDP2 (`fully_shard`) itself, the
way accelerate does on GPUs: every decoder layer and the root sharded across the ranks, a training step,
then the save Trainer.save_model makes under FSDP2 with a full state dict (accelerate's get_state_dict:
`get_model_state_dict` with full_state_dict, broadcast_from_rank0 and cpu_offload, then PEFT's
save_pretrained on rank 0), checked by train.adapter_save against the fingerprint taken before it.

Usage: torchrun --nproc_per_node 2 tests/fsdp2_save_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tests.test_adapter_save import tiny_peft_model
from train.adapter_save import check_fingerprint, lora_fingerprint


def sharded_save(model, out: Path, fingerprint: dict) -> str:
    """What a save without the full state dict does: rank 0's shards only, which the check must refuse."""
    from train.adapter_save import AdapterSaveError

    local = {n: p.to_local() if hasattr(p, "to_local") else p for n, p in model.state_dict().items()}
    model.save_pretrained(str(out / "sharded"), state_dict=local)
    try:
        check_fingerprint(out / "sharded", fingerprint)
    except AdapterSaveError:
        return "refused: the shard is not the trained weights"
    return "accepted"


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = tiny_peft_model()  # the same seed on every rank, as from_pretrained gives
    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = [p for n, p in model.named_parameters() if "lora_" in n and hasattr(p, "full_tensor")]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    torch.manual_seed(rank)  # each rank its own batch, as a data-parallel sampler gives
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    fingerprint = lora_fingerprint(model)  # a collective: every rank takes part
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, cpu_offload=True)
    )
    if rank == 0:
        model.save_pretrained(str(out), state_dict=state)
        check_fingerprint(out, fingerprint)
        record = {
            "fingerprint": fingerprint,
            "dtensors": len(sharded),
            "sharded_save": sharded_save(model, out, fingerprint),
        }
        (out / "fsdp2.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
