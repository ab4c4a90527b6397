"""Inference speed: real-time factor of text -> mel (acoustic model) and mel -> audio (vocoder), CPU and GPU.

    python bench/inference.py                         # CPU, and the GPU too when there is one
    python bench/inference.py --presets base --batch 1 8 --steps 10 2

Why: the Inference tab promises audio faster than real time; this says how much faster on each device.
Random weights (speed does not depend on them), except that the duration predictor's output bias is set
so every token gets `--frames-per-token` frames, as a trained model does (random durations would make
the clips unrealistically short). Each row: `--sentences` sentences of `--tokens` symbols spoken in
batches of `--batch` through `synthesise_batch` (the path utils/inference uses) with `--steps` Euler steps,
then vocoded one clip at a time (Vocos mel-24khz sizes; Griffin-Lim, 64 iterations, on the CPU only).
Real-time factor = compute seconds / audio seconds (below 1 is faster than real time).
"""
from __future__ import annotations

import argparse
import math
import time

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("device", "device"), ("preset", "preset"), ("steps", "ODE steps"), ("batch", "batch"),
           ("audio_s", "audio s", "{:.1f}"), ("acoustic_rtf", "acoustic RTF", "{:.4f}"),
           ("vocos_rtf", "+ Vocos RTF", "{:.4f}"), ("griffin_lim_rtf", "+ Griffin-Lim RTF", "{:.3f}")]


def acoustic_model(preset: str, frames_per_token: int, device: str, n_symbols: int = 100):
    import torch

    from models.matcha import MatchaConfig, MatchaTTS

    torch.manual_seed(0)
    model = MatchaTTS(MatchaConfig.preset_config(preset, n_symbols=n_symbols)).to(device).eval()
    with torch.no_grad():  # durations of a trained model: exp(logw) = frames per token
        model.duration.proj.weight.zero_()
        model.duration.proj.bias.fill_(math.log(frames_per_token - 0.5))  # rounded up to frames_per_token
    return model


