"""What torch.compile costs and buys the Matcha trainer at each new batch shape, beside eager fp32 and eager auto.

    python bench/compile_cost.py --preset base --frames 16000 --utt 640 448 320     # GPU: the ladder's batch
    python bench/compile_cost.py --preset tiny --frames 1200 --utt 192 128 --steps 2  # CPU: the plumbing

Why: the trainer compiles static shapes (utils/training/compiled.py), so every new padded batch shape is compiled
anew; whether that pays depends on the seconds a shape costs against the milliseconds a step saves. One process,
in order: fp32 eager (TF32 off), the trainer's auto settings eager (bf16, TF32, flash, fused AdamW, GPU alignment),
then the same compiled; each at every shape: the first compiled step's seconds (the compilation), then `--steps`
timed steps. A compilation that fails is said (the guard runs the step eager) and the row is marked.
"""
from __future__ import annotations

import argparse
import time

import common  # bench/common.py: the repository root on sys.path

FP32 = dict(precision="fp32", tf32="false", attention="math", fused_adamw="false", compile="false",
            cudnn_benchmark="false", grad_checkpointing="false", fp8="false")


def timed(step, batch, steps: int, device: str) -> float:
    """ms per step over `steps` steps."""
    common.sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step(batch)
    common.sync(device)
    return 1e3 * (time.perf_counter() - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base")
    p.add_argument("--frames", type=int, default=16000, help="padded mel frames a batch")
    p.add_argument("--utt", type=int, nargs="+", default=[640, 448, 320], help="frames of the longest utterance: "
                   "one batch shape each (multiples of 64, as the trainer pads them)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per shape and configuration")
    common.add_machine_args(p)
    args = p.parse_args()
    report = common.start(args)
    from utils.training import compiled

    batches = [common.synthetic_batch(args.frames, u) for u in args.utt]
    print(f"# {common.model_size(args.preset)}, {args.frames} frames a batch, shapes "
          f"{[tuple(b['mels'].shape) for b in batches]}; {common.machine()['summary']}", flush=True)
    rows = {}
    for name, settings in (("fp32 eager", FP32), ("auto eager", {**common.SPEED, "compile": "false"})):
        step, m, model = common.train_step(args.preset, settings, report)
        for u, b in zip(args.utt, batches):
            for _ in range(2):  # warm-up: cuDNN's choice, the allocator
                step(b)
            rows[(name, u)] = timed(step, b, args.steps, m.device)
            print(f"  {name} utt {u}: {rows[(name, u)]:.1f} ms/step", flush=True)
        del step, model
        common.release(m.device)
    step, m, model = common.train_step(args.preset, {**common.SPEED, "compile": "false"}, report)
    failures = []
    parts = compiled.CompiledParts([model.encoder, model.decoder.estimator], ["encoder", "decoder"],
                                   lambda part, exc: failures.append(f"{part}: {compiled.first_line(exc)}"))
    print("| utt frames | batch | fp32 eager ms | auto eager ms | auto eager vs fp32 | first compiled step s | "
          "compiled ms | compiled vs fp32 | graphs so far | compile failure |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for u, b in zip(args.utt, batches):
        common.sync(m.device)
        t0 = time.perf_counter()
        step(b)
        common.sync(m.device)
        first = time.perf_counter() - t0
        ms = timed(step, b, args.steps, m.device)
        fp32, auto = rows[("fp32 eager", u)], rows[("auto eager", u)]
        print(f"| {u} | {len(b['tokens'])} | {fp32:.1f} | {auto:.1f} | {fp32 / auto:.2f}x | {first:.1f} | {ms:.1f} | "
              f"{fp32 / ms:.2f}x | {parts.graphs()} | {failures[0] if failures else '-'} |", flush=True)
    print(f"resolved: {', '.join(f'{k}={m.values[k]}' for k in ('precision', 'tf32', 'attention', 'mas'))}")


if __name__ == "__main__":
    main()
