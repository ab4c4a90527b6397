"""The measured batch probe: one real training step (forward + backward) on a batch made of the
longest utterances, grown then bisected to the largest frames-per-batch that fits; the trainer
keeps `headroom` of it and reports it to utils.hardware (`with_measured_batch`)."""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch

from utils import hardware
from utils.training.failures import is_oom

# per trainable parameter, the optimizer state tensors of its own size that the first step creates
STATE_TENSORS = {"AdamW": 2, "Adam": 2, "SGD": 1}


def probe_limit(world_size: int, headroom: float) -> int:
    """The largest budget worth trying: what the batch plan can use per micro-batch, before the headroom the trainer
    keeps (a budget it would throw away costs a real step, or an out-of-memory)."""
    return math.ceil(hardware.largest_useful_micro_batch(world_size) / max(headroom, 1e-3))


def optimizer_state_ballast(optimizers: Iterable[torch.optim.Optimizer], device) -> list[torch.Tensor]:
    """Placeholders as large as the state the optimizers will make at their first step (AdamW: two fp32 moments per
    parameter, 2.7 GB for F5's 337 M), for parameters that have none yet; held while the probe measures."""
    ballast = []
    for optimizer in optimizers:
        copies = STATE_TENSORS.get(type(optimizer).__name__, 2)
        size = sum(p.numel() * p.element_size() for group in optimizer.param_groups for p in group["params"]
                   if p.requires_grad and not optimizer.state.get(p))
        if size and copies:
            ballast.append(torch.empty(size * copies, dtype=torch.uint8, device=device))
    return ballast


def probe_max_frames(try_frames: Callable[[int], None], start: int, longest: int, limit: int = 400_000,
                     tolerance: float = 0.05, cleanup: Callable[[], None] = lambda: None,
                     log: Callable[[str], None] = print) -> tuple[int, list[tuple[int, bool]]]:
    """Largest frame budget for which `try_frames(budget)` runs without out-of-memory.

    Starts at `start`, doubles while it fits (the last try at `limit`, never beyond), halves while it does not
    (down to one longest utterance), then bisects to within `tolerance`. Returns (largest that fitted, trials).
    """
    trials: list[tuple[int, bool]] = []

    def fits(frames: int) -> bool:
        try:
            try_frames(frames)
            ok = True
        except Exception as exc:  # only out-of-memory counts as "does not fit"
            if not is_oom(exc):
                raise
            ok = False
        cleanup()
        trials.append((frames, ok))
        log(f"probe: {frames} frames per batch {'fits' if ok else 'out of memory'}")
        return ok

    lo, hi = 0, None  # lo fits, hi does not
    frames = max(start, longest)
    if fits(frames):
        lo = frames
        while lo < limit:  # doubling, the last try at the limit itself
            grown = min(lo * 2, limit)
            if not fits(grown):
                hi = grown
                break
            lo = grown
    else:
        hi = frames
        while hi // 2 >= longest:
            if fits(hi // 2):
                lo = hi // 2
                break
            hi //= 2
        if lo == 0:
            return 0, trials  # not even one longest utterance fits
    while hi is not None and hi - lo > max(longest // 2, tolerance * lo):
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, trials
