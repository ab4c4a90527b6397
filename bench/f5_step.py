"""One F5-TTS training step at the v1 Base size (337 M parameters), as the F5 engine runs it: the flow-matching
loss with span infilling on a batch of frames, backward, AdamW. Random weights (no download needed): the cost of a
step does not depend on their values.

    python bench/f5_step.py                         # CPU: 1 clip of 3 s, 2 steps (about a minute each on 2 cores)
    python bench/f5_step.py --frames 38400 --steps 10 --precision bf16   # a GPU: the published per-GPU batch
    python bench/f5_step.py --frames 38400 --steps 10 --precision bf16 --reference   # and the reference's step
    python bench/f5_step.py --preset tiny --steps 1 --reference                      # a check of the bench itself
    python bench/f5_step.py --frames 38400 --steps 10 --precision bf16 --compile --reference   # ours compiled

Why: the hardware verdict says a CPU cannot fine-tune the base in useful time, and the GPU plan needs the step time,
frames/s and peak memory at this size. Prints ms/step, frames/s, peak memory (GPU) or resident memory (CPU).

--reference also times the reference implementation, f5-tts 1.1.22's CFM + DiT (what tests/test_f5_model.py checks
models/f5*.py against), built from the same config, on the same batch, with the same precision, optimizer and
number of steps, in the same process right after ours: our speed is then a ratio measured side by side on one
card, not a comparison with a number published for other hardware. Ours runs first, the reference second, each
after its own warm-up step, with the GPU memory of the first freed before the second is built.

--compile: ours as the trainer runs it with compile on (torch.compile of its transformer, the F5 adapter's compile
target, through utils/training/compiled.py); the warm-up step then includes the compilation (its own column), and
a later step that meets a guidance-drop case for the first time (none, the audio, both: Python booleans the DiT
branches on) compiles again, so ms/step is the median of the steps after the warm-up, for both rows. The reference
stays eager, as f5-tts trains.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import random
import statistics
import sys
import time
import types
from pathlib import Path

import common  # bench/common.py; puts the repository root on sys.path

REFERENCE_VERSION = "1.1.22"
COLUMNS = [("model", "model"), ("preset", "preset"), ("params_m", "parameters (M)", "{:.1f}"),
           ("frames", "frames/batch"), ("precision", "precision"), ("ms_per_step", "ms/step", "{:.0f}"),
           ("frames_per_s", "frames/s", "{:.0f}"), ("peak_gib", "peak GiB", "{:.2f}"),
           ("warmup_ms", "warm-up step ms", "{:.0f}")]


def import_reference():
    """(dit, cfm) modules of the installed f5-tts, imported piecemeal as tests/test_f5_model.py does: an empty
    stand-in for f5_tts/model/__init__.py (which pulls in the trainer: accelerate, wandb, datasets, ...), and
    stand-ins for imports the DiT and CFM never call, each only where the real one cannot be imported: torchaudio
    (its wave->mel extractor; we pass mels), rjieba and pypinyin (its Chinese tokenizer), and librosa (its BigVGAN
    mel filters; the GPU machine's image has no librosa)."""
    spec = importlib.util.find_spec("f5_tts")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"--reference needs f5-tts: python -m pip install --no-deps f5-tts=={REFERENCE_VERSION} "
                         "(tests/run.sh does; bench/gpu_carry.py carries it to a GPU machine)")
    model_dir = Path(list(spec.submodule_search_locations)[0]) / "model"

    def importable(name: str) -> bool:
        try:
            importlib.import_module(name)
            return True
        except Exception:  # absent, or built for another torch
            return False

    stubs = {"torchaudio": {}, "rjieba": {}, "pypinyin": {"Style": None, "lazy_pinyin": None},
             "librosa": {"__path__": []}, "librosa.filters": {"mel": None}}
    # which packages are missing is settled before any stand-in exists: a stand-in parent would make its own
    # submodule look importable (the first H200 run: "'librosa' is not a package")
    missing = {root for root in {name.split(".")[0] for name in stubs} if not importable(root)}
    for name, attrs in stubs.items():
        if name.split(".")[0] in missing:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
    model = types.ModuleType("f5_tts.model")
    model.__path__ = [str(model_dir)]
    sys.modules["f5_tts.model"] = model
    return importlib.import_module("f5_tts.model.backbones.dit"), importlib.import_module("f5_tts.model.cfm")


def reference_model(cfg, ref):
    """The reference CFM + DiT with the architecture and training switches of our F5Config `cfg`."""
    dit, cfm = ref
    arch = cfg.backbone_kwargs()
    backbone = dit.DiT(**{k: v for k, v in arch.items() if k not in ("long_skip", "attn_mask")},
                       long_skip_connection=arch["long_skip"], attn_mask_enabled=arch["attn_mask"])
    return cfm.CFM(transformer=backbone, audio_drop_prob=cfg.audio_drop_prob, cond_drop_prob=cfg.cond_drop_prob,
                   frac_lengths_mask=cfg.frac_lengths_mask)


