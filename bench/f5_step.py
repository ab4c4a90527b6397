"""One F5-TTS training step at the v1 Base size (337 M parameters), as the F5 engine runs it: the flow-matching
loss with span infilling on a batch of frames, backward, AdamW. Random weights (no download needed): the cost of a
step does not depend on their values.

    python bench/f5_step.py                         # CPU: 1 clip of 3 s, 2 steps (about a minute each on 2 cores)
    python bench/f5_step.py --frames 38400 --steps 10 --precision bf16   # a GPU: the published per-GPU batch

Why: the hardware verdict says a CPU cannot fine-tune the base in useful time, and the GPU plan needs the step time,
frames/s and peak memory at this size. Prints ms/step, frames/s, peak memory (GPU) or resident memory (CPU).
"""
from __future__ import annotations

import argparse
import time

import common  # bench/common.py; puts the repository root on sys.path

COLUMNS = [("preset", "preset"), ("params_m", "parameters (M)", "{:.1f}"), ("frames", "frames/batch"),
           ("precision", "precision"), ("ms_per_step", "ms/step", "{:.0f}"), ("frames_per_s", "frames/s", "{:.0f}"),
           ("peak_gib", "peak GiB", "{:.2f}")]


def main() -> None:
    import psutil
    import torch

    from models.f5 import PRESETS, F5TTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="v1_base", choices=list(PRESETS))
    parser.add_argument("--frames", type=int, default=282, help="mel frames per batch (282 = one 3 s clip)")
    parser.add_argument("--clip-frames", type=int, default=282)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--checkpointing", action="store_true")
    common.add_machine_args(parser)
    args = parser.parse_args()
    report = common.start(args)
    device = report.device
    torch.manual_seed(0)
    model = F5TTS(PRESETS[args.preset]).to(device)
    model.transformer.checkpoint_activations = args.checkpointing
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
    n = max(1, args.frames // args.clip_frames)
    mel = torch.randn(n, args.clip_frames, 100, device=device) - 5
    text = torch.randint(0, PRESETS[args.preset].text_num_embeds, (n, args.clip_frames // 3), device=device)
    lens = torch.full((n,), args.clip_frames, device=device)
    amp = torch.autocast(device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    times = []
    common.reset_peak(device)
    for _ in range(args.steps + 1):  # the first is warm-up
        t0 = time.perf_counter()
        with amp:
            loss = model(mel, text, lens)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        common.sync(device)
        times.append(time.perf_counter() - t0)
    ms = 1000 * sum(times[1:]) / max(1, len(times) - 1)
    peak = common.peak_gib(device) if device == "cuda" else psutil.Process().memory_info().rss / 2**30
    row = {"preset": args.preset, "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
           "frames": n * args.clip_frames, "precision": args.precision, "ms_per_step": ms,
           "frames_per_s": n * args.clip_frames / (ms / 1000), "peak_gib": peak}
    print(common.markdown_table(COLUMNS, [row]))
    common.save("f5_step", {"rows": [row], "device": device}, out=args.out)


if __name__ == "__main__":
    main()
