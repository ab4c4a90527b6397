"""Kernels a Matcha training step launches, fp32 against bf16 autocast under CUDA's rule: why bf16 bought no speed.

    python bench/op_count.py                    # base and small, 16,000 frames in utterances of 600, on the CPU
    python bench/op_count.py --presets tiny --frames 2000 --utt 200

The first GPU run measured a `base` step at 83.0 ms in fp32 eager and 86.9 ms with bf16 autocast (no gain), while
torch.compile made it 38.9 ms (2.1x): the signs of a step bound by launching kernels rather than by their work.
Autocast adds a cast kernel wherever a bf16 op meets an fp32 tensor (weights, norm outputs CUDA keeps in fp32), so
in a launch-bound step bf16 adds launches as it saves arithmetic. This counts them without a GPU: every ATen op the
model's forward and backward dispatch (a TorchDispatchMode below autograd, so the backward's ops are counted too),
with CPU autocast playing CUDA's fp32 rule (tests/cuda_autocast.py). On a GPU each is a kernel launch, or none
(views, reshapes: "free" below, counted apart). The optimizer, clipping and EMA are left out: fused or foreach
kernels on a GPU, a few dozen launches whatever the precision.
"""
from __future__ import annotations

import argparse
from collections import Counter

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

CASTS = ("_to_copy", "to", "copy_")  # what autocast's casts dispatch as
FREE = ("view", "_unsafe_view", "reshape", "expand", "t", "transpose", "permute", "unsqueeze", "squeeze", "slice",
        "select", "detach", "alias", "as_strided", "split", "split_with_sizes", "unbind", "chunk", "narrow")
COLUMNS = [("preset", "preset"), ("precision", "precision"), ("ops", "ops (forward + backward)", "{:,}"),
           ("kernels", "of them kernels (not views)", "{:,}"), ("casts", "casts", "{:,}"),
           ("vs_fp32", "kernels vs fp32", "{:.2f}x"), ("top", "most called kernels")]


def count_step(preset: str, precision: str, frames: int, utt: int, report) -> Counter:
    """ATen ops of one forward and backward pass, the model's part of a step (its optimizer, clipping and EMA are
    left out: here on the CPU they run one parameter at a time, where a GPU runs fused or foreach kernels)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from tests.cuda_autocast import cuda_fp32_rule
    from utils.training import optimization as opt

    class Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    settings = {"precision": precision, "compile": "false", "mas": "cython", "grad_checkpointing": "false",
                "fp8": "false"}
    _, m, model = common.train_step(preset, settings, report)
    b = common.synthetic_batch(frames, utt)
    with cuda_fp32_rule(), Counting() as counting:
        with opt.autocast(m):
            losses = model(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"])
        losses["loss"].backward()
    return counting.ops


def plot(rows: list[dict]):
    def draw(fig):
        ax = fig.subplots()
        labels = [f"{r['preset']} {r['precision']}" for r in rows]
        ax.barh(labels, [r["kernels"] - r["casts"] for r in rows], color="tab:blue", label="kernels")
        ax.barh(labels, [r["casts"] for r in rows], left=[r["kernels"] - r["casts"] for r in rows],
                color="tab:orange", label="casts")
        ax.set_xlabel("kernels a forward + backward pass launches")
        ax.invert_yaxis()
        ax.legend()
    return draw


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["base", "small"])
    p.add_argument("--frames", type=int, default=16_000, help="padded mel frames a batch (the GPU ladder's)")
    p.add_argument("--utt", type=int, default=600, help="frames an utterance")
    common.add_machine_args(p)
    args = p.parse_args()
    report = common.start(args)
    rows = []
    for preset in args.presets:
        counts = {precision: count_step(preset, precision, args.frames, args.utt, report)
                  for precision in ("fp32", "bf16")}
        kernels = {k: Counter({op: n for op, n in ops.items() if op not in FREE}) for k, ops in counts.items()}
        for precision, ops in counts.items():
            launched = kernels[precision]
            rows.append({"preset": preset, "precision": precision, "ops": sum(ops.values()),
                         "kernels": sum(launched.values()), "casts": sum(ops[c] for c in CASTS),
                         "vs_fp32": sum(launched.values()) / sum(kernels["fp32"].values()),
                         "top": ", ".join(f"{k} {v}" for k, v in launched.most_common(4)),
                         "by_op": dict(ops.most_common())})
            print(common.markdown_table(COLUMNS, rows[-1:]), flush=True)
    print(f"\n# Matcha, {args.frames} frames in utterances of {args.utt}; CPU autocast under CUDA's fp32 rule; "
          f"{common.machine()['summary']}")
    print(common.markdown_table(COLUMNS, rows))
    common.save("op_count", {"frames": args.frames, "utt": args.utt, "rows": rows}, plot(rows), args.out)


if __name__ == "__main__":
    main()
