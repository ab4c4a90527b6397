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


def wrap(model: torch.nn.Module, d: Dist) -> torch.nn.Module:
    if not d.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    # device_ids=None: the module already sits on this rank's GPU and the trainer moves the batch itself,
    # so DDP leaves the inputs alone (the lengths stay on the CPU, where the model reads them without a sync).
    # Frozen parts (fine-tuning modes) have no gradient: tell DDP not to wait for them.
    return DDP(model, device_ids=None, find_unused_parameters=any(not p.requires_grad for p in model.parameters()))


def all_reduce_mean(value: float, d: Dist, device: str) -> float:
    if not d.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t) / d.world_size


def min_int(value: int, d: Dist, device: str) -> int:
    """The smallest of every rank's value."""
    if not d.enabled:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def same_on_all_ranks(value: float, d: Dist, device: str) -> bool:
    """Whether every rank holds the same number (e.g. a weight checksum: ranks that drifted apart)."""
    if not d.enabled:
        return True
    t = torch.tensor([value, -value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0]) == -float(t[1])


def any_flag(flag: bool, d: Dist, device: str) -> bool:
    """True on every rank if it is true on any (stop requests, OOM, NaN: all ranks must agree)."""
    return any_flags([flag], d, device)[0]


def any_flags(flags: list[bool], d: Dist, device: str) -> list[bool]:
    """any_flag for several flags in one all-reduce."""
    if not d.enabled:
        return list(flags)
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t)
    return [bool(v > 0) for v in t.tolist()]


def average_gradients(params: list[torch.nn.Parameter], d: Dist) -> None:
    """Mean of every gradient over the ranks, as one flat all-reduce. The trainer runs DDP's micro-batches
    under no_sync and calls this once per optimizer step, after the ranks agreed that none ran out of
    memory: giving up DDP's overlap of communication with the last backward costs one all-reduce of the
    gradients (~75 MB for `base`, about a millisecond on NVLink), against a hang on an OOM."""
    if not d.enabled:
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]  # same layout on every rank
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= d.world_size
    for p, g in zip(params, _unflatten_dense_tensors(flat, grads)):
        p.grad = g


def broadcast_parameters(module: torch.nn.Module, d: Dist) -> None:
    """Rank 0's weights and buffers on every rank (for training without the DDP wrapper, which does this)."""
    if not d.enabled:
        return
    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=0)


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def cleanup(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()
