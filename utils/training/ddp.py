"""DistributedDataParallel setup: torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; one process per GPU
(nccl), or gloo on CPUs (how the tests run two processes). Only rank 0 writes files."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(device: str) -> Dist:
    """Join the process group when launched by torchrun; a plain run is world size 1."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Dist()
    d = Dist(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ["WORLD_SIZE"]))
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(d.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return d


def wrap(model: torch.nn.Module, d: Dist, device: str) -> torch.nn.Module:
    if not d.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [d.local_rank] if device == "cuda" else None
    # frozen parts (fine-tuning modes) have no gradient: tell DDP not to wait for them
    return DDP(model, device_ids=ids, find_unused_parameters=any(not p.requires_grad for p in model.parameters()))


def all_reduce_mean(value: float, d: Dist, device: str) -> float:
    if not d.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t) / d.world_size


def any_flag(flag: bool, d: Dist, device: str) -> bool:
    """True on every rank if it is true on any (stop requests, OOM, NaN: all ranks must agree)."""
    if not d.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t)
    return bool(t.item() > 0)


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def cleanup(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()
