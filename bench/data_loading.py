"""Multi-process data loading: does the training step ever wait for its next batch?

    python bench/data_loading.py                                  # 40 espeak-ng clips, workers 0,1,2, 50 ms step
    python bench/data_loading.py --dataset NAME --workspace WS --workers 0 2 4 8 --step-ms 40
    python bench/data_loading.py --preset tiny                    # a real training step instead of a simulated one

Why: the trainer's goal is a data wait <= 2 % of step time. This feeds batches through the trainer's own
data path (manifest -> cached mels -> FrameBatchSampler -> DataLoader with the trainer's collate, pinned
memory on a GPU, persistent workers) and times `next(loader)` per step, for each worker count. Between
batches the "GPU step" is simulated by sleeping `--step-ms` (the main process is idle while a GPU
computes, as it is in the trainer's step), or, with `--preset`, is a real training step. Reported: time to
the first batch (worker start-up), mean / 95th percentile / max wait per step, and the wait as a share of
wall time. Without --dataset a small dataset is spoken by espeak-ng into a temporary workspace.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("workers", "workers"), ("pin_memory", "pinned"), ("first_batch_s", "first batch s", "{:.2f}"),
           ("wait_mean_ms", "wait ms (mean)", "{:.2f}"), ("wait_p95_ms", "p95", "{:.2f}"),
           ("wait_max_ms", "max", "{:.2f}"), ("wait_fraction", "wait / wall", "{:.1%}"), ("gpu_waits", "step waits?")]
GOAL = 0.02  # data wait <= 2 % of step time


def measure(args, workers: int, pin: bool, step) -> dict:
    import numpy as np
    import torch

    loader, _, _ = common.dataset_loader(args.workspace, args.dataset, args.frames, num_workers=workers,
                                         pin_memory=pin, persistent_workers=workers > 0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    data = iter(loader)
    next(data)
    first = time.perf_counter() - t0
    waits = []
    t_start = time.perf_counter()
    for _ in range(args.steps):
        t = time.perf_counter()
        batch = next(data)
        waits.append(time.perf_counter() - t)
        if step is None:
            if device == "cuda":  # the host-to-device copy the trainer makes (asynchronous from pinned memory)
                batch = {k: v.to(device, non_blocking=pin) for k, v in batch.items() if torch.is_tensor(v)}
            time.sleep(args.step_ms / 1e3)  # the GPU computes; the training process waits on it
        else:
            step(batch)
    common.sync(device)
    wall = time.perf_counter() - t_start
    del data, loader
    w = np.array(waits) * 1e3
    frac = float(w.sum() / 1e3 / wall)
    return {"workers": workers, "pin_memory": pin, "first_batch_s": first, "wait_mean_ms": float(w.mean()),
            "wait_p95_ms": float(np.percentile(w, 95)), "wait_max_ms": float(w.max()), "wait_fraction": frac,
            "step_ms": 1e3 * wall / args.steps, "gpu_waits": "yes" if frac > GOAL else "no"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=None, help="a prepared dataset (default: espeak-ng clips in a temp workspace)")
    p.add_argument("--workspace", type=Path, default=None, help="workspace holding --dataset")
    p.add_argument("--clips", type=int, default=40, help="without --dataset: how many clips espeak-ng speaks")
    p.add_argument("--frames", type=int, default=None, help="padded mel frames per batch (default: the recommendation)")
    p.add_argument("--workers", type=int, nargs="+", default=None,
                   help="worker counts (default 0 1 2; 0 1 2 4 8 on a GPU)")
    p.add_argument("--steps", type=int, default=30, help="timed batches per worker count")
    p.add_argument("--step-ms", type=float, default=50.0, help="simulated GPU time per step")
    p.add_argument("--preset", default=None, help="run this preset's real training step instead of sleeping")
    common.add_machine_args(p)
    args = p.parse_args()

    report = common.start(args)
    gpu = report.device == "cuda"
    args.frames = args.frames or report.recommended["max_frames_per_batch"].value
    workers = args.workers or ([0, 1, 2, 4, 8] if gpu else [0, 1, 2])
    tmp = None
    if not args.dataset:
        tmp = Path(tempfile.mkdtemp(prefix="bench-loading-"))
        print(f"speaking {args.clips} clips with espeak-ng ...", flush=True)
        args.workspace, args.dataset = common.espeak_dataset(tmp, n_train=args.clips).root, "bench"
    try:
        step = None
        if args.preset:
            _, n_symbols, n_speakers = common.dataset_loader(args.workspace, args.dataset, args.frames)
            step = common.train_step(args.preset, common.SPEED, report, n_symbols, n_speakers)[0]
        what = f"a real {args.preset} training step" if step else f"a simulated {args.step_ms:.0f} ms GPU step"
        print(f"# {args.frames} frames per batch, {args.steps} steps per row, {what}; {common.machine()['summary']}",
              flush=True)
        rows = [measure(args, w, gpu, step) for w in workers]
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(common.markdown_table(COLUMNS, rows))

    def draw(fig):
        ax = fig.subplots()
        xs = [str(r["workers"]) for r in rows]
        ax.bar(xs, [100 * r["wait_fraction"] for r in rows], color="tab:blue", label="mean wait / wall")
        ax.plot(xs, [100 * r["wait_max_ms"] / r["step_ms"] for r in rows], "o", color="tab:red",
                label="worst single wait / step time")
        ax.axhline(100 * GOAL, color="grey", ls="--", label="goal: 2 %")
        ax.set_xlabel("DataLoader workers")
        ax.set_ylabel("% of step time spent waiting for data")
        ax.legend(fontsize=8)

    common.save("data_loading", {"frames_per_batch": args.frames, "steps": args.steps,
                                 "step": what, "dataset": None if tmp else args.dataset, "rows": rows}, draw, args.out)


if __name__ == "__main__":
    main()
