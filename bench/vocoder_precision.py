"""Does bf16 autocast train the vocoder as well as fp32? The same run (data, seed, steps) once per
precision, one after the other in one process, held-out scores side by side.

    python bench/vocoder_precision.py                             # CPU: tiny, 200 steps each (~10 min)
    python bench/vocoder_precision.py --preset mel-24khz --steps 2000 --batch 16 --segment 16384   # a GPU

Why: on a GPU the trainer runs the vocoder's convolutions in bf16 by default (utils/vocoder/training.py);
a GAN is the kind of model where a precision change could quietly hurt. On a CPU bf16 is slower (no
bf16 units on this VM), so read the CPU rows for learning, not speed. Data: espeak-ng Amharic clips
(bench/common.espeak_dataset), or --dataset/--workspace.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("precision", "precision"), ("steps", "steps"), ("wall_s", "wall s", "{:.0f}"),
           ("loss_mel_last", "train mel L1 (last 20 steps)", "{:.3f}"), ("val_mel_l1", "val mel L1", "{:.3f}"),
           ("val_logmel_mcd", "val log-mel MCD dB", "{:.2f}"), ("val_mcd", "val MCD dB", "{:.2f}")]


def train(ws, dataset: str, precision: str, args) -> dict:
    from utils.events import run_to_end
    from utils.vocoder.training import VocoderTrainConfig, train_vocoder
    from utils.workspace import read_jsonl

    cfg = VocoderTrainConfig(dataset=dataset, run=f"voc-{precision}", preset=args.preset, max_steps=args.steps,
                             batch_size=args.batch, segment=args.segment, eval_every=args.steps // 2,
                             checkpoint_every=0, log_every=10, val_clips=4, mcd_clips=2, precision=precision)
    start = time.perf_counter()
    run_to_end(train_vocoder(ws, cfg))
    wall = time.perf_counter() - start
    rows = read_jsonl(ws.run_dir(cfg.run) / "metrics.jsonl")
    train_rows = [r for r in rows if "loss_mel" in r]
    evals = [r for r in rows if "val_mel_l1" in r]
    return {"precision": precision, "steps": args.steps, "wall_s": wall,
            "loss_mel_last": sum(r["loss_mel"] for r in train_rows[-2:]) / len(train_rows[-2:]),
            **{k: evals[-1].get(k) for k in ("val_mel_l1", "val_logmel_mcd", "val_mcd")},
            "curve": [(r["step"], r["val_mel_l1"]) for r in evals]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=None)
    p.add_argument("--workspace", type=Path, default=None)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--segment", type=int, default=8192)
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)
    from utils.workspace import Workspace

    with tempfile.TemporaryDirectory() as tmp:
        if args.dataset:
            ws, dataset = Workspace.open(args.workspace), args.dataset
        else:
            ws, dataset = common.espeak_dataset(Path(tmp), n_train=11, n_val=1), "bench"
        results = [train(ws, dataset, precision, args) for precision in args.precisions]
    print(common.markdown_table(COLUMNS, results))

    def draw(fig):
        ax = fig.subplots()
        for r in results:
            ax.plot(*zip(*r["curve"]), marker="o", label=r["precision"])
        ax.set_xlabel("step")
        ax.set_ylabel("validation mel L1")
        ax.legend()

    common.save("vocoder_precision", {"rows": results}, draw, args.out)


if __name__ == "__main__":
    main()
