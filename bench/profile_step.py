"""Where a training step's time goes: torch.profiler over a few steps, host syncs, padding, and MAS.

    python bench/profile_step.py                                  # CPU: tiny preset, synthetic batch
    python bench/profile_step.py --preset base --frames 16000     # GPU: CPU + CUDA activities
    python bench/profile_step.py --dataset NAME --workspace WS    # real batches (real padding)
    python bench/profile_step.py --trace                          # also a Chrome trace (chrome://tracing)

Why: once the optimizations are on, what is left has to be named before it can be fixed. The step is the
trainer's (bench.common.train_step, speed configuration); the profiler runs `--steps` of them after
`--warmup`. Printed: the top ops/kernels by self time (device time on a GPU) with a rough guess of what
bounds each; MAS's share of the step (MAS runs on the CPU: on a GPU the device idles meanwhile); the
tensor -> Python conversions in one step by source line (each one is a host sync when the tensor is on
the GPU); the padding share of the batch; and MAS timed alone, the Cython kernel against the torch one
on the training device, on this batch's shape.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("name", "op / kernel"), ("self_ms_per_step", "self ms/step", "{:.2f}"), ("share", "share", "{:.1%}"),
           ("calls_per_step", "calls/step", "{:.0f}"), ("bound", "likely bound by")]
CONVERSIONS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")
BOUNDS = [  # (name fragments, what usually bounds it): a heuristic, to read the table faster
    (("maximum_path", "MAS"), "MAS: sequential dynamic programme on the CPU (the GPU idles)"),
    (("conv", "cudnn"), "convolution: compute (cuDNN)"),
    (("mm", "gemm", "matmul", "linear", "einsum", "sm90", "cutlass"), "matmul: compute (tensor cores)"),
    (("attention", "flash", "fmha", "sdpa"), "attention kernel"),
    (("norm", "softmax", "gelu", "silu", "mish", "add", "mul", "copy", "fill", "cat", "where", "elementwise",
      "vectorized", "reduce", "sum", "exp", "log", "pow", "sqrt", "div", "sub", "tanh", "sigmoid"),
     "elementwise / normalisation: memory bandwidth"),
    (("adam", "foreach", "lerp"), "optimizer / EMA: memory bandwidth"),
    (("memcpy", "to_copy", "copy_"), "host <-> device copy"),
]


def bound_of(name: str) -> str:
    low = name.lower()
    for fragments, why in BOUNDS:
        if any(f.lower() in low for f in fragments):
            return why
    return "-"


class ConversionCounter:
    """Counts tensor -> Python conversions (.item(), bool(t), .cpu(), ...) by the source line that made them,
    skipping the ones torch makes inside itself (e.g. AdamW reading its CPU step counter)."""

    def __init__(self, device: str):
        self.device, self.counts = device, collections.Counter()
        self._saved = {}

    def __enter__(self):
        import torch

        torch_dir = str(Path(torch.__file__).parent)
        for name in CONVERSIONS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = torch.Tensor.__dict__.get(name)

            def wrapper(t, *a, _original=original, _name=name, **kw):
                caller = sys._getframe(1)
                if not caller.f_code.co_filename.startswith(torch_dir) and (self.device != "cuda" or t.is_cuda):
                    where = f"{_short(caller.f_code.co_filename)}:{caller.f_lineno}"
                    self.counts[f"{where} .{_name.strip('_')}"] += 1
                return _original(t, *a, **kw)

            setattr(torch.Tensor, name, wrapper)
        return self

    def __exit__(self, *exc):
        import torch

        for name, saved in self._saved.items():
            if saved is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, saved)


def _short(path: str) -> str:
    p = Path(path)
    try:
        return str(p.relative_to(common.ROOT))
    except ValueError:
        return "/".join(p.parts[-2:])


def mas_alone(batch: dict, device: str, repeat: int = 3) -> dict:
    """MAS on this batch's shape: the Cython kernel (with its device -> host -> device copies), the torch one,
    and on a GPU the Triton kernel."""
    import torch

    from models.alignment import _mas_cython, maximum_path, sequence_mask

    b, n, t = batch["tokens"].shape[0], batch["tokens"].shape[1], batch["mels"].shape[-1]
    log_p = torch.randn(b, n, t, device=device)
    mask = (sequence_mask(batch["token_lens"].to(device), n)[:, :, None]
            & sequence_mask(batch["mel_lens"].to(device), t)[:, None, :]).float()
    out = {"shape": [b, n, t]}
    for impl in ("cython", "torch", "triton"):
        if (impl == "cython" and _mas_cython is None) or (impl == "triton" and device != "cuda"):
            continue
        maximum_path(log_p, mask, impl)
        common.sync(device)
        t0 = time.perf_counter()
        for _ in range(repeat):
            maximum_path(log_p, mask, impl)
        common.sync(device)
        out[f"{impl}_ms"] = 1e3 * (time.perf_counter() - t0) / repeat
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=None, help="tiny (CPU default) | small | base (GPU default)")
    p.add_argument("--frames", type=int, default=None, help="padded mel frames per batch (16000 GPU, 1200 CPU)")
    p.add_argument("--utt-frames", type=int, default=None, help="synthetic batch: longest utterance (600 GPU, 200 CPU)")
    p.add_argument("--dataset", default=None, help="a prepared dataset: real batches through the trainer's DataLoader")
    p.add_argument("--workspace", type=Path, default=common.ROOT / "workspace", help="workspace holding --dataset")
    p.add_argument("--steps", type=int, default=3, help="profiled steps")
    p.add_argument("--warmup", type=int, default=None, help="steps before profiling (default 10 GPU, 2 CPU)")
    p.add_argument("--top", type=int, default=15, help="rows of the op table")
    p.add_argument("--trace", action="store_true", help="also write a Chrome trace next to the JSON")
    common.add_machine_args(p)
    args = p.parse_args()

    from torch.profiler import ProfilerActivity, profile, record_function

    import models.matcha

    report = common.start(args)
    gpu = report.device == "cuda"
    preset = args.preset or ("base" if gpu else "tiny")
    frames, utt = args.frames or (16_000 if gpu else 1200), args.utt_frames or (600 if gpu else 200)
    warmup = args.warmup or (10 if gpu else 2)
    if args.dataset:
        loader, n_symbols, n_speakers = common.dataset_loader(args.workspace, args.dataset, frames)
        data = iter(loader)
    else:
        batch = common.synthetic_batch(frames, utt)
        data, n_symbols, n_speakers = iter(lambda: batch, None), 100, 2
    step, m, _ = common.train_step(preset, common.SPEED, report, n_symbols, n_speakers)

    mas = models.matcha.maximum_path  # label MAS in the profile (the model calls it by this name)

    def labelled_mas(*a, **kw):
        common.sync(m.device)  # MAS's own copy would wait for the encoder anyway: keep that wait out of its time
        with record_function("MAS (maximum_path)"):
            return mas(*a, **kw)

    models.matcha.maximum_path = labelled_mas
    for _ in range(warmup):
        step(next(data))
    common.sync(m.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    batches = []
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            with record_function("data: next(loader)"):
                batches.append(next(data))
            step(batches[-1])
        common.sync(m.device)
    wall_ms = 1e3 * (time.perf_counter() - t0) / args.steps  # profiled: slower than an unprofiled step
    with ConversionCounter(m.device) as conversions:
        step(next(data))
    models.matcha.maximum_path = mas

    events = prof.key_averages()
    device_time = "self_device_time_total" if gpu else "self_cpu_time_total"
    total = sum(getattr(e, device_time) for e in events) or 1.0
    top = sorted(events, key=lambda e: -getattr(e, device_time))
    ops = [{"name": e.key[:70], "self_ms_per_step": getattr(e, device_time) / 1e3 / args.steps,
            "share": getattr(e, device_time) / total, "calls_per_step": e.count / args.steps, "bound": bound_of(e.key)}
           for e in top if not e.key.startswith(("ProfilerStep", "data:", "MAS ("))][: args.top]
    labelled = {e.key: e.cpu_time_total / 1e3 / args.steps for e in events if e.key.startswith(("MAS (", "data:"))}
    mas_ms, data_ms = labelled.get("MAS (maximum_path)", 0.0), labelled.get("data: next(loader)", 0.0)
    padding = sum(common.padding_fraction(b) for b in batches) / len(batches)
    syncs = [{"where": k, "per_step": v} for k, v in conversions.counts.most_common()]
    mas_cmp = mas_alone(batches[-1], m.device)
    summary = {"profiled_ms_per_step": wall_ms, "mas_ms_per_step": mas_ms, "mas_share": mas_ms / wall_ms,
               "data_ms_per_step": data_ms, "padding_fraction": padding,
               "host_syncs_per_step": sum(conversions.counts.values()), "mas_alone": mas_cmp}

    print(f"# {common.model_size(preset)}, {'dataset ' + args.dataset if args.dataset else 'synthetic batch'} of {frames} "
          f"frames, speed configuration, {args.steps} profiled steps; {common.machine()['summary']}")
    print(f"\ntop ops by self {'device (GPU)' if gpu else 'CPU'} time:")
    print(common.markdown_table(COLUMNS, ops))
    print(f"\nstep {wall_ms:.1f} ms (profiled); MAS {mas_ms:.1f} ms ({mas_ms / wall_ms:.0%}) on the CPU; "
          f"waiting for data {data_ms:.2f} ms; padding {padding:.1%} of the batch's mel frames")
    print(f"MAS alone on {mas_cmp['shape']} (B, tokens, frames): "
          + ", ".join(f"{k[:-3]} {v:.1f} ms" for k, v in mas_cmp.items() if k.endswith("_ms")))
    print(f"\ntensor -> Python conversions in one step ({'host syncs' if gpu else 'host syncs when on a GPU'}):")
    print(common.markdown_table([("where", "source line"), ("per_step", "per step")], syncs))
    if args.trace:
        args.out.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(args.out / f"profile_step-{common.device_tag()}.trace.json"))

    def draw(fig):
        ax = fig.subplots()
        shown = ops[:10][::-1]
        ax.barh([o["name"][:40] for o in shown], [o["self_ms_per_step"] for o in shown],
                color=["tab:red" if o["bound"].startswith("MAS") else "tab:blue" for o in shown])
        ax.set_xlabel(f"self {'GPU' if gpu else 'CPU'} ms per step (MAS on the CPU: {mas_ms:.1f} ms, "
                      f"{mas_ms / wall_ms:.0%} of the step)")
        ax.tick_params(axis="y", labelsize=7)

    common.save("profile_step", {"preset": preset, "frames_per_batch": frames, "dataset": args.dataset,
                                 "steps": args.steps, "summary": summary, "top_ops": ops, "host_syncs": syncs},
                draw, args.out)


if __name__ == "__main__":
    main()
