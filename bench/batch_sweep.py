"""Batch-size sweep: mel frames/s and peak memory against frames per batch, with the probe's choice marked.

    python bench/batch_sweep.py                                   # CPU: tiny preset, 400..3200 frames
    python bench/batch_sweep.py --preset base                     # GPU: 2k..64k frames, then the real probe
    python bench/batch_sweep.py --frames 8000 16000 32000 --no-probe

Why: the trainer picks frames per batch by a measured probe (utils/training/probe.py: one real step on the
longest utterances, doubled then bisected, `probe_headroom` kept, reported through
hardware.with_measured_batch). This shows whether that choice sits where throughput has flattened and
memory still fits. Every size runs the trainer's speed configuration (its "auto" settings, no gradient
checkpointing) on a synthetic batch of utterances of up to `--utt-frames` frames; an out-of-memory ends
the sweep. On the CPU the trainer runs no probe, so the mark is the hardware recommendation.
"""
from __future__ import annotations

import argparse
import time

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("frames", "frames per batch"), ("utterances", "utterances"), ("ms_per_step", "ms/step", "{:.1f}"),
           ("frames_per_s", "mel frames/s", "{:,.0f}"), ("peak_gib", "peak GiB", "{:.2f}"),
           ("padding", "padding", "{:.1%}"), ("mark", "")]


def probe_choice(step, model, report, utt_frames: int, start: int, headroom: float = 0.85) -> tuple[int, str]:
    """What the trainer would run: the probe on a GPU (as the training loop calls it), the recommendation on a CPU."""
    from utils import hardware
    from utils.training.probe import probe_max_frames

    if report.device != "cuda":
        rec = report.recommended["max_frames_per_batch"]
        return rec.value, f"CPU: no probe, the recommendation ({rec.reason[:60]}...)"

    def try_frames(frames: int) -> None:  # the probe's batch: as many longest utterances as fit
        batch = common.synthetic_batch(max(frames, utt_frames), utt_frames, seed=1)
        batch["mel_lens"][:] = utt_frames
        step(batch)

    def cleanup() -> None:  # as the trainer's probe: drop the failed step's gradients and cached blocks
        model.zero_grad(set_to_none=True)
        common.reset_peak("cuda")

    fitted, _ = probe_max_frames(try_frames, start, utt_frames, cleanup=cleanup,
                                 log=lambda line: print("  " + line, flush=True))
    measured = max(utt_frames, int(fitted * headroom))
    rep = hardware.with_measured_batch(report, measured, f"{fitted} frames fitted in one real step; "
                                                         f"{headroom:.0%} kept")
    return rep.recommended["max_frames_per_batch"].value, rep.recommended["max_frames_per_batch"].reason


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=None, help="tiny (CPU default) | small | base (GPU default)")
    p.add_argument("--frames", type=int, nargs="+", default=None,
                   help="frames per batch to try (default: 2000 doubling to 64000 on a GPU, 400..3200 on a CPU)")
    p.add_argument("--utt-frames", type=int, default=None, help="frames of the longest utterance (600 GPU, 200 CPU)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per size (default 10 GPU, 3 CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per size (default 3 GPU, 1 CPU)")
    p.add_argument("--no-probe", action="store_true", help="GPU: skip the probe (only the sweep)")
    common.add_machine_args(p)
    args = p.parse_args()

    from utils.training.failures import is_oom

    report = common.start(args)
    gpu = report.device == "cuda"
    preset = args.preset or ("base" if gpu else "tiny")
    sizes = args.frames or ([2000 * 2 ** i for i in range(6)] if gpu else [400, 800, 1600, 3200])
    utt = args.utt_frames or (600 if gpu else 200)
    steps, warmup = args.steps or (10 if gpu else 3), args.warmup or (3 if gpu else 1)
    print(f"# {common.model_size(preset)}, speed configuration, utterances <= {utt} frames, {steps} timed steps after "
          f"{warmup} warm-up per size; {common.machine()['summary']}", flush=True)

    step, m, model = common.train_step(preset, common.SPEED, report)
    rows = []
    for frames in sizes:
        batch = common.synthetic_batch(frames, utt)
        row = {"frames": frames, "utterances": len(batch["tokens"]), "padding": common.padding_fraction(batch)}
        try:
            for _ in range(warmup):
                step(batch)
            common.sync(m.device)
            common.reset_peak(m.device)
            t0 = time.perf_counter()
            for _ in range(steps):
                step(batch)
            common.sync(m.device)
            dt = (time.perf_counter() - t0) / steps
            row.update(ms_per_step=1e3 * dt, frames_per_s=float(batch["mel_lens"].sum()) / dt,
                       peak_gib=common.peak_gib(m.device))
        except Exception as exc:
            if not is_oom(exc):
                raise
            row["ms_per_step"] = "out of memory"
            rows.append(row)
            common.reset_peak(m.device)
            break
        rows.append(row)
        print(f"  {frames} frames: {row['ms_per_step']:.1f} ms/step, {row['frames_per_s']:.0f} frames/s", flush=True)

    start = report.recommended["max_frames_per_batch"].value
    if gpu and args.no_probe:
        chosen, why = start, "probe skipped (--no-probe): the first guess of utils.hardware"
    else:
        chosen, why = probe_choice(step, model, report, utt, start)
    below = [r for r in rows if r["frames"] <= chosen]
    if below:
        below[-1]["mark"] = f"<- nearest to the choice ({chosen})"
    print(common.markdown_table(COLUMNS, rows))
    print(f"batch choice: {chosen} frames per batch ({why})")

    def draw(fig):
        ax = fig.subplots()
        done = [r for r in rows if isinstance(r.get("frames_per_s"), float)]
        ax.plot([r["frames"] for r in done], [r["frames_per_s"] for r in done], "o-", color="tab:blue")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("padded mel frames per batch")
        ax.set_ylabel("mel frames / s", color="tab:blue")
        ax.axvline(chosen, color="tab:red", ls="--", label=f"trainer's choice: {chosen}")
        ax.legend(loc="lower right", fontsize=8)
        if any(r["peak_gib"] for r in done):
            ax2 = ax.twinx()
            ax2.plot([r["frames"] for r in done], [r["peak_gib"] for r in done], "s--", color="tab:orange")
            ax2.set_ylabel("peak GPU memory (GiB)", color="tab:orange")

    common.save("batch_sweep", {"preset": preset, "utt_frames": utt, "steps": steps, "warmup": warmup,
                                "rows": rows, "choice": {"frames": chosen, "reason": why}}, draw, args.out)


if __name__ == "__main__":
    main()
