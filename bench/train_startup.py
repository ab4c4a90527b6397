"""What a training run reads before its first step, before and after the digest index and the sampled
normalisation statistics, side by side in one process.

    python bench/train_startup.py                       # 2000 synthetic 3 s clips (1.7 h), page cache dropped
    python bench/train_startup.py --clips 200 --warm    # quick, files left in the page cache

Why: every start (and every resume, and every DDP rank) looks at each training clip: the frames it has
(for the length-bucketed batches) and the mel mean/std. It used to hash each clip's WAV to find its cached
mel (reading all the audio: 35 GB for 200 hours), load every mel to learn its length, then load every mel
again for the statistics. Now: the dataset's digest index (`features/digests.jsonl`, written by prepare)
turns each lookup into one stat, the lengths come from the cache's frames index (`frames.jsonl`, written
with each mel), and the statistics read at most `MEL_STATS_CLIPS` clips spread over the set. Rows: the old path (hash + full loads, both statistics passes)
and the new path, each on a fresh memo; with `--cold` (the default) the files are dropped from the page
cache before each row (posix_fadvise), as after a reboot or on a dataset larger than RAM. The last column
scales the per-clip parts to 200 hours of clips of the same length (an estimate, not a measurement);
sampled statistics do not grow with the dataset.
"""
from __future__ import annotations

import argparse
import importlib
import os
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("label", "path"), ("clips", "clips"), ("hash_s", "hash s", "{:.2f}"), ("frames_s", "frames s", "{:.2f}"),
           ("stats_s", "mel stats s", "{:.2f}"), ("total_s", "total s", "{:.2f}"),
           ("mb_read", "MB read", "{:,.0f}"), ("per_200h_min", "200 h (min, est.)", "{:.1f}")]


def make_dataset(ws, n: int, seconds: float) -> list[dict]:
    """n clips of noise at the model rate with their cached mels, as prepare leaves them (manifest rows +
    digest index + feature cache)."""
    import numpy as np

    from utils.audio import FeatureConfig, file_digest, save_audio
    from utils.datasets.features import compute_and_store, record_digests

    ds = ws.dataset_dir("startup")
    rng = np.random.default_rng(0)
    rows, cfg = [], FeatureConfig()
    for i in range(n):
        wav = ds / "audio" / f"c{i:05d}.wav"
        save_audio(wav, (0.1 * rng.standard_normal(int(seconds * cfg.sample_rate))).astype(np.float32),
                   cfg.sample_rate)
        sha1 = file_digest(wav)
        compute_and_store(wav, ds / "features" / cfg.key(), sha1, cfg.to_dict())
        rows.append({"id": wav.stem, "audio": f"audio/{wav.name}", "sha1": sha1, "duration": seconds})
    record_digests(ds, [(ds / r["audio"], r["sha1"]) for r in rows])
    return rows


def drop_page_cache(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def fresh_memo(feat) -> None:
    """As in a newly started process (the trainer, a DDP rank, a loader worker)."""
    for memo in (feat._DIGESTS, feat._FRAMES, feat._READ):
        memo.clear()


def read_bytes() -> int:
    with open(f"/proc/{os.getpid()}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


def measure(label: str, ws, rows: list[dict], old: bool, cold: bool) -> dict:
    from utils.audio import FeatureConfig
    from utils.training.data import MEL_STATS_CLIPS, Item, mel_stats

    feat = importlib.import_module("utils.datasets.features")  # the package exports a function of that name
    cfg, ds = FeatureConfig(), ws.dataset_dir("startup")
    fresh_memo(feat)
    if cold:
        drop_page_cache(ds)
    start_bytes, t0 = read_bytes(), time.perf_counter()
    if old:  # every clip hashed (no index), every mel loaded for its length
        for r in rows:
            feat.content_sha1(ds / r["audio"])
    t1 = time.perf_counter()
    frames = [int(feat.features(ws, "startup", r, cfg).shape[-1]) if old else feat.feature_frames(ws, "startup", r, cfg)
              for r in rows]
    t2 = time.perf_counter()
    items = [Item(r, [1], f, 0) for r, f in zip(rows, frames)]
    mean, std = mel_stats(ws, "startup", items, cfg, **({"max_clips": len(items)} if old else {}))
    t3 = time.perf_counter()
    scale = 200 / (sum(r["duration"] for r in rows) / 3600)  # to 200 hours of clips of this length
    sampled = not old and len(rows) >= MEL_STATS_CLIPS  # the statistics read a fixed number of clips
    return {"label": label, "clips": len(rows), "hash_s": t1 - t0, "frames_s": t2 - t1, "stats_s": t3 - t2,
            "total_s": t3 - t0, "mb_read": (read_bytes() - start_bytes) / 2**20, "mel_mean": mean, "mel_std": std,
            "per_200h_min": ((t2 - t0) * scale + (t3 - t2) * (1 if sampled else scale)) / 60}


def plot(results: list[dict]):
    def draw(fig):
        ax = fig.add_subplot(1, 1, 1)
        bottom = [0.0] * len(results)
        for key, label in (("hash_s", "hash the audio"), ("frames_s", "mel lengths"), ("stats_s", "mel statistics")):
            values = [r[key] for r in results]
            ax.barh(range(len(results)), values, left=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_yticks(range(len(results)), [r["label"].split(":")[0] for r in results])
        ax.set_xlabel(f"seconds before the first step ({results[0]['clips']} clips)")
        ax.legend()
    return draw


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=3.0, help="length of each clip")
    p.add_argument("--warm", action="store_true", help="leave the files in the page cache between rows")
    common.add_output_args(p)
    args = p.parse_args()
    from utils.workspace import Workspace

    print(f"# {args.clips} clips of {args.seconds:g} s, page cache {'warm' if args.warm else 'dropped'} before "
          f"each row; {common.machine()['cpu']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace.open(Path(tmp) / "ws")
        t0 = time.perf_counter()
        rows = make_dataset(ws, args.clips, args.seconds)
        print(f"  dataset made in {time.perf_counter() - t0:.0f} s", flush=True)
        results = [measure("before: hash every WAV, load every mel twice", ws, rows, old=True, cold=not args.warm),
                   measure("now: digest and frames indexes, sampled statistics", ws, rows, old=False,
                           cold=not args.warm)]
    before, now = results
    print(common.markdown_table(COLUMNS, results))
    print(f"speed-up {before['total_s'] / now['total_s']:.1f}x; mel mean/std {now['mel_mean']:.3f}/{now['mel_std']:.3f} "
          f"(sampled) vs {before['mel_mean']:.3f}/{before['mel_std']:.3f} (all clips)")
    common.save("train_startup", {"clips": args.clips, "seconds": args.seconds, "cold": not args.warm,
                                  "rows": results, "speedup": before["total_s"] / now["total_s"]}, plot(results),
                args.out)


if __name__ == "__main__":
    main()
