"""A training step before and after the shared training loop (utils/training/loop.py), side by side in one run.

    python bench/engine_overhead.py                      # before = commit 0f62882 (the last with two trainers)
    python bench/engine_overhead.py --before REV --steps 60 --repeats 3

Why: the acoustic trainer and the vocoder GAN trainer became two adapters on one training loop; the loop must not
make a step slower. The old code is checked out of git into a temporary worktree; both trees train the same
tiny runs on the same espeak-ng dataset, as `python -m ... --config` subprocesses, alternating old and new
`--repeats` times. A step's cost is read from the runs' own metrics after a warm-up: for the acoustic model
the wall time between the logged rows (each row covers `log_every` steps), for the vocoder its fixed crops per
step over the logged samples/s. Ratio = new / old (1.00 = the same cost).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import common  # bench/common.py; puts the repository root on sys.path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = [("model", "model"), ("old_ms", "before ms/step", "{:.1f}"), ("new_ms", "engine ms/step", "{:.1f}"),
           ("ratio", "engine / before", "{:.3f}"), ("runs", "runs each")]


def acoustic_config(ws: Path, run: str, steps: int) -> dict:
    return {"train": {"workspace": str(ws), "dataset": "bench", "run": run, "preset": "tiny", "max_steps": steps,
                      "log_every": 10, "eval_every": 0, "checkpoint_every": 100_000, "max_frames_per_batch": 600,
                      "grad_accumulation": 1, "num_workers": 0, "resume": "none", "mcd": "logmel", "eval_clips": 1,
                      "sample_clips": 0, "ode_steps": 2, "eval_vocoder": "griffin-lim", "lr": 1e-3}}


def vocoder_config(ws: Path, run: str, steps: int) -> dict:
    return {"kind": "vocoder", "workspace": str(ws), "dataset": "bench", "run": run, "preset": "tiny",
            "max_steps": steps, "batch_size": 4, "segment": 8192, "log_every": 10, "eval_every": 0,
            "save_every": 0, "mcd_clips": 0, "val_clips": 1, "device": "cpu"}


def run_once(tree: Path, module: str, ws: Path, config: dict, threads: int) -> list[dict]:
    """Train in a subprocess of `tree`'s code; the run's metrics rows."""
    run_dir = ws / "runs" / (config.get("run") or config["train"]["run"])
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", module, "--config", str(run_dir / "config.json")], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{tree.name} {module} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def acoustic_ms(rows: list[dict]) -> float:
    """Wall time per step between logged rows, the first row (warm-up: first batches, allocator) left out."""
    rows = [r for r in rows if "loss" in r and "time" in r]
    return 1000 * (rows[-1]["time"] - rows[1]["time"]) / (rows[-1]["step"] - rows[1]["step"])


def vocoder_ms(rows: list[dict], batch: int) -> float:
    rates = [r["samples_per_s"] for r in rows if "loss_g" in r][1:]
    return 1000 * batch / (sum(rates) / len(rates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="0f62882", help="git revision of the code before the engine")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3, help="odd, so the median is one of the runs")
    parser.add_argument("--threads", type=int, default=2)
    common.add_output_args(parser)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="engine-bench-"))
    old = tmp / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), args.before], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        ws = common.espeak_dataset(tmp / "ws", n_train=12, n_val=1, max_chars=50).root
        times = {("acoustic", "old"): [], ("acoustic", "new"): [], ("vocoder", "old"): [], ("vocoder", "new"): []}
        for i in range(args.repeats):
            for label, tree in (("old", old), ("new", ROOT)):
                rows = run_once(tree, "utils.training", ws, acoustic_config(ws, f"a-{label}", args.steps), args.threads)
                times[("acoustic", label)].append(acoustic_ms(rows))
                rows = run_once(tree, "utils.vocoder.training", ws, vocoder_config(ws, f"v-{label}", args.steps // 2),
                                args.threads)
                times[("vocoder", label)].append(vocoder_ms(rows, 4))
                print(f"repeat {i + 1} {label}: acoustic {times[('acoustic', label)][-1]:.1f} ms/step, "
                      f"vocoder {times[('vocoder', label)][-1]:.1f} ms/step", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for model in ("acoustic", "vocoder"):
        o = sorted(times[(model, "old")])[len(times[(model, "old")]) // 2]  # median of the repeats
        n = sorted(times[(model, "new")])[len(times[(model, "new")]) // 2]
        rows.append({"model": f"{model} (tiny)", "old_ms": o, "new_ms": n, "ratio": n / o, "runs": args.repeats})
    print(common.markdown_table(COLUMNS, rows))
    common.save("engine_overhead", {"before": args.before, "steps": args.steps, "rows": rows,
                                    "all": {f"{m}-{t}": v for (m, t), v in times.items()}}, out=args.out)


if __name__ == "__main__":
    main()
