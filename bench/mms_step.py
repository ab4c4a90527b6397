"""The MMS engine's training step at the real size: seconds a step and a clip, and peak memory, by clips a step.

    python bench/mms_step.py                       # CPU: 1, 2, 4 and 8 clips of the median length a step
    python bench/mms_step.py --clips 4 16 --steps 8   # GPU: the recipe's 16

Why: the Training tab's guidance and the loop's CPU batch (about.CPU_CLIPS_PER_STEP) quote these numbers. What
runs is the real trainer (`utils.training.run`, the same code as `python app.py train --engine mms`), with a
random-weight model of the published sizes (transformers' VitsConfig defaults are MMS-TTS's: 36.3 M parameters, and
the 46.7 M-parameter VITS discriminator): the work of a step is the base's, whatever its weights. The data: espeak-ng
Amharic clips of one voice. Each batch size runs in its own process, so its peak memory is its own (on a GPU the
loop's reading of the GPU's, in metrics.jsonl; on the CPU the resident peak, ru_maxrss); the first two steps (warm-up) are left out of the timing. Memory a clip is the slope of peak memory over the
clips a step.
"""
from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import tempfile
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("clips", "clips a step (mean)", "{:.1f}"), ("seconds", "s a step", "{:.2f}"),
           ("per_clip", "s a clip", "{:.2f}"), ("peak_gib", "peak memory GiB", "{:.2f}"),
           ("memory", "memory of")]  # on cuda the GPU's (the loop's metrics), else the process's resident peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, nargs="+", default=[1, 2, 4, 8], help="clips a step (of the median length)")
    p.add_argument("--steps", type=int, default=8, help="training steps per batch size (the first two warm up)")
    p.add_argument("--train-clips", type=int, default=40, help="espeak-ng clips to train on")
    p.add_argument("--workers", default="auto", help="loader worker processes (default auto: the machine's, 8 on a "
                                                     "16-core GPU host)")
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)

    from tests.helpers import make_dataset
    from tests.mms_fixtures import tiny_base

    root = Path(tempfile.mkdtemp(prefix="bench-mms-"))
    print(f"speaking {args.train_clips} clips with espeak-ng, making a real-size random base ...", flush=True)
    ws = make_dataset(root, name="bench", n_train=args.train_clips, n_val=1, voices=("am",), max_chars=60)
    tiny_base(root / "pretrained" / "real", real_size=True)
    seconds = statistics.mean(r["duration"] for r in _rows(ws))
    frames = int(statistics.median(r["duration"] for r in _rows(ws)) * 16_000) // 256
    spawn = multiprocessing.get_context("spawn")
    rows = []
    for clips in args.clips:
        result = spawn.Queue()
        child = spawn.Process(target=_train,
                              args=(str(root), clips * frames, args.steps, args.threads, args.workers, result))
        child.start()
        child.join()
        rows.append(result.get(timeout=10))
        print(common.markdown_table(COLUMNS, rows[-1:]), flush=True)
    slope = _slope([r["clips"] for r in rows], [r["peak_gib"] for r in rows]) if len(rows) > 1 else None
    print(f"\n# MMS-TTS real size (36.3 M + 46.7 M parameters), clips of {seconds:.1f} s on average, "
          f"{common.machine()['summary']}")
    print(common.markdown_table(COLUMNS, rows))
    if slope is not None:
        print(f"memory a clip: {slope * 1024:.0f} MiB (slope of peak memory over clips a step)")
    common.save("mms_step", {"clip_seconds": seconds, "median_frames": frames, "rows": rows,
                             "mib_per_clip": slope * 1024 if slope is not None else None}, out=args.out)


def _rows(ws) -> list[dict]:
    from utils.datasets import load_manifest

    return [r for r in load_manifest(ws, "bench") if r["split"] == "train"]


def _train(root: str, max_frames: int, steps: int, threads: int | None, workers: str, result) -> None:
    """One batch size in its own process: the real trainer for `steps` steps; its speed and peak memory."""
    import torch

    from utils.training import TrainConfig, prepare_run, run
    from utils.workspace import read_jsonl

    if threads:
        torch.set_num_threads(threads)
    name = f"step-{max_frames}"
    cfg = TrainConfig(workspace=root, dataset="bench", run=name, engine="mms", init="pretrained/real",
                      max_steps=steps, log_every=1, evaluate=False, checkpoint_every=0, max_frames_per_batch=max_frames,
                      resume="none", num_workers=workers)
    run(prepare_run(cfg))
    metrics = read_jsonl(Path(root) / "runs" / name / "metrics.jsonl")
    rows = [r for r in metrics if "samples_per_s" in r]
    # a row a step (log_every 1): its seconds are the time since the row before; the first two steps are warm-up
    # (the CPU's convolution kernels are set up for each new shape: 5-10x a step's time)
    seconds = [b["time"] - a["time"] for a, b in zip(rows[1:], rows[2:])]
    clips = [r["samples_per_s"] * t for r, t in zip(rows[2:], seconds)]
    on_gpu = [r["gpu_mem_peak_gb"] for r in metrics if "gpu_mem_peak_gb" in r]  # the loop's own reading on cuda
    peak = max(on_gpu) if on_gpu else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    result.put({"max_frames": max_frames, "clips": statistics.mean(clips), "seconds": statistics.median(seconds),
                "per_clip": sum(seconds) / sum(clips), "peak_gib": peak, "memory": "GPU" if on_gpu else "process"})


def _slope(x: list[float], y: list[float]) -> float:
    mx, my = statistics.mean(x), statistics.mean(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


if __name__ == "__main__":
    main()
