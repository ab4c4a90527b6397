"""Test faults, injected around an adapter so the engine's loop holds none of them: an out-of-memory above a
batch size (on some ranks), a NaN loss at given steps, a checkpoint that pauses half-written (a test kills the
trainer there). Set through the TEST HOOK fields of the training configs; a run without them gets the adapter
itself."""
from __future__ import annotations

from typing import Callable

import torch


def with_faults(adapter, oom_above: int = 0, oom_ranks: list | None = None, nan_steps: list | None = None,
                pause_step: int = 0, measure: Callable = len, nan_phase: str | None = None):
    """`adapter`, or a wrapper that injects the faults asked for. `nan_steps` are the engine's 0-based step
    indices; `measure(batch)` is the size compared with `oom_above`; `nan_phase` limits the NaN to one phase."""
    if not (oom_above or nan_steps or pause_step):
        return adapter
    return _Faulty(adapter, oom_above, list(oom_ranks or []), set(nan_steps or []), pause_step, measure, nan_phase)


class _Faulty:
    def __init__(self, inner, oom_above, oom_ranks, nan_steps, pause_step, measure, nan_phase):
        self.__dict__.update(inner=inner, oom_above=oom_above, oom_ranks=oom_ranks, nan_steps=nan_steps,
                             pause_step=pause_step, measure=measure, nan_phase=nan_phase)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)

    def losses(self, batch, phase: str, step: int) -> dict:
        size = self.measure(batch)
        if self.oom_above and size > self.oom_above and (not self.oom_ranks or self.inner.ctx.dist.rank in self.oom_ranks):
            raise torch.OutOfMemoryError(f"CUDA out of memory (fault injection: {size} > {self.oom_above})")
        losses = self.inner.losses(batch, phase, step)
        if step in self.nan_steps and self.nan_phase in (None, phase):  # as a real NaN: reported losses too
            losses = {k: v * float("nan") for k, v in losses.items()}
        return losses

    def save_pause_s(self, step: int) -> float:
        return 10.0 if step == self.pause_step else self.inner.save_pause_s(step)
