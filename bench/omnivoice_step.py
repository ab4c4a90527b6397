"""One OmniVoice fine-tuning step as the OmniVoice engine takes it: the adapter's batch of cached codec tokens, the
package's masking and padding, the package model's loss under the machine's precision, backward, clipping at 1.0,
AdamW. Seconds a step by the positions (text + audio tokens) a step.

    python bench/omnivoice_step.py                          # CPU: the tiny random base, 512 and 1024 positions
    python bench/omnivoice_step.py --tokens 8192 --steps 10  # a GPU: the tiny base, and the real one when it is
                                                             # on this machine (workspace or hub cache) or --base
    python bench/omnivoice_step.py --tokens 8192 --full-random   # also the released shapes, random weights

Why: the loop's CPU batch (adapter.CPU_BATCH_TOKENS) and the Training tab's expectations quote these numbers. What
runs is the adapter's own build, data and losses (utils/omnivoice/adapter.py) on espeak-ng Amharic clips; the
engine's loop around them (EMA, run files, checkpoints) is left out, so the checkpoint of a 613 M-parameter model is
not written for a timing. The first two steps warm up (kernels set up for each new shape) and are not timed.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("base", "base"), ("device", "device"), ("precision", "precision"), ("tokens", "positions a step"),
           ("clips", "clips a step", "{:.1f}"), ("seconds", "s a step", "{:.3f}"),
           ("per_s", "padded positions/s", "{:.0f}"), ("peak_gib", "peak GPU GiB", "{:.2f}")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=None,
                   help="positions a step (default: 512 1024 on a CPU, 8192 on a GPU: the recipe's)")
    p.add_argument("--steps", type=int, default=6, help="steps per size (the first two warm up)")
    p.add_argument("--clips", type=int, default=16, help="espeak-ng clips to train on")
    p.add_argument("--base", default="", help="the real base's folder (default: found on this machine, GPU only)")
    p.add_argument("--precision", nargs="+", default=["auto"], choices=["auto", "bf16", "fp16", "fp32"],
                   help="rows per precision (fp16: a T4's, with its gradient scaler; default: the machine's)")
    p.add_argument("--full-random", action="store_true", help="also the released base's shapes with random weights "
                   "(613 M parameters; a machine without the 3.3 GB download: a borrowed GPU)")
    common.add_machine_args(p)
    args = p.parse_args()
    report = common.start(args)
    device = common.device_tag()
    tokens = args.tokens or ([8192] if device == "cuda" else [512, 1024])

    from tests.helpers import add_joined_clips, make_dataset
    from utils.omnivoice.base import find_base
    from utils.omnivoice.tiny import write_tiny_base

    root = Path(tempfile.mkdtemp(prefix="bench-omnivoice-"))
    print(f"speaking {args.clips} clips with espeak-ng, writing the tiny base ...", flush=True)
    ws = make_dataset(root, name="bench", n_train=1, n_val=1, voices=("am",))
    add_joined_clips(ws, "bench", args.clips)  # 4-9 s each, as a curator's clips are
    bases = {"tiny": write_tiny_base(root / "pretrained" / "tiny")}
    real = Path(args.base) if args.base else find_base()
    if device == "cuda" and real is not None:
        bases["OmniVoice 613 M"] = real
    if args.full_random:
        bases["613 M, random weights"] = write_tiny_base(root / "pretrained" / "full-random", size="full")
    rows = []
    for name, base in bases.items():
        for precision in args.precision:
            for budget in tokens:
                rows.append({"base": name, **_time(root, base, budget, args.steps, report, precision)})
                print(common.markdown_table(COLUMNS, rows[-1:]), flush=True)
    print(f"\n# OmniVoice training steps, {common.machine()['summary']}")
    print(common.markdown_table(COLUMNS, rows))
    common.save("omnivoice_step", {"rows": rows}, out=args.out)


def _time(root: Path, base: Path, budget: int, steps: int, report, precision: str = "auto") -> dict:
    """The adapter built on `base` with batches of `budget` positions; the median seconds of the timed steps."""
    import torch

    from utils.omnivoice.adapter import OmniVoiceAdapter
    from utils.training import ddp
    from utils.training import optimization as opt
    from utils.training.config import TrainConfig
    from utils.training.loop import Context

    cfg = TrainConfig(workspace=str(root), dataset="bench", run=f"bench-{budget}", engine="omnivoice", init=str(base),
                      max_steps=steps, max_frames_per_batch=budget, grad_accumulation=1, num_workers=0,
                      precision=precision)
    adapter = OmniVoiceAdapter(cfg, report)
    m = adapter.machine
    adapter.build(Context(m.device, ddp.Dist(), lambda *a: None, None, lambda: opt.autocast(m)))
    adapter.start_data(0)
    phase, scaler = adapter.phases[0], opt.grad_scaler(m)
    common.reset_peak(m.device)
    times, clips, positions = [], [], []
    for step in range(steps):
        batch = adapter.next_batch()
        common.sync(m.device)
        t0 = time.perf_counter()
        scaler.scale(adapter.losses(batch, "model", step)["loss"]).backward()
        scaler.unscale_(phase.optimizer)
        torch.nn.utils.clip_grad_norm_(phase.params, phase.clip)
        scaler.step(phase.optimizer)
        scaler.update()
        phase.optimizer.zero_grad(set_to_none=True)
        common.sync(m.device)
        if step >= 2:
            times.append(time.perf_counter() - t0)
            clips.append(adapter.size(batch))
            positions.append(adapter.padded_frames(batch))
    seconds = statistics.median(times)
    result = {"device": m.device, "precision": m.precision, "tokens": budget, "clips": statistics.mean(clips),
              "seconds": seconds, "per_s": sum(positions) / sum(times), "peak_gib": common.peak_gib(m.device)}
    del adapter
    common.release(m.device)
    return result


if __name__ == "__main__":
    main()
