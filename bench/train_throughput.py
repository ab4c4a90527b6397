"""Training-step throughput of the acoustic model per optimization setting (an ablation table).

    python bench/train_throughput.py                          # CPU: tiny preset, CPU-meaningful rows
    python bench/train_throughput.py --preset base --frames 16000   # GPU: every row (bf16, TF32, flash, compile, ...)

Each row changes one thing against the first row ("baseline"), applies it through the same functions
the trainer uses (utils.training.optimization), runs `--warmup` steps, then times `--steps` full
optimizer steps (forward with MAS, backward, clip, AdamW) on a synthetic batch of `--frames` padded
mel frames, with synchronize around the timing. Prints samples/s, frames/s, ms/step and peak GPU
memory, and saves JSON with the machine it ran on (bench/out/train_throughput-<device>.json).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from models.matcha import MatchaConfig, MatchaTTS  # noqa: E402
from utils import hardware  # noqa: E402
from utils.training import optimization as opt  # noqa: E402
from utils.training.config import TrainConfig  # noqa: E402

GPU_ROWS = [
    ("baseline fp32, math attention", dict(precision="fp32", tf32="false", attention="math")),
    ("+ TF32", dict(precision="fp32", tf32="true", attention="math")),
    ("bf16 autocast", dict(precision="bf16", tf32="true", attention="math")),
    ("fp16 autocast + scaler", dict(precision="fp16", tf32="true", attention="math")),
    ("bf16 + efficient attention", dict(precision="bf16", tf32="true", attention="efficient")),
    ("bf16 + flash attention", dict(precision="bf16", tf32="true", attention="flash")),
    ("bf16 + flash + fused AdamW", dict(precision="bf16", tf32="true", attention="flash", fused_adamw="true")),
    ("bf16 + flash + fused + cuDNN benchmark", dict(precision="bf16", tf32="true", attention="flash",
                                                    fused_adamw="true", cudnn_benchmark="true")),
    ("... + grad checkpointing", dict(precision="bf16", tf32="true", attention="flash", fused_adamw="true",
                                      cudnn_benchmark="true", grad_checkpointing="true")),
    ("... + torch.compile (no checkpointing)", dict(precision="bf16", tf32="true", attention="flash",
                                                    fused_adamw="true", cudnn_benchmark="true", compile="true")),
]
CPU_ROWS = [
    ("baseline fp32, math attention", dict(precision="fp32", attention="math")),
    ("flash attention (CPU kernel)", dict(precision="fp32", attention="flash")),
    ("bf16 autocast", dict(precision="bf16", attention="math")),
    ("fused AdamW", dict(precision="fp32", attention="math", fused_adamw="true")),
    ("grad checkpointing", dict(precision="fp32", attention="math", grad_checkpointing="true")),
]
DEFAULTS = dict(precision="fp32", tf32="false", attention="math", fused_adamw="false", cudnn_benchmark="false",
                grad_checkpointing="false", compile="false")


def synthetic_batch(frames: int, utt_frames: int, n_symbols: int, device: str, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    b = max(1, frames // utt_frames)
    mel_lens = torch.randint(utt_frames * 3 // 4, utt_frames + 1, (b,), generator=g) // 4 * 4
    mel_lens[0] = utt_frames
    token_lens = torch.clamp(mel_lens // 6, min=2)
    tokens = torch.randint(1, n_symbols, (b, int(token_lens.max())), generator=g)
    mels = torch.randn(b, 100, utt_frames, generator=g)
    return {k: v.to(device) for k, v in dict(tokens=tokens, token_lens=token_lens, mels=mels, mel_lens=mel_lens,
                                              speakers=torch.zeros(b, dtype=torch.long)).items()}


def measure(preset: str, settings: dict, batch: dict, steps: int, warmup: int, report) -> dict:
    cfg = TrainConfig(preset=preset, **{**DEFAULTS, **settings})
    m = opt.resolve(cfg, report)
    device = m.device
    torch.manual_seed(0)
    model = MatchaTTS(MatchaConfig.preset_config(preset, n_symbols=100, n_speakers=2)).to(device)
    opt.apply_backend_flags(m)
    opt.apply_model_settings(model, m)
    optimizer = opt.make_optimizer(model, cfg, m)
    scaler = opt.grad_scaler(m)
    autocast = opt.autocast(m)

    def step():
        with autocast:
            loss = model(batch["tokens"], batch["token_lens"], batch["mels"], batch["mel_lens"], batch["speakers"])["loss"]
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    dt = (time.perf_counter() - t0) / steps
    b = batch["tokens"].shape[0]
    return {"ms_per_step": dt * 1e3, "samples_per_s": b / dt, "frames_per_s": float(batch["mel_lens"].sum()) / dt,
            "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default=None, help="tiny (CPU default) | small | base (GPU default)")
    p.add_argument("--frames", type=int, default=None, help="padded mel frames per batch")
    p.add_argument("--utt-frames", type=int, default=None, help="frames of the longest utterance")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    report = hardware.detect()
    gpu = report.device == "cuda"
    preset = args.preset or ("base" if gpu else "tiny")
    frames = args.frames or (16_000 if gpu else 1200)
    utt = args.utt_frames or (600 if gpu else 200)
    steps = args.steps or (20 if gpu else 5)
    warmup = args.warmup or (5 if gpu else 2)
    rows = GPU_ROWS if gpu else CPU_ROWS
    batch = synthetic_batch(frames, utt, 100, report.device)
    machine = (f"{report.gpus[0].name} x{len(report.gpus)}" if gpu else
               f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"# {preset} preset, {batch['tokens'].shape[0]} utterances x <= {utt} frames ({frames} padded frames), "
          f"{steps} timed steps after {warmup} warm-up, torch {torch.__version__}, {machine}")
    print(f"{'setting':44} {'ms/step':>9} {'samples/s':>10} {'frames/s':>10} {'peak GB':>8} {'vs base':>8}")
    results, base = [], None
    for name, settings in rows:
        try:
            r = measure(preset, settings, batch, steps, warmup, report)
        except Exception as exc:  # a kernel this machine lacks: say so and go on
            print(f"{name:44} failed: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        base = base or r["samples_per_s"]
        peak = f"{r['peak_gb']:.2f}" if r["peak_gb"] is not None else "n/a"
        print(f"{name:44} {r['ms_per_step']:9.1f} {r['samples_per_s']:10.2f} {r['frames_per_s']:10.0f} {peak:>8} "
              f"{r['samples_per_s'] / base:7.2f}x")
        results.append({"setting": name, **settings, **r})
    out = Path(__file__).parent / "out" / f"train_throughput-{report.device}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "preset": preset, "frames": frames, "utt_frames": utt,
                               "steps": steps, "torch": torch.__version__, "rows": results}, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
