"""A CPU training step when the machine is shared: quiet, beside one busy core, and two trainings at once, with
libgomp's own spinning (300,000 spins before an idle OpenMP thread sleeps) against the studio's (1,000; set in
utils/__init__.py before torch loads). Each cell is `bench/train_throughput.py --rows fp32` (Matcha tiny, fp32,
a synthetic batch) in a fresh process with that GOMP_SPINCOUNT; the busy core is `python -c "while True: pass"`.

    python bench/cpu_sharing.py                    # ~3 min on 2 cores
    python bench/cpu_sharing.py --spins 300000 1000 200 --frames 2000
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

STEP = re.compile(r"fp32 eager: ([\d.]+) ms/step")


def step_ms(spins: int, args, at_once: int = 1) -> list[float]:
    """ms a step of each of `at_once` trainings started together with GOMP_SPINCOUNT=spins."""
    env = {**os.environ, "GOMP_SPINCOUNT": str(spins)}
    cmd = [sys.executable, str(common.ROOT / "bench" / "train_throughput.py"), "--frames", str(args.frames),
           "--steps", str(args.steps), "--warmup", "3", "--rows", "fp32"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(at_once)]
    outs = [p.communicate()[0] for p in procs]
    return [float(STEP.search(out).group(1)) for out in outs]


def busy_core():
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spins", type=int, nargs="+", default=[300_000, 1000], help="GOMP_SPINCOUNT values compared")
    p.add_argument("--frames", type=int, default=2000, help="frames a batch (the CPU default)")
    p.add_argument("--steps", type=int, default=20, help="timed steps a cell")
    args = p.parse_args()
    print(f"# {common.machine()['summary']}; {common.command()}", flush=True)
    rows = []
    for spins in args.spins:
        quiet = step_ms(spins, args)[0]
        other = busy_core()
        time.sleep(1)
        try:
            beside = step_ms(spins, args)[0]
        finally:
            other.kill()
        together = step_ms(spins, args, at_once=2)
        rows.append({"spins": f"{spins:,}", "quiet": quiet, "beside": beside, "together": max(together)})
        print(f"  {spins:,} spins: quiet {quiet:.0f} ms, beside a busy core {beside:.0f} ms, two at once "
              f"{' and '.join(f'{t:.0f}' for t in together)} ms", flush=True)
    first = rows[0]
    for r in rows:
        r.update({f"{k}_vs": first[k] / r[k] for k in ("quiet", "beside", "together")})
    print(common.markdown_table([("spins", "GOMP_SPINCOUNT"), ("quiet", "quiet ms/step", "{:.0f}"),
                                 ("beside", "beside a busy core", "{:.0f}"),
                                 ("together", "two trainings at once (slower)", "{:.0f}"),
                                 ("quiet_vs", "quiet speed-up", "{:.2f}x"), ("beside_vs", "beside speed-up", "{:.2f}x"),
                                 ("together_vs", "at once speed-up", "{:.2f}x")], rows))
    common.save("cpu_sharing", {"rows": rows})


if __name__ == "__main__":
    main()
