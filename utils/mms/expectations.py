"""What to expect of an MMS fine-tune, said before Start: where it starts and under which licence, whether the data
fits what the engine is made for, how long the steps take on this machine, and the disk.

Data: the public recipe (finetune-hf-vits) adapted a speaker from 80-150 clips (10-20 minutes); an hour or two of
one speaker is what this engine is made for. Speed: the newest MMS run of this workspace on this kind of device
(its clips a second), else bench/mms_step.py's measurement on a 2-core CPU; on a GPU, the run's own log says it.
"""
from __future__ import annotations

import shutil

from utils.mms.about import CLIPS_PER_STEP, CPU_CLIPS_PER_STEP, HUB_ID, LICENCE, SIZE_MB

ENOUGH_MINUTES, MADE_FOR_HOURS = 10.0, (1.0, 2.0)
CPU_S_PER_CLIP = 3.7       # a training step's seconds a clip at the real size, 2 CPU cores, the CPU batch (about
#                            2.5 espeak-ng clips of 2.3 s; bench/mms_step.py, RESULTS.md): longer clips take longer
STATE_GB = 1.2             # the newest checkpoint's trainer state: both networks, AdamW's moments, the EMA


def guidance(ws, cfg, report=None) -> list[str]:
    from utils import hardware
    from utils.f5.expectations import usable_hours
    from utils.training.speed import Timed, say_time

    report = report if report is not None else hardware.detect(ws.root)
    start = (f"It starts from Meta's Amharic MMS-TTS voice ({HUB_ID}) under its licence: {LICENCE}. The voice you "
             "make keeps that licence (the Matcha engine is the one whose voices are free of it)."
             if cfg.init in ("", HUB_ID) else f"It starts from {cfg.init} (its licence travels with it).")
    minutes = usable_hours(ws, cfg.dataset) * 60
    if minutes < ENOUGH_MINUTES:
        data = (f"{minutes:.0f} min of usable speech: the public recipe adapted a speaker from 80-150 clips (10-20 "
                "min); with less, expect the base's voice more than this speaker's.")
    else:
        low, high = MADE_FOR_HOURS
        data = (f"{minutes / 60:.1f} h of usable speech: an hour or two of one speaker is what this engine is made for"
                + ("." if minutes >= 60 * low else f"; {low:.0f}-{high:.0f} h makes a closer voice."))
    per_clip, source = _seconds_per_clip(ws, report)
    clips = CLIPS_PER_STEP if report.gpus else CPU_CLIPS_PER_STEP
    time = (Timed(f"Up to {say_time(cfg.max_steps * clips * per_clip)} for {cfg.max_steps} steps of up to {clips} "
                  f"clips ({per_clip:.2f} s a clip, {source}).", cfg.max_steps * clips * per_clip) if per_clip else
            "On a GPU a step of 16 clips takes well under a second to a few seconds; the run's log says the speed.")
    need = (cfg.keep_checkpoints + 1) * SIZE_MB / 1024 + STATE_GB
    free = shutil.disk_usage(ws.root).free / 2**30
    disk = (f"Checkpoints need up to {need:.1f} GB ({cfg.keep_checkpoints + 1} x {SIZE_MB} MB of weights and "
            f"{STATE_GB} GB to resume from the newest); {free:.0f} GB are free where the workspace is.")
    return [start, data, time, disk]


def _seconds_per_clip(ws, report) -> tuple[float | None, str]:
    """Seconds a clip of a training step: the newest MMS run here on this kind of device, else the CPU bench."""
    import json

    from utils.workspace import read_jsonl

    device = "cuda" if report.gpus else "cpu"
    for path in sorted(ws.runs.glob("*/metrics.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            config = json.loads((path.parent / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (config.get("train") or {}).get("engine") != "mms" or (config.get("resolved") or {}).get("device") != device:
            continue
        speeds = [r["samples_per_s"] for r in read_jsonl(path) if r.get("samples_per_s")]
        if speeds:
            return 1.0 / float(speeds[-1]), f"measured by run {path.parent.name} on this kind of machine"
    return (CPU_S_PER_CLIP, "measured on a 2-core CPU") if device == "cpu" else (None, "")
