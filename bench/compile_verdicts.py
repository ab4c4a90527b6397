"""What `compile: auto` decides, card by card, before a run reads its data (utils/training/compile_pays.py).

    python bench/compile_verdicts.py                       # T4 .. H100, 2 .. 16 CPU cores, Matcha base
    python bench/compile_verdicts.py --preset small --steps 5000 20000

Why: the decision is made from estimates (what a graph costs on this many CPU cores, what a compiled step saves on
this card) until a run of the workspace has measured its graphs; this prints, for fake machines as the tests make
them, whether a run compiles, from how many steps it would pay, and from what time limit (max_minutes) a run that
has one would. Nothing is timed or compiled.
"""
from __future__ import annotations

import argparse
import re

import common  # bench/common.py: the repository root on sys.path

CARDS = (("Tesla T4", 14.7, "7.5"), ("NVIDIA L4", 22.5, "8.9"), ("NVIDIA A100-SXM4-80GB", 79.2, "8.0"),
         ("NVIDIA H100 80GB HBM3", 79.2, "9.0"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base")
    p.add_argument("--cores", type=int, nargs="+", default=[2, 8, 16])
    p.add_argument("--steps", type=int, nargs="+", default=[2000, 10000, 20000, 50000])
    args = p.parse_args()
    import tempfile

    from utils import hardware
    from utils.matcha.adapter import MatchaAdapter
    from utils.training import optimization as opt
    from utils.training.config import TrainConfig

    rows = []
    with tempfile.TemporaryDirectory() as empty:  # a workspace with no measured graphs and a cold cache
        for name, memory, compute in CARDS:
            for cores in args.cores:
                report = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, name, memory, compute, 40)],
                                                 cpu_count=cores, ram_gb=64, disk_free_gb=100)
                report.recommended = hardware.recommend(report)
                row = {"card": name, "cores": cores}
                for steps in [1, *args.steps]:  # a 1-step run never pays: its reason says from when it would
                    cfg = TrainConfig(preset=args.preset, max_steps=steps, workspace=empty)
                    m = opt.resolve(cfg, report, plan=MatchaAdapter.memory_plan(cfg))
                    row[steps] = "on" if m.compile else "off"
                    if steps == 1:
                        pays = re.search(r"pays from about (\d+) steps", m.reasons["compile"]).group(1)
                        row["pays from"] = f"{int(pays):,} steps"
                        row["why"] = m.reasons["compile"].split("(", 1)[1].split(";")[0]  # the graphs' cost
                # under a time limit (max_minutes) the steps are those it leaves time for: the least limit that pays
                cfg = TrainConfig(preset=args.preset, max_steps=10**7, max_minutes=1, workspace=empty)
                m = opt.resolve(cfg, report, plan=MatchaAdapter.memory_plan(cfg))
                row["limit"] = re.search(r"a time limit of about (.+?) or more", m.reasons["compile"]).group(1)
                rows.append(row)
    print(common.markdown_table([("card", "card"), ("cores", "CPU cores"),
                                 *[(s, f"{s:,} steps") for s in args.steps], ("pays from", "pays from about"),
                                 ("limit", "with a time limit, from about"), ("why", "the graphs' cost")], rows))
    print(f"\nMatcha `{args.preset}`, the trainer's guessed batch, at most 8 shapes x 2 parts; `{common.command()}`")


if __name__ == "__main__":
    main()
