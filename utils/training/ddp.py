"""Data parallelism under torchrun, without the DDP wrapper (the loop averages gradients itself, see
`average_gradients`): torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; one process per GPU (nccl), or gloo on
CPUs (how the tests run two processes). Only rank 0 writes files."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


COLLECTIVE_TIMEOUT = timedelta(minutes=45)  # how long ranks wait for each other before giving up on a run


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
        # rank 0 alone evaluates and saves while the others wait in a collective: an F5 evaluation (recognizer
        # loaded from disk, WORLD MCD) and a 7 GB save can outlast NCCL's 10-minute default and kill a healthy run
        extra = {"device_id": torch.device("cuda", d.local_rank)} if device == "cuda" else {}
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT, **extra)
    return d


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


BUCKET_BYTES = 32 * 2**20  # the gradients are averaged this much at a time: what their averaging holds besides them


def average_gradients(params: list[torch.nn.Parameter], d: Dist, loss: torch.Tensor) -> torch.Tensor:
    """Mean of every gradient over the ranks, after the ranks agreed that none ran out of memory (an all-reduce that
    one rank never reaches hangs the others; that is why no DDP wrapper does this inside backward). In buckets of
    BUCKET_BYTES (one all-reduce each, ~3 for `base`): a flat copy of every gradient at once was a second gradient's
    worth of memory, taken outside the out-of-memory retry, so a big model could run out there and end the run. The
    phase's `loss` rides in the last bucket: the mean returned is non-finite on every rank when it is on any, so every
    rank takes the same skip-or-step decision."""
    if not d.enabled:
        return loss
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    for p in params:  # the same layout on every rank
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    mean_loss = loss.detach().reshape(1).to(grads[0].dtype)  # a NaN or an inf stays one in any dtype
    for bucket in buckets(grads + [mean_loss], BUCKET_BYTES):
        flat = _flatten_dense_tensors(bucket)
        dist.all_reduce(flat)
        flat /= d.world_size
        for t, averaged in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
            t.copy_(averaged)
    return mean_loss[0]


def buckets(tensors: list[torch.Tensor], limit: int) -> list[list[torch.Tensor]]:
    """Consecutive groups of one dtype and at most `limit` bytes each (a larger tensor alone)."""
    out, size = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if not out or out[-1][-1].dtype != t.dtype or size + nbytes > limit:
            out.append([])
            size = 0
        out[-1].append(t)
        size += nbytes
    return out


def broadcast_parameters(module: torch.nn.Module, d: Dist) -> None:
    """Rank 0's weights and buffers on every rank (for training without the DDP wrapper, which does this)."""
    if not d.enabled:
        return
    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=0)


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def cleanup(d: Dist, together: bool = False) -> None:
    """Leave the process group. `together` (a run every rank finished): meet first, so no rank tears its gloo
    connections down while another still uses them (a rank was seen to abort at exit without it); never after a
    failure, which the other ranks may not reach."""
    if d.enabled and dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()


def first_on_each_machine(work, d: Dist, wait_hours: float):
    """Run `work()` in the first process of each machine (local rank 0) while the others wait, then re-raise its
    error on every process (held until all are past the wait, so none waits for nothing). The wait is on a gloo
    group of its own with `wait_hours` of patience: NCCL's own timeout is shorter than, say, a 1.35 GB download.
    Without torchrun, `work()` simply runs."""
    if not d.enabled:
        return work()
    from datetime import timedelta

    group = dist.new_group(backend="gloo", timeout=timedelta(hours=wait_hours))
    result, error = None, None
    if d.local_rank == 0:
        try:
            result = work()
        except Exception as exc:
            error = exc
    dist.barrier(group=group)
    dist.destroy_process_group(group)
    if error is not None:
        raise error
    return result

