"""A compiled run's warm-up when Inductor's cache in the workspace already holds its kernels, against the first's.

    python bench/compile_cache.py --workspace WS --dataset bench      # tiny preset, real Inductor, on this CPU

Why: every new Colab session (and every resume in a new process) compiled its graphs again from nothing. A run that
compiles now keeps Inductor's cache in the workspace (`cache/inductor`, utils/training/compile_pays.py). This empties
that cache, then trains the same short compiled run twice, each in a process of its own (nothing kept in memory
between them), and prints what each run's log says its graphs cost: the second run's is what a resume or a new
session pays. Clips are padded to one length bucket (--length-multiple 512: one shape, two graphs, forward and
backward) to keep it short.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import common  # bench/common.py: the repository root on sys.path


def train(workspace: str, dataset: str, run: str, steps: int, max_frames: int) -> None:
    from utils.training import prepare_run, run as run_to_end
    from utils.training.config import TrainConfig

    cfg = TrainConfig(workspace=workspace, dataset=dataset, run=run, preset="tiny", max_steps=steps, evaluate=False,
                      compile="true", max_frames_per_batch=max_frames, length_multiple=512, grad_accumulation=1,
                      checkpoint_every=0, log_every=1, device="cpu")
    run_to_end(prepare_run(cfg))


def warm_up(log: str) -> dict:
    """Each graph's seconds as the run's log says them, and the first step's."""
    graphs = [float(s) for s in re.findall(r"graph \d+ (?:of ~\d+ )?built for the .* in ([\d.]+) s", log)]
    first = re.search(r"first step took (\d+) s", log)
    return {"graphs": len(graphs), "graph_s": sum(graphs), "first_step_s": float(first.group(1)) if first else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workspace", required=True)
    p.add_argument("--dataset", default="bench")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--max-frames", type=int, default=1024)
    p.add_argument("--child", help=argparse.SUPPRESS)  # one run, in its own process
    args = p.parse_args()
    if args.child:
        return train(args.workspace, args.dataset, args.child, args.steps, args.max_frames)
    from utils.training.compile_pays import cache_dir

    shutil.rmtree(cache_dir(args.workspace), ignore_errors=True)
    rows = []
    for n, run in enumerate(("cold-cache", "warm-cache")):
        shutil.rmtree(Path(args.workspace) / "runs" / run, ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", run], check=True,
                       stdout=subprocess.DEVNULL)
        log = (Path(args.workspace) / "runs" / run / "train.log").read_text(encoding="utf-8")
        rows.append({"run": f"{n + 1}: {run}", **warm_up(log), "wall_s": time.perf_counter() - t0})
        print(rows[-1], flush=True)
    print()
    print(common.markdown_table([("run", "run"), ("graphs", "graphs built"), ("graph_s", "their seconds", "{:.1f}"),
                                 ("first_step_s", "first step s", "{:.0f}"), ("wall_s", "whole run s", "{:.0f}")],
                                rows))
    print(f"\nsecond run's graphs took {rows[1]['graph_s'] / max(rows[0]['graph_s'], 1e-9):.0%} of the first's")
    print(f"\n`{common.command()}`; {common.machine()['summary']}")


if __name__ == "__main__":
    main()
