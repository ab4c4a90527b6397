"""The measured batch probe: one real training step (forward + backward) on a batch made of the
longest utterances, grown then bisected to the largest frames-per-batch that fits; the trainer
keeps `headroom` of it and reports it to utils.hardware (`with_measured_batch`)."""
from __future__ import annotations

from typing import Callable

from utils.training.optimization import is_oom


def probe_max_frames(try_frames: Callable[[int], None], start: int, longest: int, limit: int = 400_000,
                     tolerance: float = 0.05, cleanup: Callable[[], None] = lambda: None,
                     log: Callable[[str], None] = print) -> tuple[int, list[tuple[int, bool]]]:
    """Largest frame budget for which `try_frames(budget)` runs without out-of-memory.

    Starts at `start`, doubles while it fits (up to `limit`), halves while it does not (down to one
    longest utterance), then bisects to within `tolerance`. Returns (largest that fitted, trials).
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
        while lo * 2 <= limit and fits(lo * 2):
            lo *= 2
        hi = lo * 2 if lo * 2 <= limit else None
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
