"""Training ablation: what each optimization buys, one cumulative row at a time, in one process.

    python bench/train_throughput.py                                  # CPU: tiny preset, CPU-meaningful rows
    python bench/train_throughput.py --preset base --frames 16000     # GPU: the ladder below
    python bench/train_throughput.py --dataset am40 --workspace WS    # real batches through the trainer's DataLoader
    python bench/train_throughput.py --fp8                            # + an FP8 row (torchao, compute >= 8.9)

Why: each optimization the trainer turns on (utils.training.optimization) has to prove itself with a number
on the same data and steps. GPU rows, each adding one thing to the row above: fp32 eager; + TF32;
+ bf16 autocast; + flash/efficient attention; + fused AdamW; + alignment search on the GPU (Triton kernel
instead of Cython on the CPU); + torch.compile; all (the trainer's own "auto"
speed configuration, which adds cuDNN benchmark); all + gradient checkpointing (memory configuration).
Each row runs `--warmup` steps (compilation happens there), then times `--steps` full optimizer steps as
the trainer runs them (bench.common.train_step). Columns: ms/step, samples/s, mel frames/s (unpadded),
peak GPU memory, GPU utilization (NVML, sampled during the timed steps), data wait (share of wall time
spent waiting on the DataLoader; 0 for the synthetic batch), speedup over fp32 and over TF32.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

BASE = dict(precision="fp32", tf32="false", attention="math", fused_adamw="false", compile="false",
            cudnn_benchmark="false", grad_checkpointing="false", fp8="false", mas="cython")
COLUMNS = [("label", "configuration"), ("ms_per_step", "ms/step", "{:.1f}"), ("samples_per_s", "samples/s", "{:.1f}"),
           ("frames_per_s", "mel frames/s", "{:,.0f}"), ("peak_gib", "peak GiB", "{:.2f}"),
           ("gpu_util", "GPU util %", "{:.0f}"), ("data_wait", "data wait", "{:.1%}"),
           ("vs_fp32", "vs fp32", "{:.2f}x"), ("vs_tf32", "vs TF32", "{:.2f}x"), ("warmup_s", "warm-up s", "{:.1f}")]


def cumulative(changes: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """(key, label, change) -> (key, label, settings): each row is the row above plus its change."""
    rows, current = [], dict(BASE)
    for key, label, change in changes:
        current = {**current, **change}
        rows.append((key, label, current))
    return rows


def ladder(gpu: bool, compile_on_cpu: bool, fp8: bool) -> list[tuple[str, str, dict]]:
    if gpu:
        rows = cumulative([("fp32", "fp32 eager", {}), ("tf32", "+ TF32", dict(tf32="true")),
                           ("bf16", "+ bf16 autocast", dict(precision="bf16")),
                           ("attention", "+ flash/efficient attention", dict(attention="flash")),
                           ("fused", "+ fused AdamW", dict(fused_adamw="true")),
                           ("mas", "+ alignment search on the GPU (Triton)", dict(mas="triton")),
                           ("compile", "+ torch.compile", dict(compile="true"))])
        rows += [("speed", "all (speed configuration: the trainer's auto)", common.SPEED),
                 ("memory", "all + gradient checkpointing (memory configuration)",
                  {**common.SPEED, "grad_checkpointing": "true"})]
    else:  # TF32 and the fused GPU kernels do not exist here; compile takes minutes, so only on request
        rows = cumulative([("fp32", "fp32 eager", {}),
                           ("attention", "+ flash attention (CPU SDPA kernel)", dict(attention="flash")),
                           ("bf16", "+ bf16 autocast", dict(precision="bf16")),
                           ("fused", "+ fused AdamW", dict(fused_adamw="true"))]
                          + ([("compile", "+ torch.compile", dict(compile="true"))] if compile_on_cpu else [])
                          + [("memory", "+ gradient checkpointing", dict(grad_checkpointing="true"))])
    return rows + ([("fp8", "all + FP8 matmuls (torchao float8)", {**common.SPEED, "fp8": "true"})] if fp8 else [])


def batches(args, report, length_multiple: int):
    """(endless iterator of CPU batches, n_symbols, n_speakers): the synthetic batch, or the trainer's loader."""
    if not args.dataset:
        batch = common.synthetic_batch(args.frames, args.utt_frames)
        return iter(lambda: batch, None), 100, 2
    rec = report.recommended
    loader, n_symbols, n_speakers = common.dataset_loader(
        args.workspace, args.dataset, args.frames, num_workers=rec["num_workers"].value,
        pin_memory=rec["pin_memory"].value, persistent_workers=rec["num_workers"].value > 0,
        length_multiple=length_multiple)
    return iter(loader), n_symbols, n_speakers


