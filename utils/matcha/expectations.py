"""What to expect of a Matcha run, said before Start as the other families say it: how long its steps take here.

Speed: the newest Matcha run of this workspace at this size on this kind of device (its frames a second), else on a
GPU an estimate from the card's throughput (utils.training.speed), else the 2-core CPU figure below. A step is the
batch the machine is recommended (utils.hardware), times its accumulation.
"""
from __future__ import annotations

# mel frames a second on 2 quiet CPU cores (AMD EPYC), fp32, 2,000 frames a batch (the CPU's batch), two runs each of
# `python bench/train_throughput.py --preset P --frames 2000 --rows fp32`, 2026-11-29: tiny 6,239 and 5,678, small
# 3,239 and 2,771, base 1,831 and 1,914 (the figures before, 2,300 / 1,700 / 750, were measured on a machine busy
# with other work, and said 3 min for a run that took 90 s); a real dataset's run of tiny measured 6,168
CPU_FRAMES_PER_S = {"tiny": 5900.0, "small": 3000.0, "base": 1870.0}
PARAMS_M = {"tiny": 3.0, "small": 9.6, "base": 21.5}  # bench/RESULTS.md, as bench/common.model_size counts them
# the share of a card's peak a Matcha step reaches: base, bf16, 40,000 frames, alone on an H100 (bench/RESULTS.md, the
# second one-call suite): 235,491 frames a second x 6 x 21.5 M FLOPs / 989 TFLOPS = 3.1 % (convolutions and small
# matmuls: a transformer's 35 % said a 20,000-step run would take 5 min where it takes about an hour)
GPU_UTILISATION = 0.031


def training_speed(ws, preset: str, report) -> tuple[float, str]:
    """(mel frames a second a Matcha model of this size trains at here, where the number comes from)."""
    from utils.training.speed import estimated, measured

    found = measured(ws, "matcha", "cuda" if report.gpus else "cpu",  # the transcript check's aligner-only steps
                     fits=lambda train: train.get("preset") == preset and speaks(train))  # are ~9x a voice's
    if found:
        return found
    if not report.gpus:
        return CPU_FRAMES_PER_S.get(preset, CPU_FRAMES_PER_S["small"]), ("measured on a quiet 2-core CPU; one busy "
                                                                         "with other work is slower")
    return estimated(report, 6 * PARAMS_M.get(preset, PARAMS_M["small"]) * 1e6, GPU_UTILISATION,
                     "the share the base model's step reached on an H100")


def speaks(train: dict) -> bool:
    """Whether a run's config ("train") trains the whole model, not the transcript check's aligner alone."""
    return ((train.get("options") or {}).get("parts") or "all") == "all"


def frames_per_step(cfg, report) -> int:
    """The mel frames a step may learn from: the batch (and accumulation) set, else this machine's recommendation."""
    batch = _setting(cfg, report, "max_frames_per_batch")
    return batch * accumulation(cfg, report)


def accumulation(cfg, report) -> int:
    """The micro-batches a step adds up: as set, else this machine's recommendation."""
    return _setting(cfg, report, "grad_accumulation")


def _setting(cfg, report, name: str) -> int:
    from utils import hardware
    from utils.matcha.adapter import MatchaAdapter
    from utils.training.config import AUTO

    value = getattr(cfg, name)
    return int(value if value != AUTO else hardware.recommend(report, MatchaAdapter.memory_plan(cfg))[name].value)


def guidance(ws, cfg, report=None) -> list[str]:
    """The time the run's steps take here, in the words F5's, MMS's and OmniVoice's say it."""
    from utils import hardware
    from utils.training.speed import Timed, batch_fill, say_time

    report = report if report is not None else hardware.detect(ws.root)
    speed, source = training_speed(ws, cfg.preset, report)
    frames = frames_per_step(cfg, report)
    fill = batch_fill(ws, cfg.dataset, frames // accumulation(cfg, report))
    seconds = cfg.max_steps * frames * fill / speed
    time = Timed(f"Time: about {say_time(seconds)} for {cfg.max_steps:,} steps of the {cfg.preset} model, up to "
                 f"{frames:,} frames a step ({cfg.dataset}'s clips fill {fill:.0%} of them; {speed:,.0f} frames a "
                 f"second, {source}).", seconds)
    return [time, *fine_tune_gain(ws, cfg)]


def fine_tune_gain(ws, cfg) -> list[str]:
    """Starting from a checkpoint: what that bought in the studio's measurement (utils/transfer.py), beside the
    curator's amount of speech."""
    if not cfg.init:
        return []
    from utils.datasets.manifest import usable_hours
    from utils.matcha import TRANSFER
    from utils.transfer import said

    return [said(TRANSFER, usable_hours(ws, cfg.dataset, with_text=True))]
