"""What a fine-tune buys over training from zero, as bench/transfer.py measured it (bench/RESULTS.md, "Fine-tuning
transfers"): the sentence the guidance before Start of a run from a checkpoint says, so that a curator's choice rests
on a measurement of this studio's own training, not on a promise. A family that fine-tunes declares its measurement as
`TRANSFER` (utils/family_contract.py, FAMILY_OPTIONAL); one without it says nothing."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """One comparison of bench/transfer.py: a base made here fine-tuned on Amharic against the same model from random
    weights, the same clips, steps and settings."""
    steps: int             # steps of each start
    reached_at: int        # the pretrained start's first evaluation at or below the scratch run's final MCD
    pretrained_db: float   # held-out MCD of each start after `steps`
    scratch_db: float
    speech_s: float        # seconds of Amharic speech both trained on
    where: str             # the sizes and machine, as RESULTS.md says them


def said(m: Measured, hours: float | None = None) -> str:
    """One sentence for the guidance before Start of a run from a checkpoint: how far a trained start was ahead of
    random weights, with the curator's amount of speech beside the amount measured."""
    from utils.training.speed import say_hours

    head = (", before its first step," if m.reached_at == 0 else f", after {m.reached_at} steps,")
    yours = "" if hours is None else f"; you have {say_hours(hours)}"
    return (f"Measured here: a model started from a checkpoint trained on other languages was{head} as close to "
            f"held-out Amharic speech as one started from random weights after {m.steps} steps, and {m.steps} steps in "
            f"it was {m.scratch_db - m.pretrained_db:.1f} dB closer ({m.pretrained_db:.1f} against {m.scratch_db:.1f} "
            f"dB MCD, lower is better; {m.where}, {say_hours(m.speech_s / 3600)} of Amharic speech{yours}).")