def measure(args, report, settings: dict) -> dict:
    """Warm up, then time `args.steps` optimizer steps of one configuration."""
    import torch

    from utils.training import optimization as opt
    from utils.training.config import TrainConfig

    length_multiple = opt.resolve(TrainConfig.from_dict({"preset": args.preset, **settings}), report).length_multiple
    data, n_symbols, n_speakers = batches(args, report, length_multiple)
    step, m, model = common.train_step(args.preset, settings, report, n_symbols, n_speakers)
    device = m.device
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step(next(data))
    common.sync(device)
    warmup_s = time.perf_counter() - t0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    wait = samples = frames = 0.0
    with common.GpuUtilization(device) as util:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            t_wait = time.perf_counter()
            batch = next(data)
            wait += time.perf_counter() - t_wait
            step(batch)
            samples += len(batch["tokens"])
            frames += float(batch["mel_lens"].sum())
        common.sync(device)
        wall = time.perf_counter() - t0
    out = {"ms_per_step": 1e3 * wall / args.steps, "samples_per_s": samples / wall, "frames_per_s": frames / wall,
           "peak_gib": common.peak_gib(device), "gpu_util": util.percent,
           "data_wait": wait / wall if args.dataset else "synthetic", "warmup_s": warmup_s,
           "resolved": {k: m.values[k] for k in ("precision", "tf32", "attention", "fused_adamw", "compile",
                                                 "cudnn_benchmark", "grad_checkpointing", "fp8", "mas")}}
    if m.reasons["compile"].startswith(opt.COMPILE_FAILED):  # these are eager numbers: the row says so
        out["label_note"] = m.reasons["compile"]
    del step, model, data
    common.release(device)
    return out


