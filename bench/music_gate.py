"""Music gate calibration: the score of clean speech against speech with music under it.

    python bench/music_gate.py                   # the full grid (a few minutes on 2 CPU cores)
    python bench/music_gate.py --quick           # fewer voices and sentences
    python bench/music_gate.py --json out.json   # also save every score

Clean speech: espeak-ng in Amharic (5 voice variants) and 4 other languages, at rates 120-220 words per
minute and pitches 20-80, short (~2 s: one phrase) and long (several sentences) clips. Music: the
synthetic band of utils.separation.evaluation (chords, bass, drums), a sustained pad alone, and a melody of
plucked notes, each mixed under the same speech at +20 to 0 dB SNR. Prints the score distribution of each
group and how many clips each threshold gets wrong.
"""
from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

import numpy as np

import common  # noqa: F401,E402  (bench/common.py; puts the repository root on sys.path)
from tests.helpers import sentences  # noqa: E402
from utils.audio import load_audio  # noqa: E402
from utils.separation.evaluation import mix_at_snr, synth_music  # noqa: E402
from utils.separation.gate import THRESHOLD, music_score  # noqa: E402

SR = 24_000
AMHARIC = ("am", "am+f2", "am+m3", "am+f4", "am+m1")
OTHERS = ("en", "de", "fr-fr", "hi")  # other languages' phonetics: the gate must not be tuned to one language
OTHER_TEXT = {"en": "The weather was calm and the market opened early this morning.",
              "de": "Am Morgen war das Wetter ruhig und der Markt war früh geöffnet.",
              "fr-fr": "Ce matin le temps était calme et le marché a ouvert tôt.",
              "hi": "आज सुबह मौसम शांत था और बाज़ार जल्दी खुल गया।"}
RATES = (120, 160, 190, 220)
PITCHES = (20, 50, 80)
SNRS = (20.0, 15.0, 10.0, 5.0, 0.0)


def pad(seconds: float, seed: int) -> np.ndarray:
    """A held chord, no drums: the most 'sustained' music, the easiest for the gate."""
    t = np.arange(int(seconds * SR)) / SR
    root = 110.0 * 2 ** (np.random.default_rng(seed).integers(0, 12) / 12)
    out = sum(np.sin(2 * np.pi * root * r * k * t) / k for r in (1, 1.26, 1.5) for k in range(1, 5))
    return (0.8 * out / np.abs(out).max()).astype(np.float32)


def melody(seconds: float, seed: int) -> np.ndarray:
    """Plucked notes, a new one every 0.3 s: music that changes as often as speech does (the hardest case)."""
    rng = np.random.default_rng(seed)
    n, step = int(seconds * SR), int(0.3 * SR)
    out = np.zeros(n)
    for i0 in range(0, n, step):
        f = 220.0 * 2 ** (rng.choice([0, 2, 4, 5, 7, 9, 11, 12]) / 12)
        tt = np.arange(min(step * 2, n - i0)) / SR
        out[i0:i0 + len(tt)] += np.exp(-tt / 0.4) * sum(np.sin(2 * np.pi * f * k * tt) / k ** 1.5 for k in range(1, 6))
    return (0.8 * out / (np.abs(out).max() + 1e-9)).astype(np.float32)


MUSIC = {"band": lambda s, seed: synth_music(s, SR, seed=seed), "pad": pad, "melody": melody}


def speak(text: str, voice: str, rate: int, pitch: int, folder: Path) -> np.ndarray:
    path = folder / f"{abs(hash((text, voice, rate, pitch)))}.wav"
    import shutil
    import subprocess

    subprocess.run([shutil.which("espeak-ng"), "-v", voice, "-s", str(rate), "-p", str(pitch), "-w", str(path), text],
                   check=True, capture_output=True)
    audio, _ = load_audio(path, sample_rate=SR)
    return audio


def clean_clips(quick: bool, folder: Path):
    """(group, voice, rate, pitch, audio) of clean speech: short phrases and long passages."""
    texts = sentences()
    short = [s for s in texts if 12 <= len(s) <= 30][: 3 if quick else 8]
    long = [" ".join(texts[i:i + 3]) for i in range(0, 3 if quick else 12, 3)]
    voices = AMHARIC[:2] if quick else AMHARIC
    for voice, rate, pitch in itertools.product(voices, RATES[::2] if quick else RATES, PITCHES):
        for text in short:
            yield "clean short (am)", voice, rate, pitch, speak(text, voice, rate, pitch, folder)
        for text in long[:1] if rate != 160 else long:
            yield "clean long (am)", voice, rate, pitch, speak(text, voice, rate, pitch, folder)
    for voice, rate, pitch in itertools.product(OTHERS[:2] if quick else OTHERS, RATES[::2], PITCHES[::2]):
        yield "clean (other languages)", voice, rate, pitch, speak(OTHER_TEXT[voice], voice, rate, pitch, folder)


def run(quick: bool) -> dict[str, list[float]]:
    scores: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (group, voice, rate, pitch, audio) in enumerate(clean_clips(quick, Path(tmp))):
            scores.setdefault(group, []).append(music_score(audio, SR))
            if voice not in AMHARIC or k % 3:  # music under every third Amharic clip: enough mixtures, less time
                continue
            kind = list(MUSIC)[k // 3 % len(MUSIC)]
            music = MUSIC[kind](len(audio) / SR + 0.1, k)
            for snr in SNRS:
                mix, _, _ = mix_at_snr(audio, music, snr)
                scores.setdefault(f"music {snr:+.0f} dB", []).append(music_score(mix, SR))
                scores.setdefault(f"{kind} {snr:+.0f} dB", []).append(music_score(mix, SR))
    return scores


def table(scores: dict[str, list[float]]) -> None:
    print(f"{'group':26} {'clips':>5} {'min':>7} {'p5':>7} {'median':>7} {'p95':>7} {'max':>7}")
    for group, values in scores.items():
        v = np.array(values)
        print(f"{group:26} {len(v):5d} {v.min():7.4f} {np.percentile(v, 5):7.4f} {np.median(v):7.4f} "
              f"{np.percentile(v, 95):7.4f} {v.max():7.4f}")


def errors(scores: dict[str, list[float]], thresholds) -> None:
    clean = np.concatenate([v for g, v in scores.items() if g.startswith("clean")])
    print(f"\n{'threshold':>9} {'clean called music':>19} " + " ".join(f"{f'missed {s:+.0f} dB':>14}" for s in SNRS))
    for t in thresholds:
        missed = [np.mean(np.array(scores[f"music {s:+.0f} dB"]) < t) for s in SNRS]
        print(f"{t:9.3f} {np.mean(clean >= t):18.1%} " + " ".join(f"{m:14.1%}" for m in missed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="save every score here")
    args = ap.parse_args()
    scores = run(args.quick)
    table(scores)
    errors(scores, sorted({0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, THRESHOLD}))
    print(f"\ncurrent THRESHOLD = {THRESHOLD}")
    if args.json:
        Path(args.json).write_text(json.dumps(scores, indent=1))


if __name__ == "__main__":
    main()
