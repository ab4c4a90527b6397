"""What a resumed run keeps of its batch: the frames of one optimizer step and the learning rate chosen for them.

A resumed run skips the batch probe (the order of its batches depends on the sizes it chose), so what `resolve`
guesses for this machine is not what the run trained with: on 4 L4s it guesses 16,000 frames a GPU where the probe
measured 12,000, and scales the learning rate for a 64,000-frame step (2.53e-4) where the run trained on 48,000
(2.19e-4). A checkpoint keeps the run's own (`kept`) and a resume puts them back (`restore`). On another number of
processes the run keeps its step's frames where the sizes are automatic (more micro-batches on fewer GPUs, smaller
ones on more); where the step's frames change, the learning rate follows them by the square-root rule.
"""
from __future__ import annotations

import math

from utils.hardware import lr_batch_scale
from utils.training.config import AUTO

KEPT_WHY = "kept from the run being resumed"


def kept(m, processes: int) -> dict:
    """What a checkpoint keeps of the run's batch (beside DataPosition.KEPT's sizes)."""
    return {"processes": processes, "lr": m.lr,
            **({"effective_batch": m.effective_batch} if "effective_batch" in m.values else {})}


def restore(saved: dict, m, cfg, processes: int) -> str:
    """Put the run's step and learning rate back on `m` (its sizes are back already: DataPosition.KEPT). Returns
    what the batch became, for the log line of a run resumed on another number of processes ("" otherwise)."""
    before = int(saved.get("processes") or processes)
    if "effective_batch" not in m.values:  # batches of clips (MMS, OmniVoice): no step of frames to keep
        _keep_rate(m, cfg, saved.get("lr"))
        return "" if before == processes else f"each step averages {processes} processes' batches, not {before}"
    auto_sizes = cfg.max_frames_per_batch == AUTO and cfg.grad_accumulation == AUTO
    micro, accum = m.max_frames_per_batch, m.grad_accumulation
    was = int(saved.get("effective_batch") or micro * accum * before)
    # an older checkpoint kept no rate: the one its step had (the sizes it kept, scaled as set_effective_batch does)
    rate = saved.get("lr") or (m.auto_lr[0] * (lr_batch_scale(was) if auto_sizes else 1.0) if m.auto_lr else None)
    if before != processes and auto_sizes:
        micro, accum = _regroup(m, was, micro, processes, before)
    now = micro * accum * processes
    if rate and now != was and auto_sizes:  # the step's frames changed: the square-root rule, as batch_plan scales
        rate *= math.sqrt(now / was)
    _keep_rate(m, cfg, rate)
    shape = (f"{micro} frames x {accum} micro-batch{'es' if accum > 1 else ''} x {processes} "
             f"process{'es' if processes > 1 else ''} = {now} frames")
    m.set("effective_batch", now, f"{shape} per optimizer step; " + (KEPT_WHY if now == was else
                                                                      f"the run trained with {was}"))
    if before == processes:
        return ""
    kept = f"the {was} frames this run trained with" if now == was else f"not the {was} frames this run trained with"
    return f"each optimizer step takes {shape}, {kept}, at a learning rate of {m.lr:.3g}"


def _regroup(m, was: int, micro: int, processes: int, before: int) -> tuple[int, int]:
    """The run's step of `was` frames on `processes` instead of `before`: the fewest micro-batches that hold it,
    none larger than the run fitted on its GPUs (more micro-batches on fewer GPUs, smaller ones on more)."""
    accum = math.ceil(was / (processes * micro))
    micro = min(micro, math.ceil(was / (processes * accum)))
    why = f"{KEPT_WHY}: its {was} frames per optimizer step, on {processes} processes instead of {before}"
    m.set("max_frames_per_batch", micro, why)
    m.set("grad_accumulation", accum, why)
    return micro, accum


def _keep_rate(m, cfg, rate: float | None) -> None:
    """The run's learning rate, where it was automatic (a rate set by hand for the resume is the curator's)."""
    if rate and cfg.lr == AUTO:
        m.set("lr", rate, f"{KEPT_WHY} (its batch's rate; a resume skips the batch probe that chose it)")