def plot(rows: list[dict]):
    def draw(fig):
        done = [r for r in rows if "ms_per_step" in r]
        labels = [r["label"].split(" (")[0] for r in done]
        ax1, ax2 = fig.subplots(1, 2)
        ax1.barh(labels, [r["vs_fp32"] or 0.0 for r in done], color="tab:blue")
        ax1.axvline(1.0, color="grey", lw=0.8)
        ax1.set_xlabel("speed-up over fp32 eager (x)")
        ax1.invert_yaxis()
        ax1.tick_params(axis="y", labelsize=7)
        mem = [r["peak_gib"] or 0.0 for r in done]
        if any(mem):
            ax2.barh(labels, mem, color="tab:orange")
            ax2.set_xlabel("peak GPU memory (GiB)")
        else:
            ax2.barh(labels, [r["frames_per_s"] for r in done], color="tab:green")
            ax2.set_xlabel("mel frames / s")
        ax2.invert_yaxis()
        ax2.set_yticklabels([])
    return draw


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=None, help="tiny (CPU default) | small | base (GPU default)")
    p.add_argument("--frames", type=int, default=None, help="padded mel frames per batch (default 16000 GPU, 1200 CPU)")
    p.add_argument("--utt-frames", type=int, default=None, help="synthetic batch: frames of the longest utterance")
    p.add_argument("--dataset", default=None, help="a prepared dataset: real batches through the trainer's DataLoader")
    p.add_argument("--workspace", type=Path, default=common.ROOT / "workspace", help="workspace holding --dataset")
    p.add_argument("--steps", type=int, default=None, help="timed steps per row (default 30 GPU, 5 CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 10 GPU, 2 CPU)")
    p.add_argument("--rows", default=None, help="comma-separated row keys to run (default: all of the ladder)")
    p.add_argument("--compile", action="store_true", help="CPU: add a torch.compile row (Inductor takes minutes)")
    p.add_argument("--fp8", action="store_true", help="add an FP8 row (torchao float8; skipped with the reason "
                                                      "where it cannot run)")
    common.add_machine_args(p)
    args = p.parse_args()

    from utils.training import optimization as opt

    report = common.start(args)
    gpu = report.device == "cuda"
    args.preset = args.preset or ("base" if gpu else "tiny")
    args.frames = args.frames or (16_000 if gpu else 1200)
    args.utt_frames = args.utt_frames or (600 if gpu else 200)
    args.steps = args.steps or (30 if gpu else 5)
    args.warmup = args.warmup or (10 if gpu else 2)
    keep = set(args.rows.split(",")) if args.rows else None
    print(f"# {common.model_size(args.preset)}, {'dataset ' + args.dataset if args.dataset else 'synthetic batch'}, "
          f"{args.frames} padded frames per batch, {args.steps} timed steps after {args.warmup} warm-up; "
          f"{common.machine()['summary']}", flush=True)

    rows = []
    for key, label, settings in ladder(gpu, args.compile, args.fp8):
        if keep and key not in keep:
            continue
        row = {"key": key, "label": label, "settings": settings}
        if key == "fp8" and opt.fp8_unavailable(report, gpu):
            row["skipped"] = opt.fp8_unavailable(report, gpu)
        else:
            try:
                row.update(measure(args, report, settings))
            except Exception as exc:  # a kernel or backend this machine lacks: say so and go on
                row["skipped"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                common.release(report.device)
        if "label_note" in row:
            row["label"] = label = f"{label} (compile failed, eager: {row['label_note']})"
        rows.append(row)
        print(f"  {label}: " + (f"{row['ms_per_step']:.1f} ms/step, {row['frames_per_s']:.0f} frames/s"
                                if "ms_per_step" in row else f"skipped ({row['skipped']})"), flush=True)

    by_key = {r["key"]: r for r in rows if "ms_per_step" in r}
    for r in by_key.values():
        r["vs_fp32"] = r["samples_per_s"] / by_key["fp32"]["samples_per_s"] if "fp32" in by_key else None
        r["vs_tf32"] = r["samples_per_s"] / by_key["tf32"]["samples_per_s"] if "tf32" in by_key else None
    shown = [r if "ms_per_step" in r else {"label": r["label"], "ms_per_step": f"skipped: {r['skipped']}"}
             for r in rows]
    print(common.markdown_table(COLUMNS, shown))
    goals = {}
    if "fp32" in by_key and "speed" in by_key:
        goals["speed_vs_fp32"] = by_key["speed"]["vs_fp32"]
    if "fp32" in by_key and "memory" in by_key and by_key["fp32"]["peak_gib"]:
        goals["memory_vs_fp32_peak"] = by_key["memory"]["peak_gib"] / by_key["fp32"]["peak_gib"]
    if goals:
        print("goals (H100: speed >= 2.5x, memory <= 0.40 of fp32's peak): "
              + ", ".join(f"{k} {v:.2f}" for k, v in goals.items()))
    common.save("train_throughput", {"preset": args.preset, "frames_per_batch": args.frames,
                                     "utt_frames": None if args.dataset else args.utt_frames,
                                     "dataset": args.dataset, "steps": args.steps, "warmup": args.warmup,
                                     "rows": rows, "goals": goals}, plot(rows), args.out)


if __name__ == "__main__":
    main()
