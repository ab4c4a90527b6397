"""An MMS fine-tune of 100 clips against Matcha tiny at the same wall time: held-out MCD as the runs go.

    python bench/mms_finetune.py --base workspace/pretrained/mms-tts-amh   # Meta's base (downloaded, or copied)
    python bench/mms_finetune.py                                          # no base here: a random one of its size
    python bench/mms_finetune.py --minutes 30 --clips 100 --val-clips 8

Why: the MMS engine is offered for an hour or two of speech on any machine; this says what a curator's CPU gets
from it in the time Matcha tiny takes to reach its first clear voice. Both runs are the real trainer
(bench/time_to_quality.py's `train_once`: `utils.training.run`, stopped by its STOP file after `--minutes`) on the
same espeak-ng Amharic clips of one voice, held-out sentences never trained on, scored with the project's MCD
(WORLD/SPTK): Matcha's through Griffin-Lim (its copy-synthesis floor is ~4.4 dB, bench/mcd_calibration.py), MMS's
from its own decoder. Without `--base`, the MMS run starts from random weights of the published size: its step
time is the real one, its quality is not a fine-tune's (that needs Meta's weights, which only the hub has).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
from time_to_quality import train_once

CURVE = [("engine", "engine"), ("step", "step"), ("minutes", "minutes (wall)", "{:.1f}"),
         ("mcd", "held-out MCD dB", "{:.2f}")]
SUMMARY = [("engine", "engine"), ("steps", "steps"), ("s_per_step", "s a step", "{:.1f}"),
           ("best", "best MCD dB", "{:.2f}"), ("best_step", "at step"), ("last", "last MCD dB", "{:.2f}")]
MATCHA_CPU = dict(lr=2e-3, warmup_steps=50, grad_accumulation=1, max_frames_per_batch=2000, ema_decay=0.99,
                  eval_vocoder="griffin-lim")  # RESULTS.md's held-out tiny run (bench/time_to_quality.py on a CPU)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, default=None, help="an MMS base folder (default: a random one of its size)")
    p.add_argument("--minutes", type=float, default=15.0, help="wall minutes for each engine")
    p.add_argument("--clips", type=int, default=100, help="training clips (espeak-ng, one voice)")
    p.add_argument("--val-clips", type=int, default=8, help="held-out clips scored at each evaluation")
    p.add_argument("--mms-eval-every", type=int, default=25, help="MMS steps between evaluations (~a pass of 100 "
                                                                  "clips at 4 a step)")
    p.add_argument("--matcha-eval-every", type=int, default=100, help="Matcha steps between evaluations")
    p.add_argument("--keep", type=Path, default=None, help="keep the workspace here (default: a temporary one)")
    p.add_argument("--engines", nargs="+", default=["mms", "matcha tiny"], choices=["mms", "matcha tiny"],
                   help="which runs (default both)")
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)

    from tests.helpers import make_dataset
    from tests.mms_fixtures import tiny_base

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-mms-ft-"))
    print(f"speaking {args.clips} + {args.val_clips} held-out clips with espeak-ng ...", flush=True)
    ws = make_dataset(root, name="bench", n_train=args.clips, n_val=args.val_clips, voices=("am",), max_chars=60)
    base = root / "pretrained" / "mms"
    if args.base:
        shutil.copytree(args.base, base, dirs_exist_ok=True)
    else:
        tiny_base(base, real_size=True)
    run_args = SimpleNamespace(workspace=ws.root, dataset="bench", eval_clips=args.val_clips, mcd="world", steps=None,
                               defaults=False)
    settings = {"mms": dict(engine="mms", init="pretrained/mms", ema_decay=0.99), "matcha tiny": MATCHA_CPU}
    every = {"mms": args.mms_eval_every, "matcha tiny": args.matcha_eval_every}
    curves, summary = [], []
    for engine, extra in ((e, settings[e]) for e in args.engines):
        start = f", from {args.base or 'a random base of the published size'}" if engine == "mms" else ""
        print(f"# {engine}: {args.minutes:g} min{start}", flush=True)
        result, curve, wall, _ = train_once(run_args, "tiny", args.minutes, every[engine], engine.replace(" ", "-"),
                                            extra)
        curves += [{"engine": engine, **c} for c in curve]
        best = min(curve, key=lambda c: c["mcd"]) if curve else {}
        summary.append({"engine": engine, "steps": result["step"], "s_per_step": wall / max(1, result["step"]),
                        "best": best.get("mcd"), "best_step": best.get("step"),
                        "last": curve[-1]["mcd"] if curve else None})
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n# {args.clips} clips, {args.minutes:g} min each, MMS from "
          f"{args.base or 'random weights of the published size'}; {common.machine()['summary']}")
    print(common.markdown_table(CURVE, curves))
    print(common.markdown_table(SUMMARY, summary))
    common.save("mms_finetune", {"base": str(args.base) if args.base else None, "minutes": args.minutes,
                                 "clips": args.clips, "curves": curves, "summary": summary}, out=args.out)


if __name__ == "__main__":
    main()
