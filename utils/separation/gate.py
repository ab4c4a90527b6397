"""The music gate: does this clip have music under it? Clean speech must pass through untouched.

Music is *sustained*: chords, bass notes and pads hold the same frequencies for seconds, while speech
changes every syllable and stops between phrases. The score is the fraction of the clip's energy
(60 Hz - 4 kHz, where chords and bass live) that a running 30th-percentile over ~2 s explains: for
each frequency bin, the energy that stays present most of the time. Calibrated with bench/music_gate.py
(bench/RESULTS.md): 601 clean espeak-ng clips (5 Amharic voices, 4 other languages, rates 120-220, pitches
20-80) score 0.000-0.031; short (~2 s) clips score highest (p95 0.021), since a 2 s window sees no pause.
Speech over synthetic music (band, held pad, plucked melody) scores 0.002-0.014 at +20 dB SNR, 0.008-0.087
at +10 dB, 0.021-0.48 at 0 dB. No threshold separates quiet music from short clean clips, so there are two:
THRESHOLD makes a separated candidate (5% of clean short clips reach it, never used unless picked), CLEAR
is where music is clearly there (no clean clip reached it; 83% of music at +5 dB, 95% at 0 dB does) and
Accept uses the separated audio by default. Steady noise (hum, fans) also scores high; separating it is
harmless. Cost: ~8 ms per second of audio.
"""
from __future__ import annotations

import numpy as np

from utils.audio import resample

GATE_SAMPLE_RATE = 16_000
THRESHOLD = 0.02  # separate: 5% of short clean clips reach it, 85% of speech over music at +10 dB SNR
CLEAR = 0.04  # music clearly there: above every clean clip measured (max 0.031); Accept uses these by default
_N_FFT, _HOP = 1024, 512
_WINDOW_FRAMES = 63  # ~2 s at 32 ms hop
_BAND = (60.0, 4000.0)


def music_score(audio: np.ndarray, sr: int) -> float:
    """Fraction (0..1) of the clip's 60 Hz-4 kHz energy that is sustained over ~2 s. Mono [T] or [C, T]."""
    import scipy.ndimage as ndi  # here: a second or two of every app start otherwise (the tab imports this module)
    import scipy.signal as ss

    x = np.asarray(audio, dtype=np.float32)
    x = x.mean(axis=0) if x.ndim == 2 else x
    x = resample(x, sr, GATE_SAMPLE_RATE)
    if len(x) < _N_FFT:
        return 0.0
    freqs, _, spec = ss.stft(x, GATE_SAMPLE_RATE, nperseg=_N_FFT, noverlap=_N_FFT - _HOP, boundary=None)
    band = (freqs >= _BAND[0]) & (freqs <= _BAND[1])
    power = np.abs(spec[band]) ** 2  # [F, frames]
    total = float(power.sum())
    if total <= 1e-10 * power.size:  # digital silence
        return 0.0
    floor = ndi.percentile_filter(power, 30, size=(1, _WINDOW_FRAMES), mode="nearest")
    return float(np.minimum(floor, power).sum() / total)


def has_music(score: float, threshold: float = THRESHOLD) -> bool:
    return score >= threshold