def compile_ours(model) -> str:
    """torch.compile of our transformer as the trainer does it (utils/f5/adapter.py's compile_targets, guarded by
    utils/training/compiled.py); what the row says: "compiled", or why it ran eager."""
    from utils.training import optimization as opt

    m = opt.Machine()
    m.set("compile", True, "--compile")
    opt.compile_model(model, m, [model.transformer])
    return "compiled" if m.compile else m.reasons["compile"]


def time_steps(model, loss_of, steps: int, device: str, bf16: bool) -> list[float]:
    """Seconds of each of steps + 1 training steps (forward, backward, AdamW); the first is the warm-up."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
    amp = torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        with amp:
            loss = loss_of(model)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        common.sync(device)  # a CPU-GPU sync point, once a step: the step's time, not its launch's
        times.append(time.perf_counter() - t0)
    return times


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
    parser.add_argument("--reference", action="store_true", help=f"also time f5-tts {REFERENCE_VERSION}'s CFM + "
                        "DiT from the same config on the same batch, and print the ratio")
    parser.add_argument("--compile", action="store_true", help="ours compiled as the trainer compiles it (the "
                        "reference stays eager)")
    common.add_machine_args(parser)
    args = parser.parse_args()
    ref = import_reference() if args.reference else None  # before any timing: a missing package fails at once
    report = common.start(args)
    device = report.device
    cfg = PRESETS[args.preset]
    n = max(1, args.frames // args.clip_frames)
    torch.manual_seed(0)
    mel = torch.randn(n, args.clip_frames, cfg.mel_dim, device=device) - 5
    text = torch.randint(0, cfg.text_num_embeds, (n, args.clip_frames // 3), device=device)
    lens = torch.full((n,), args.clip_frames, device=device)

    ours = "ours (models/f5.py)" + (", compiled" if args.compile else "")
    builds = [(ours, lambda: F5TTS(cfg), lambda m: m(mel, text, lens)["loss"])]
    if ref is not None:  # first: eager and quick, its row is printed before ours compiles (a cut run keeps it)
        builds.insert(0, (f"reference (f5-tts {REFERENCE_VERSION})", lambda: reference_model(cfg, ref),
                          lambda m: m(mel, text, lens=lens)[0]))
    rows = []
    for name, build, loss_of in builds:
        torch.manual_seed(0)
        random.seed(0)  # the reference flips its guidance-drop coins with Python's random()
        model = build().to(device)
        model.transformer.checkpoint_activations = args.checkpointing  # both backbones have the switch
        compiled = compile_ours(model) if args.compile and name == ours else None
        common.reset_peak(device)
        times = time_steps(model, loss_of, args.steps, device, args.precision == "bf16")
        ms = 1000 * statistics.median(times[1:] or times)  # a compiled step that met a new drop case compiled again
        peak = common.peak_gib(device) if device == "cuda" else psutil.Process().memory_info().rss / 2**30
        rows.append({"model": name, "preset": args.preset, "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
                     "frames": n * args.clip_frames, "precision": args.precision, "ms_per_step": ms,
                     "frames_per_s": n * args.clip_frames / (ms / 1000), "peak_gib": peak,
                     "warmup_ms": 1000 * times[0], **({"compile": compiled} if compiled else {})})
        if compiled and compiled != "compiled":
            rows[-1]["model"] += f" (compile failed, ran eager: {compiled})"
        print(f"{rows[-1]['model']}: {ms:.0f} ms/step, peak {common.fmt(peak)} GiB", flush=True)
        del model
        gc.collect()
        torch._dynamo.reset()  # compiled graphs hold on to the model they were traced from
        common.reset_peak(device)  # the next model starts with this one's memory returned
    print(common.markdown_table(COLUMNS, rows))
    payload = {"rows": rows, "device": device}
    if ref is not None:
        theirs, ours = rows
        payload["speed_vs_reference"] = theirs["ms_per_step"] / ours["ms_per_step"]
        print(f"ours vs the reference, same batch and card: {payload['speed_vs_reference']:.2f}x the frames/s "
              f"({ours['ms_per_step']:.0f} vs {theirs['ms_per_step']:.0f} ms/step; peak "
              f"{common.fmt(ours['peak_gib'])} vs {common.fmt(theirs['peak_gib'])} GiB)")
    common.save("f5_step", payload, out=args.out)


if __name__ == "__main__":
    main()
