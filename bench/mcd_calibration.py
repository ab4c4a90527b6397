"""MCD calibration: reproduce shared/notes/environment.md's reference values with utils.evaluation.mcd.

    python bench/mcd_calibration.py                 # 4 sentences (about a minute on 2 busy cores)
    python bench/mcd_calibration.py --sentences 10

For each espeak-ng Amharic sentence (loaded at 24 kHz, as the app's dataset clips and model output
are), against the same recording:
- the same sentence at another speaking rate (espeak -s 120 instead of 160)     notes: 2.1 dB
- Griffin-Lim copy synthesis from the full-band mel (utils.vocoder.griffin_lim)  notes: 4.4 dB
- Griffin-Lim from a mel capped at 8 kHz                                          notes: 7.8 dB
- white noise about 20 dB below the speech (RMS)                                  notes: 6.6 dB
- an unrelated sentence                                                           notes: ~12 dB
plus the log-mel proxy (utils.evaluation.logmel_mcd) on the same pairs and the time per MCD call; with
--recognizer-speed, the speed of the recognizer behind an evaluation's CER (bench/recognizer_speed.py).
Results go to bench/out/mcd_calibration-<cpu|cuda>.json and .png (bench/common.py).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import numpy as np
import recognizer_speed

from tests.helpers import espeak_amharic, sentences  # noqa: E402
from utils.audio import FeatureConfig, load_audio, log_mel  # noqa: E402
from utils.evaluation import logmel_mcd, mcd  # noqa: E402
from utils.vocoder import griffin_lim  # noqa: E402

SR = 24_000
NOTES = {"other rate": 2.1, "Griffin-Lim full band": 4.4, "Griffin-Lim mel to 8 kHz": 7.8,
         "noise -20 dB": 6.6, "unrelated sentence": 12.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=4)
    parser.add_argument("--gl-iters", type=int, default=64)
    parser.add_argument("--recognizer-speed", action="store_true",
                        help="also time the CER's recognizer (bench/recognizer_speed.py): omniASR 300M against MMS")
    recognizer_speed.add_args(parser)
    common.add_output_args(parser)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp())
    texts = sentences(args.sentences + 1)
    waves = [load_audio(espeak_amharic(t, tmp / f"s{i}.wav"), SR)[0] for i, t in enumerate(texts)]
    rng = np.random.default_rng(0)
    capped = FeatureConfig(f_max=8000.0)
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in NOTES}
    mcd_times, audio_seconds = [], 0.0
    for i in range(args.sentences):
        ref = waves[i]
        noise = rng.normal(0, 1, len(ref)).astype(np.float32)
        noise *= np.sqrt(np.mean(ref ** 2)) / np.sqrt(np.mean(noise ** 2)) * 10 ** (-20 / 20)
        tests = {
            "other rate": load_audio(espeak_amharic(texts[i], tmp / f"r{i}.wav", rate=120), SR)[0],
            "Griffin-Lim full band": griffin_lim(log_mel(ref), n_iter=args.gl_iters),
            "Griffin-Lim mel to 8 kHz": griffin_lim(log_mel(ref, capped), capped, n_iter=args.gl_iters),
            "noise -20 dB": ref + noise,
            "unrelated sentence": waves[i + 1],
        }
        for name, test in tests.items():
            t0 = time.perf_counter()
            value = mcd(ref, SR, test, SR)
            mcd_times.append(time.perf_counter() - t0)
            audio_seconds += len(test) / SR
            rows[name].append((value, logmel_mcd(log_mel(ref), log_mel(test))))

    print(f"MCD calibration, {args.sentences} espeak-ng sentences at {SR} Hz, Griffin-Lim {args.gl_iters} iterations")
    print("| condition | notes (dB) | MCD mean (dB) | min-max | log-mel proxy (dB) |")
    print("|---|---|---|---|---|")
    table = []
    for name, values in rows.items():
        m = np.array([v[0] for v in values])
        p = np.array([v[1] for v in values])
        table.append({"condition": name, "notes_db": NOTES[name], "mcd_mean": float(m.mean()), "mcd_min": float(m.min()),
                      "mcd_max": float(m.max()), "logmel_mcd_mean": float(p.mean())})
        print(f"| {name} | {NOTES[name]:.1f} | {m.mean():.2f} | {m.min():.2f}-{m.max():.2f} | {p.mean():.2f} |")
    per_call = float(np.mean(mcd_times))
    # the reference side is cached across calls, as during training evaluation
    print(f"\nmcd(): {per_call:.2f} s per call on average, {sum(mcd_times) / audio_seconds:.3f} s per second of test audio")
    speeds = (recognizer_speed.measure(args.recognizer_seconds, args.recognizer_repeats) if args.recognizer_speed
              else [])
    if speeds:  # an evaluation's CER hears each synthesised clip, and the recordings once per run
        print("\nThe CER's speech recognizer (random weights, real size):\n" + recognizer_speed.report(speeds))

    def draw(fig):
        ax = fig.subplots()
        names = [r["condition"] for r in table]
        ax.barh(names, [r["mcd_mean"] for r in table], color="tab:blue", label="MCD (ours)")
        ax.plot([r["notes_db"] for r in table], names, "k|", markersize=14, label="notes")
        ax.set_xlabel("MCD (dB)")
        ax.invert_yaxis()
        ax.legend(fontsize=8)

    common.save("mcd_calibration", {"sentences": args.sentences, "gl_iters": args.gl_iters, "rows": table,
                                    "mcd_s_per_call": per_call, "recognizer_speed": speeds}, draw, args.out)


if __name__ == "__main__":
    main()
