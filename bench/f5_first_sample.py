"""How soon a curator hears an F5 run: wall time from Start (the trainer's process begins) to the first evaluation's
audio sample, for a tiny random F5 on an espeak-ng Amharic corpus, with the early evaluations (early_evals) against
without them (the first scheduled evaluation only).

    python bench/f5_first_sample.py                          # CPU: tiny F5, 40 clips, first sample at step 20 vs 200
    python bench/f5_first_sample.py --early 200 --eval-every 1000 --init FOLDER   # a GPU with a real base

Why: a fine-tune of hours should say within its first quarter hour whether the language is coming; the time to
the first sample is what the early evaluations buy. Prints seconds to the first sample, its step and its MCD.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import common  # bench/common.py; puts the repository root on sys.path

COLUMNS = [("schedule", "evaluations"), ("first_step", "first sample at step"),
           ("seconds", "seconds to it", "{:.0f}"), ("mcd", "its MCD (dB)", "{:.1f}")]


def first_sample(ws, name: str, args, early: str) -> dict:
    """Run the trainer in a thread and time the first samples/step-N/*.wav from its start."""
    from utils.training import TrainConfig, prepare_run, run
    from utils.workspace import read_jsonl

    cfg = TrainConfig(workspace=str(ws.root), dataset="bench", run=name, engine="f5", preset=args.preset,
                      init=args.init, licence_accepted="bench" if args.init else "", max_steps=args.eval_every,
                      eval_every=args.eval_every, early_evals=early, checkpoint_every=args.eval_every, log_every=10,
                      eval_clips=2, sample_clips=1, ode_steps=8, eval_vocoder="griffin-lim", mcd="logmel")
    path = prepare_run(cfg)
    run_dir, started = path.parent, time.perf_counter()
    done = threading.Event()
    worker = threading.Thread(target=lambda: (run(path), done.set()), daemon=True)
    worker.start()
    while not done.is_set() and not list(run_dir.glob("samples/step-*/*.wav")):
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    worker.join()
    first = min(int(p.parent.name.split("-")[1]) for p in run_dir.glob("samples/step-*/*.wav"))
    mcd = next(r["mcd"] for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("step") == first and "mcd" in r)
    return {"schedule": f"early {early}, every {args.eval_every}" if early != "none" else f"every {args.eval_every}",
            "first_step": first, "seconds": seconds, "mcd": mcd}


def warm_features(ws) -> None:
    from utils.audio import FeatureConfig
    from utils.datasets import features, load_manifest

    for row in load_manifest(ws, "bench"):
        features(ws, "bench", row, FeatureConfig(log_floor=1e-5))  # F5's features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--init", default="", help="an F5 base folder (default: a tiny random F5 from zero)")
    parser.add_argument("--clips", type=int, default=40)
    parser.add_argument("--early", default="20", help="the early evaluation steps (early_evals)")
    parser.add_argument("--eval-every", type=int, default=200)
    common.add_machine_args(parser)
    args = parser.parse_args()
    report = common.start(args)
    with tempfile.TemporaryDirectory() as tmp:
        ws = common.espeak_dataset(Path(tmp), n_train=args.clips, n_val=2)
        warm_features(ws)  # the mel cache both runs read: its one-time cost is not what is compared
        rows = [first_sample(ws, f"{label}", args, early) for label, early in (("early", args.early),
                                                                              ("scheduled", "none"))]
    print(common.markdown_table(COLUMNS, rows))
    common.save("f5_first_sample", {"device": report.device, "rows": rows}, out=args.out)


if __name__ == "__main__":
    main()
