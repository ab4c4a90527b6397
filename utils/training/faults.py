"""Test faults, injected around an adapter so the training loop holds none of them: an out-of-memory above a
batch size (on some ranks, in some phase), a NaN loss at given steps, a checkpoint that pauses half-written (a
test kills the trainer there). Set through the TEST HOOK fields of the training configs; a run without them gets
the adapter itself."""
from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

import torch

from utils.training import checkpoint as ckpt

PAUSE_S = 10.0  # how long the paused checkpoint stays half-written: ample time for a test to kill the trainer


def with_faults(adapter, oom_above: int = 0, oom_ranks: list | None = None, nan_steps: list | None = None,
                pause_step: int = 0, measure: Callable = len, nan_phase: str | None = None,
                oom_phase: str | None = None):
    """`adapter`, or a wrapper that injects the faults asked for. `nan_steps` are the loop's 0-based step
    indices; `measure(batch)` is the size compared with `oom_above`; `nan_phase` and `oom_phase` limit the NaN and
    the out-of-memory to one phase; the checkpoint of step `pause_step` stops for PAUSE_S after its weights."""
    if not (oom_above or nan_steps or pause_step):
        return adapter
    return _Faulty(adapter, oom_above, list(oom_ranks or []), set(nan_steps or []), pause_step, measure, nan_phase,
                   oom_phase)


class _Faulty:
    def __init__(self, inner, oom_above, oom_ranks, nan_steps, pause_step, measure, nan_phase, oom_phase):
        self.__dict__.update(inner=inner, oom_above=oom_above, oom_ranks=oom_ranks, nan_steps=nan_steps,
                             pause_step=pause_step, measure=measure, nan_phase=nan_phase, oom_phase=oom_phase)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)

    def losses(self, batch, phase: str, step: int) -> dict:
        size = self.measure(batch)
        if self._runs_out_of_memory(size, phase):
            raise torch.OutOfMemoryError(f"CUDA out of memory (fault injection: {size} > {self.oom_above})")
        losses = self.inner.losses(batch, phase, step)
        if step in self.nan_steps and self.nan_phase in (None, phase):  # as a real NaN: reported losses too
            losses = {k: v * float("nan") for k, v in losses.items()}
        return losses

    def _runs_out_of_memory(self, size: int, phase: str) -> bool:
        return bool(self.oom_above and size > self.oom_above and self.oom_phase in (None, phase)
                    and (not self.oom_ranks or self.inner.ctx.dist.rank in self.oom_ranks))

    def save_checkpoint(self, folder, weights: dict, config: dict, trainer_state: dict | None = None):
        """The loop's save (utils.training.checkpoint), paused half-written at `pause_step`."""
        files = ckpt.checkpoint_files(weights, config, trainer_state)
        if self.pause_step and trainer_state is not None and trainer_state["step"] == self.pause_step:
            files = _pause_after_first(files, PAUSE_S)
        return ckpt.write_atomically(folder, files)


def _pause_after_first(files: Iterable, seconds: float) -> Iterator:
    """The same files, with a pause once the first (the weights) is on disk and before the next is written."""
    files = iter(files)
    yield next(files)
    time.sleep(seconds)
    yield from files
