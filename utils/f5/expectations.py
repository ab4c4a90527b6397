"""What to expect of an F5 fine-tune, said before Start: is there enough speech, how long will a pass over the data
and the whole run take on this machine, and will the checkpoints fit on the disk.

    lines = guidance(ws, "abebe", max_steps=20_000)   # the Training tab and `app.py train --engine f5` show them

Hours: people who fine-tuned F5-TTS for a new language needed 10-15 h of speech (F5-TTS issue 87); 10 h of one
speaker still mispronounced (#665). A base that already speaks Amharic needs only enough to adapt a voice.
Speed: measured where it can be (the newest F5 run of this workspace on this kind of device: its frames a second),
else estimated from the card's half-precision tensor throughput at a typical 35 % utilisation, or the 2-core CPU
figure of bench/f5_step.py. Disk: a checkpoint is the 1.35 GB of weights; only the newest keeps the trainer state
(weights, AdamW's two moments, the average: ~5.4 GB more).
"""
from __future__ import annotations

import shutil

from utils.training.speed import Timed, batch_fill, estimated, measured, say_hours, say_time  # noqa: F401
from utils.workspace import Workspace

NEW_LANGUAGE_HOURS = (10.0, 15.0)    # F5-TTS issue 87
ADAPT_HOURS = 1.0                    # a base that speaks Amharic: an hour or two adapts a voice
FRAMES_PER_S_CPU = 60.0              # the v1 Base on 2 CPU cores (bench/f5_step.py, RESULTS.md)
FLOPS_PER_FRAME = 6 * 337e6          # forward + backward of 337 M parameters per mel frame (attention aside)
# the share of a card's peak the v1 Base's step reaches: bf16 at 38,352 frames in 621 ms on an H200 (bench/RESULTS.md,
# issue 57's text): 61,758 frames a second x FLOPS_PER_FRAME / 989 TFLOPS = 12.6 % (35 % said it 2.8x too short)
GPU_UTILISATION = 0.126
FRAMES_PER_SECOND_OF_AUDIO = 24_000 / 256
WEIGHTS_GB, STATE_GB = 1.35, 5.4     # one checkpoint's weights; the newest one's trainer state on top


def usable_hours(ws: Workspace, dataset: str) -> float:
    from utils.datasets.manifest import usable_hours

    return usable_hours(ws, dataset, with_text=True)


def training_speed(ws: Workspace, report) -> tuple[float, str]:
    """(mel frames a second the v1 Base trains at here, where the number comes from)."""
    found = measured(ws, "f5", "cuda" if report.gpus else "cpu")
    if found:
        return found
    if not report.gpus:
        return FRAMES_PER_S_CPU, "measured on a 2-core CPU"
    return estimated(report, FLOPS_PER_FRAME, GPU_UTILISATION, "the share the v1 Base's step reached on an H200")


def guidance(ws: Workspace, dataset: str, max_steps: int, report=None, keep_checkpoints: int = 3,
             speaks_amharic: bool = False, frames_per_update: int | None = None) -> list[str]:
    """Three lines in plain words: the data against what a new language needed, the time a pass and the run take
    here, and the disk the checkpoints take against what is free where the workspace lives."""
    from utils import hardware

    report = report if report is not None else hardware.detect(ws.root)
    frames_per_update = frames_per_update or hardware.TARGET_FRAMES_PER_STEP
    hours = usable_hours(ws, dataset)
    low, high = NEW_LANGUAGE_HOURS
    if speaks_amharic:
        data = (f"{say_hours(hours)} of usable speech: the base already speaks Amharic, so {ADAPT_HOURS:.0f} h or more "
                "adapts it to this voice" + ("." if hours >= ADAPT_HOURS else "; record more if you can."))
    elif hours < low:
        data = (f"{say_hours(hours)} of usable speech: teaching the base a new language took people {low:.0f}-{high:.0f} h "
                f"(F5-TTS issue 87; 10 h of one speaker still mispronounced some words). With {say_hours(hours)} expect "
                "an accent and mistakes; a base that already speaks Amharic, or more recordings, helps.")
    else:
        data = f"{say_hours(hours)} of usable speech: within or above the {low:.0f}-{high:.0f} h a new language needed."
    speed, source = training_speed(ws, report)
    one_pass = hours * 3600 * FRAMES_PER_SECOND_OF_AUDIO / speed
    learnt = frames_per_update * batch_fill(ws, dataset, frames_per_update)  # the clips' frames, not the budget
    run_s = max_steps * learnt / speed
    passes = max_steps * learnt / max(1.0, hours * 3600 * FRAMES_PER_SECOND_OF_AUDIO)
    time = Timed(f"About {say_time(one_pass)} for one pass over the data and {say_time(run_s)} for the {max_steps} "
                 f"updates ({passes:.0f} passes of up to {frames_per_update} frames an update, {learnt:,.0f} of them "
                 f"filled by {dataset}'s clips; {speed:,.0f} frames a second, {source}).", run_s)
    # the peak is during a save: the newest `keep`, the best and the new one's weights, and one trainer state (the
    # previous one is removed first when the disk cannot hold both: utils.training.checkpoint.make_room)
    need = (keep_checkpoints + 2) * WEIGHTS_GB + STATE_GB
    free = shutil.disk_usage(ws.root).free / 2**30
    disk = (f"Checkpoints need up to {need:.0f} GB ({keep_checkpoints + 2} x {WEIGHTS_GB} GB of weights while a save "
            f"is written: the newest {keep_checkpoints}, the best and the new one; and {STATE_GB} GB to resume from "
            f"the newest, {2 * STATE_GB:.1f} GB where there is room to keep the previous one until the new one is "
            f"written); {free:.0f} GB are free where the workspace is"
            + ("." if free >= need + 2 else ": free space first, or keep fewer checkpoints (a free Google Drive "
                                            "holds 15 GB)."))
    return [data, time, disk]