def end_to_end(preset: str, frames_per_token: int, device: str, n_sentences: int, steps: int, repeats: int = 3) -> dict:
    """Text in, audio out through utils.inference.speak (normalizer, G2P, batches, Vocos), streamed `repeats` times:
    seconds to the first audio chunk (the median run's; the least CPU time) versus to the whole text."""
    import tempfile
    from pathlib import Path

    from models.vocoder import PRESETS, Vocoder
    from utils import inference
    from utils.audio import FeatureConfig
    from utils.text.tokenizers import make_tokenizer
    from utils.training.checkpoint import save_checkpoint
    from utils.vocoder import save_vocoder
    from utils.workspace import Workspace

    tok = make_tokenizer("phoneme")
    model = acoustic_model(preset, frames_per_token, "cpu", n_symbols=len(tok.symbols))
    fixtures = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "amharic_sentences.txt"
    text = "\n".join(fixtures.read_text(encoding="utf-8").splitlines()[:n_sentences])
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace.open(Path(tmp) / "ws")
        save_checkpoint(ws.root / "runs/r/checkpoints/step-1", model.state_dict(),
                        {"model": model.cfg.to_dict(), "frontend": {"kind": tok.kind, "symbols": tok.symbols,
                                                                    "tokenizer": tok.to_dict()},
                         "speakers": [], "features": FeatureConfig().to_dict(), "step": 1})
        save_vocoder(Vocoder(PRESETS["mel-24khz"]), ws.root / "vocoders/vocos")
        options = dict(steps=steps, vocoder="vocoders/vocos", device=device)
        inference.synthesize(ws, "r", "ሰላም ነው።", **options)  # load + warm-up
        runs = [streamed(inference.speak(ws, "r", text, **options)) for _ in range(repeats)]
    first = sorted(runs, key=lambda r: r["first_audio_s"])[len(runs) // 2]  # the median run's first chunk
    info = runs[-1]["info"]
    return {"device": device, "preset": preset, "steps": steps, "sentences": info["spoken"],
            "audio_s": info["duration_s"], "first_audio_s": first["first_audio_s"],
            "first_cpu_s": min(r["first_cpu_s"] for r in runs), "first_chunk_s": first["first_chunk_s"],
            "total_s": info["seconds"], "rtf": info["rtf"]}


def streamed(chunks) -> dict:
    """One streamed text: seconds to its first chunk (wall, and this process's CPU time, which other work on a shared
    machine does not inflate), the audio that chunk holds, and the last chunk's info."""
    cpu0 = time.process_time()
    first = next(chunks)
    cpu = time.process_time() - cpu0
    info = first.info
    for chunk in chunks:
        info = chunk.info
    return {"first_audio_s": first.info["first_audio_s"], "first_cpu_s": cpu,
            "first_chunk_s": len(first.wave) / first.sample_rate, "info": info}


E2E_COLUMNS = [("device", "device"), ("preset", "preset"), ("steps", "ODE steps"), ("sentences", "sentences"),
               ("audio_s", "audio s", "{:.1f}"), ("first_audio_s", "first audio after s", "{:.3f}"),
               ("first_cpu_s", "its CPU s", "{:.3f}"), ("first_chunk_s", "first chunk's audio s", "{:.2f}"),
               ("total_s", "whole text s", "{:.2f}"), ("rtf", "end-to-end RTF", "{:.3f}")]


def timed(fn, device: str) -> tuple[float, object]:
    common.sync(device)
    t0 = time.perf_counter()
    out = fn()
    common.sync(device)
    return time.perf_counter() - t0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["tiny", "base"])
    p.add_argument("--steps", type=int, nargs="+", default=[10], help="Euler steps of the flow decoder")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4], help="sentences per synthesise_batch call")
    p.add_argument("--sentences", type=int, default=4, help="sentences per row")
    p.add_argument("--tokens", type=int, default=60, help="symbols per sentence (~4 s of speech)")
    p.add_argument("--frames-per-token", type=int, default=7, help="mel frames each symbol gets (7 = 75 ms)")
    p.add_argument("--no-vocoder", action="store_true", help="acoustic model only")
    p.add_argument("--e2e-sentences", type=int, default=12,
                   help="sentences of the end-to-end streamed row (0: skip it)")
    common.add_machine_args(p)
    args = p.parse_args()

    import torch

    from models.vocoder import PRESETS, Vocoder
    from utils.audio import FeatureConfig
    from utils.vocoder import griffin_lim, vocode

    common.start(args)
    feat = FeatureConfig()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    g = torch.Generator().manual_seed(0)
    sentences = [torch.randint(1, 100, (args.tokens,), generator=g, device=g.device).tolist() for _ in range(args.sentences)]
    print(f"# {args.sentences} sentences x {args.tokens} symbols, {args.frames_per_token} frames per symbol; "
          f"{common.machine()['summary']}", flush=True)
    rows = []
    for device in devices:
        vocos = None if args.no_vocoder else Vocoder(PRESETS["mel-24khz"]).to(device).eval()
        for preset in args.presets:
            print(f"  {common.model_size(preset, n_speakers=1)}", flush=True)
            model = acoustic_model(preset, args.frames_per_token, device)
            for steps in args.steps:
                for batch in args.batch:
                    def speak():
                        return [out for i in range(0, len(sentences), batch)
                                for out in model.synthesise_batch(sentences[i:i + batch], None, steps)]

                    speak()  # warm-up (kernels, allocator)
                    seconds, outs = timed(speak, device)
                    mels = [o["mel"] for o in outs]
                    audio_s = sum(m.shape[-1] for m in mels) * feat.hop_length / feat.sample_rate
                    row = {"device": device, "preset": preset, "steps": steps, "batch": batch, "audio_s": audio_s,
                           "acoustic_rtf": seconds / audio_s}
                    if vocos is not None:
                        vocoded = timed(lambda: [vocode(vocos, m) for m in mels], device)[0]
                        row["vocos_rtf"] = (seconds + vocoded) / audio_s
                    if device == "cpu" and not args.no_vocoder:
                        gl = timed(lambda: [griffin_lim(m.cpu(), feat) for m in mels], device)[0]
                        row["griffin_lim_rtf"] = (seconds + gl) / audio_s
                    rows.append(row)
                    print(f"  {device} {preset} {steps} steps batch {batch}: RTF {row['acoustic_rtf']:.4f}", flush=True)
        common.release(device)
    print(common.markdown_table(COLUMNS, rows))
    e2e = []
    if args.e2e_sentences:
        for device in devices:
            for preset in args.presets:
                e2e.append(end_to_end(preset, args.frames_per_token, device, args.e2e_sentences, args.steps[0]))
        print("\n# end to end through utils.inference.speak (text -> G2P -> batches -> Vocos), streamed")
        print(common.markdown_table(E2E_COLUMNS, e2e))

    def draw(fig):
        ax = fig.subplots()
        labels = [f"{r['device']} {r['preset']} {r['steps']} st b{r['batch']}" for r in rows]
        for key, color in (("acoustic_rtf", "tab:blue"), ("vocos_rtf", "tab:orange"), ("griffin_lim_rtf", "tab:red")):
            if any(key in r for r in rows):
                ax.barh([f"{lab} {key[:-4]}" for lab, r in zip(labels, rows) if key in r],
                        [r[key] for r in rows if key in r], color=color, label=key.replace("_", " "))
        ax.axvline(1.0, color="grey", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("real-time factor (compute s / audio s; < 1 is faster than real time)")
        ax.tick_params(axis="y", labelsize=6)
        ax.invert_yaxis()
        ax.legend(fontsize=7)

    common.save("inference", {"sentences": args.sentences, "tokens": args.tokens,
                              "frames_per_token": args.frames_per_token, "rows": rows,
                              "end_to_end": e2e}, draw, args.out)


if __name__ == "__main__":
    main()
