"""How fast a family's model trains on this machine, for what the Training tab says before Start: measured where a
run of this workspace measured it (its metrics' frames a second, on this kind of device), else estimated from the
card's published tensor throughput at the share of it each family's step reached where measured. Shared by the families with a large pretrained base (F5,
OmniVoice), which differ only in their FLOPs a frame and their CPU figure."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from utils.workspace import Workspace, read_json, read_jsonl

# dense half-precision tensor TFLOPS by name pattern (first match), as published by NVIDIA
PEAK_TFLOPS = (("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("L40S", 362.0),
               ("L40", 181.0), ("L4", 121.0), ("A10", 125.0), ("A6000", 155.0), ("V100", 125.0), ("T4", 65.0),
               ("4090", 165.0), ("3090", 71.0))


ENOUGH_WINDOWS = 5  # log windows pooled from the newest fitting runs before the median is taken
MOST_RUNS = 3


def measured(ws: Workspace, engine: str, device: str, fits=lambda train: bool(train.get("init")),
             key: str = "frames_per_s") -> tuple[float, str] | None:
    """The frames a second of the newest runs of `engine` in this workspace on this kind of device whose settings
    `fits` takes (by default: one that fine-tuned a base), and where the number comes from: the median of their log
    windows, pooled from the newest run back until there are ENOUGH_WINDOWS (at most MOST_RUNS runs). A run's first
    window holds its start (threads, caches) and is left out where it has others. The newest run alone said 579
    frames a second from the one window of a run stopped at step 14, where the machine trains at ~3,700; its last
    window alone (a busy minute) moved the estimate 12x. `key`: the metrics' number pooled (eval_s: an evaluation's
    seconds, the first also left out: it loads the vocoder)."""
    from utils.jobs import check_run

    windows, names = [], []
    for path in sorted(ws.runs.glob("*/metrics.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            config = json.loads((path.parent / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        train, resolved = config.get("train") or {}, config.get("resolved") or {}
        if train.get("engine") != engine or not fits(train) or resolved.get("device") != device:
            continue
        speeds = [r[key] for r in read_jsonl(path) if r.get(key)]
        if not speeds:
            continue
        windows += speeds[1:] or speeds
        name, dataset = path.parent.name, train.get("dataset") or ""
        names.append(f"the transcript check of {dataset}" if name == check_run(dataset) else f"run {name}")
        if len(windows) >= ENOUGH_WINDOWS or len(names) == MOST_RUNS:
            break
    if not windows:
        return None
    by = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return float(sorted(windows)[len(windows) // 2]), f"measured by {by} on this kind of machine"


def dataset_time(ws: Workspace, engine: str, dataset: str, device: str, key: str) -> tuple[float, str] | None:
    """A time of the metrics (`key`: eval_s an evaluation's, start_s a start's before its first step) as the earlier
    runs of `engine` on `dataset` here took it on this kind of device (`measured`), with where it comes from."""
    return measured(ws, engine, device, fits=lambda train: train.get("dataset") == dataset, key=key)


def run_dataset_time(run_dir, device: str, key: str) -> float | None:
    """dataset_time for the run in `run_dir` (its config.json), None where it names no workspace or dataset."""
    train = (read_json(Path(run_dir) / "config.json", {}) or {}).get("train") or {}
    if not (train.get("workspace") and train.get("engine") and train.get("dataset")):
        return None
    found = dataset_time(Workspace(Path(train["workspace"])), train["engine"], train["dataset"], device, key)
    return found[0] if found else None


MEL_FRAMES_PER_SECOND = 24_000 / 256  # the mels Matcha and F5 train on (utils.audio.FeatureConfig)


def batch_fill(ws: Workspace, dataset: str, max_frames: int, length_multiple: int = 4) -> float:
    """The share of a batch's frame budget that this dataset's training clips fill, batched as the trainer batches
    them (utils.training.batching.FrameBatchSampler): a step learns from the frames of its clips, not from the
    budget. A time reckoned at the budget was a fifth too long (espeak-ng clips: 1,650 frames of 2,000)."""
    from utils.datasets.manifest import manifest_folder
    from utils.datasets.store import FILE

    folder = manifest_folder(ws, dataset)
    try:
        changed = (folder / FILE).stat().st_mtime_ns
    except OSError:
        changed = 0
    return _fill(str(folder), changed, int(max_frames), int(length_multiple))


@functools.lru_cache(maxsize=16)
def _fill(folder: str, changed: int, max_frames: int, length_multiple: int) -> float:
    """batch_fill's count, once per version of the dataset's table (200k rows: under a second)."""
    from utils.datasets.store import query
    from utils.training.batching import FrameBatchSampler

    frames = [int(d * MEL_FRAMES_PER_SECOND) + 1 for (d,) in query(
        Path(folder), "SELECT duration FROM rows WHERE excluded = 0 AND coalesce(split, 'train') != 'val' "
                      "AND duration > 0")]
    if not frames:
        return 1.0
    batches = FrameBatchSampler(frames, max_frames, length_multiple=length_multiple, shuffle=False).epoch_batches(0)
    return min(1.0, sum(frames) / (len(batches) * max_frames))


def peak_tflops(gpu) -> float:
    """A card's dense half-precision tensor TFLOPS (a guess by its bf16 support where its name is not listed)."""
    return next((tflops for pattern, tflops in PEAK_TFLOPS if pattern in gpu.name), 30.0 if not gpu.bf16 else 120.0)


def estimated(report, flops_per_frame: float, utilisation: float, where: str) -> tuple[float, str]:
    """Frames a second on the report's GPUs (their smallest, times their number) from its peak TFLOPS, at the share
    of the peak (`utilisation`) a family's step reached where it was measured (`where`)."""
    gpu = min(report.gpus, key=lambda g: g.memory_gb)
    peak = peak_tflops(gpu)
    per_gpu = peak * 1e12 * utilisation / flops_per_frame
    return per_gpu * len(report.gpus), (f"estimated for {len(report.gpus)} x {gpu.name} ({peak:.0f} TFLOPS at "
                                        f"{utilisation:.1%}, {where}); the run's own log gives the measured speed")


class Timed(str):
    """A line of what a run takes before Start that carries its seconds too, so that the lines of its steps, its
    loading and its checks can be added up into one time."""
    seconds: float

    def __new__(cls, text: str, seconds: float) -> "Timed":
        line = super().__new__(cls, text)
        line.seconds = float(seconds)
        return line


def say_hours(hours: float) -> str:
    """An amount of speech in plain units: "42 s", "4 min 12 s" under ten minutes, "35 min" under an hour ("0.00 h"
    said nothing of a small dataset), else "1.4 h"; every tab, the command line and the preparation's progress say
    an amount the same way."""
    s = round(hours * 3600)
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min {s % 60} s" if s < 600 else f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def say_time(seconds: float) -> str:
    """A duration as a curator reads it (under a second with its tenth: a check of 0.3 s was said "0 s")."""
    if seconds < 0.95:
        return f"{max(seconds, 0.1):.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"
