"""Dataset preparation throughput: audio hours per wall minute, and where the time goes.

    python bench/prepare.py --hours 0.5                    # small CPU run
    python bench/prepare.py --hours 20 --workers 16        # a 16-core GPU machine
    python bench/prepare.py --hours 2 --device cpu         # mels in the CPU workers even with a GPU

Builds an LJSpeech-style dataset of unique clips (espeak-ng Amharic sentences at 22.05 kHz, each
copy with its own gain, padding and a little noise so no two clips share a hash), then runs the real
`prepare` on it. Reports: wall time per pipeline stage, worker CPU seconds per step (decode,
resample, trim+normalize, write+hash, text checks, mels), throughput, and the I/O floor: the same
workers only reading and decoding the raw files. Results go to bench/out/prepare-<cpu|cuda>.json and .png.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import numpy as np
import soundfile as sf

from tests.helpers import espeak_amharic, sentences  # noqa: E402
from utils.datasets import prepare  # noqa: E402
from utils.workspace import Workspace, read_jsonl  # noqa: E402

SR = 22050


def _write_chunk(args) -> float:
    """Write clips [lo, hi) from the base sentences; returns seconds of audio written."""
    out, lo, hi, bases = args
    rng = np.random.default_rng(lo)
    total = 0.0
    for i in range(lo, hi):
        base = bases[i % len(bases)]
        pad = np.zeros(int(rng.uniform(0.1, 0.4) * SR), np.float32)
        a = np.concatenate([pad, base * rng.uniform(0.3, 0.9), pad])
        a += rng.normal(0, 1e-3, len(a)).astype(np.float32)
        sf.write(str(out / "wavs" / f"b{i:07d}.wav"), a, SR, subtype="PCM_16")
        total += len(a) / SR
    return total


def make_dataset(out: Path, hours: float, workers: int) -> tuple[int, float]:
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    texts = sentences(40)
    tmp = Path(tempfile.mkdtemp())
    bases = []
    for i, t in enumerate(texts):
        a, _ = sf.read(str(espeak_amharic(t, tmp / f"{i}.wav")), dtype="float32")
        bases.append(a)
    shutil.rmtree(tmp)
    mean = float(np.mean([len(b) for b in bases])) / SR + 0.5
    n = max(1, int(hours * 3600 / mean))
    step = max(1, n // (workers * 4))
    with ProcessPoolExecutor(workers) as pool:
        seconds = sum(pool.map(_write_chunk, [(out, lo, min(n, lo + step), bases) for lo in range(0, n, step)]))
    (out / "metadata.csv").write_text("".join(f"b{i:07d}|{texts[i % len(texts)]}\n" for i in range(n)), encoding="utf-8")
    return n, seconds


def _decode(path: str) -> int:
    return len(sf.read(path, dtype="float32")[0])


def io_floor(wavs: list[Path], workers: int) -> float:
    t = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_decode, map(str, wavs), chunksize=64))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=0.25, help="audio to generate and prepare")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--device", default=None, help="cuda | cpu (default: what utils.hardware picks)")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one, deleted after)")
    common.add_output_args(ap)
    args = ap.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-prepare-"))
    try:
        t = time.perf_counter()
        n, seconds = make_dataset(work / "src", args.hours, args.workers)
        print(f"generated {n} clips, {seconds / 3600:.2f} h in {time.perf_counter() - t:.0f} s", flush=True)
        floor = io_floor(sorted((work / "src" / "wavs").iterdir()), args.workers)

        ws = Workspace.open(work / "ws")
        stages: dict[str, list[float]] = {}
        start = last = time.perf_counter()
        for ev in prepare(ws, "bench", work / "src", workers=args.workers, device=args.device):
            now = time.perf_counter()
            stages.setdefault(ev.stage, [last, now])[1] = now
            last = now
            result = ev.result or None
        wall = time.perf_counter() - start

        steps = defaultdict(float)
        for d in read_jsonl(ws.dataset_dir("bench") / ".prepare" / "done.jsonl"):
            for k, v in (d["result"].get("timing") or {}).items():
                steps[k] += v
        device = args.device or __import__("utils.hardware", fromlist=["device"]).device()
        gpu = ""
        if device == "cuda":
            import torch

            gpu = torch.cuda.get_device_name(0)
        report = {
            "setup": {"workers": args.workers, "device": device, "gpu": gpu},
            "clips": n, "audio_hours": round(seconds / 3600, 3), "wall_s": round(wall, 1),
            "hours_per_wall_minute": round(seconds / 3600 / (wall / 60), 2),
            "io_floor_s": round(floor, 1), "io_floor_hours_per_minute": round(seconds / 3600 / (floor / 60), 2),
            "stages_wall_s": {k: round(b - a, 2) for k, (a, b) in stages.items()},
            "worker_cpu_s": {k: round(v, 1) for k, v in steps.items()},
            "summary": result,
        }
        print("\n| clips | audio h | workers | device | wall s | h / wall min | decode-only floor s |")
        print("|---|---|---|---|---|---|---|")
        print(f"| {n} | {seconds / 3600:.2f} | {args.workers} | {device} {gpu} | {wall:.1f} | "
              f"{report['hours_per_wall_minute']} | {floor:.1f} |")
        print("\nstage wall seconds: " + ", ".join(f"{k} {v}" for k, v in report["stages_wall_s"].items()))
        total_cpu = sum(steps.values()) or 1
        print("worker CPU seconds: " + ", ".join(f"{k} {v:.1f} ({v / total_cpu:.0%})" for k, v in steps.items()))

        def draw(fig):
            ax = fig.subplots()
            ax.pie(list(steps.values()), labels=[f"{k} {v / total_cpu:.0%}" for k, v in steps.items()],
                   textprops={"fontsize": 8})
            ax.set_title(f"{report['hours_per_wall_minute']} audio hours per wall minute, {args.workers} workers; "
                         "worker CPU time by step", fontsize=9)

        common.save("prepare", report, draw if steps else None, args.out)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
