"""Vocoder speed: mel -> audio with the Vocos generator (mel-24khz sizes) and Griffin-Lim, and the
GAN training step.

    python bench/vocoder_throughput.py                      # CPU (and the GPU too when there is one)
    python bench/vocoder_throughput.py --seconds 2 10 --train-batch 16    # on a GPU: the Vocos batch

The training step is the trainer's own: its adapter (utils.vocoder.training.VocoderAdapter) built on a dataset
of noise clips in a temporary folder, its two phases' losses, backward passes and optimizer steps. On a GPU it is
timed twice, fp32 (TF32) and bf16 autocast, the machines the trainer resolves for them.

Random weights (speed does not depend on them). Each measurement: 2 warm-up calls, then the mean of
`--repeat` calls, with `synchronize` around GPU timings. "x real time" = seconds of audio made per
second of compute. Results go to bench/out/vocoder_throughput-<cpu|cuda>.json and .png (bench/common.py).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import numpy as np
import torch

from models.vocoder import PRESETS, Vocoder  # noqa: E402
from utils.audio import FeatureConfig, log_mel, save_audio  # noqa: E402
from utils.vocoder import griffin_lim  # noqa: E402
from utils.workspace import Workspace, write_jsonl  # noqa: E402

CFG = FeatureConfig()


def timed(fn, device: str, repeat: int) -> float:
    for _ in range(2):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat


def noise_dataset(root: Path, clips: int = 2, seconds: float = 1.0) -> Workspace:
    """A prepared dataset of noise clips: the trainer's adapter needs one to build, and speed does not depend on
    what the clips say."""
    ws = Workspace.open(root)
    folder = ws.dataset_dir("noise")
    rng = np.random.default_rng(0)
    rows = []
    for i in range(clips):
        save_audio(folder / "audio" / f"n{i}.wav", (0.1 * rng.standard_normal(int(seconds * CFG.sample_rate))
                                                    ).astype(np.float32), CFG.sample_rate)
        rows.append({"id": f"n{i}", "audio": f"audio/n{i}.wav", "split": "train"})
    write_jsonl(folder / "manifest.jsonl", rows)
    return ws


def gan_adapter(ws: Workspace, device: str, batch: int, precision: str):
    """The trainer's own adapter (utils.vocoder.training.VocoderAdapter) at the Vocos sizes, built as the loop
    builds it on one process, with its machine's backend flags and autocast."""
    from utils.training import ddp
    from utils.training import optimization as opt
    from utils.training.loop import Context
    from utils.vocoder.training import VocoderAdapter, VocoderTrainConfig

    cfg = VocoderTrainConfig(dataset="noise", run=f"bench-{device}-{precision}", preset="mel-24khz",
                             batch_size=batch, device=device, precision=precision, val_clips=0)
    adapter = VocoderAdapter(ws, cfg)
    m = adapter.machine
    opt.apply_backend_flags(m)
    torch.manual_seed(0)
    adapter.build(Context(device, ddp.Dist(), lambda *args, **kw: None, None, lambda: opt.autocast(m)))
    adapter.start_data(0)
    return adapter


def gan_step(adapter, y: torch.Tensor) -> None:
    """One step of the adapter's phases (the discriminators', then the generator's) on one micro-batch, as the
    engine runs them, less the all-reduce, the finite check and the out-of-memory retries."""
    for phase in adapter.phases:
        adapter.losses(y, phase.name, 0)["loss"].backward()
        phase.optimizer.step()
        phase.optimizer.zero_grad(set_to_none=True)


def train_step_time(device: str, batch: int, repeat: int, precision: str) -> float:
    """The trainer's GAN step (its adapter's losses and phases) at the Vocos sizes, on one batch of its crops."""
    with tempfile.TemporaryDirectory(prefix="vocoder-bench-") as root:
        adapter = gan_adapter(noise_dataset(Path(root)), device, batch, precision)
        y = adapter.next_batch()  # [B, 16384] on the CPU, as the loop hands it to the adapter
        return timed(lambda: gan_step(adapter, y), device, repeat)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--train-batch", type=int, default=2)
    parser.add_argument("--train-repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--no-train", action="store_true", help="skip the GAN training step")
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], help="default: the CPU, and the GPU if any")
    common.add_output_args(parser)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
          + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"))
    print("| device | model | audio (s) | ms per call | x real time |")
    print("|---|---|---|---|---|")
    for device in devices:
        for preset in ("mel-24khz", "tiny"):
            model = Vocoder(PRESETS[preset]).to(device).eval()
            for seconds in args.seconds:
                mel = torch.randn(1, CFG.n_mels, int(seconds * CFG.sample_rate / CFG.hop_length) + 1, device=device) - 5
                with torch.no_grad():
                    t = timed(lambda: model(mel), device, args.repeat)
                rows.append({"device": device, "model": f"vocos {preset}", "audio_s": seconds, "s_per_call": t})
        for seconds in args.seconds:
            if device != "cpu":
                continue  # Griffin-Lim runs on the CPU in the app
            mel = log_mel(torch.randn(int(seconds * CFG.sample_rate)) * 0.1)
            t = timed(lambda: griffin_lim(mel), device, max(1, args.repeat // 2))
            rows.append({"device": device, "model": "griffin-lim 64 it", "audio_s": seconds, "s_per_call": t})
        if args.no_train:
            continue
        # fp32 (TF32 on an Ampere or newer GPU, as the trainer's machine sets) and bf16 autocast, side by side
        for precision in (["fp32", "bf16"] if device == "cuda" else ["fp32"]):
            t = train_step_time(device, args.train_batch, args.train_repeat, precision)
            rows.append({"device": device, "model": f"GAN train step {precision}, batch {args.train_batch} x 16384",
                         "audio_s": args.train_batch * 16384 / CFG.sample_rate, "s_per_call": t})
    for r in rows:
        print(f"| {r['device']} | {r['model']} | {r['audio_s']:.2f} | {1000 * r['s_per_call']:.1f} | "
              f"{r['audio_s'] / r['s_per_call']:.1f} |")
    for r in rows:
        r["x_realtime"] = r["audio_s"] / r["s_per_call"]

    def draw(fig):
        ax = fig.subplots()
        labels = [f"{r['device']} {r['model']} {r['audio_s']:.0f} s" for r in rows]
        ax.barh(labels, [r["x_realtime"] for r in rows], color="tab:blue")
        ax.set_xscale("log")
        ax.set_xlabel("x real time (audio seconds per compute second)")
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)

    common.save("vocoder_throughput", {"rows": rows}, draw, args.out)


if __name__ == "__main__":
    main()
