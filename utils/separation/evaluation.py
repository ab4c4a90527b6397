"""Measuring separation: SI-SDR, synthetic music, and mixtures with known sources.

The benchmark and the tests mix real speech with music made here (chords, bass line, drums), so the
true speech is known exactly and quality is a number, not an impression.
"""
from __future__ import annotations

import numpy as np


def si_sdr(estimate: np.ndarray, reference: np.ndarray, eps: float = 1e-9) -> float:
    """Scale-invariant SDR in dB (Le Roux et al., 2019), both signals mean-removed."""
    n = min(len(estimate), len(reference))
    est = np.asarray(estimate[:n], np.float64) - np.mean(estimate[:n])
    ref = np.asarray(reference[:n], np.float64) - np.mean(reference[:n])
    target = (est @ ref) / (ref @ ref + eps) * ref
    noise = est - target
    return float(10 * np.log10((target @ target + eps) / (noise @ noise + eps)))


def mix_at_snr(speech: np.ndarray, music: np.ndarray, snr_db: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale `music` so speech/music energy is `snr_db`; returns (mixture, speech, scaled music), peak <= 0.9."""
    n = len(speech)
    music = np.resize(music, n)
    gain = np.sqrt(np.sum(speech ** 2) / (np.sum(music ** 2) + 1e-12) / 10 ** (snr_db / 10))
    music = music * gain
    mix = speech + music
    peak = max(np.abs(mix).max() / 0.9, 1.0)
    return (mix / peak).astype(np.float32), (speech / peak).astype(np.float32), (music / peak).astype(np.float32)


def synth_music(seconds: float, sr: int, seed: int = 0, bpm: float = 110.0) -> np.ndarray:
    """A loop of chords (detuned saw-like pads), a bass line, kick, snare and hi-hat. Mono float32."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    t = np.arange(n) / sr
    beat = 60.0 / bpm
    out = np.zeros(n)
    roots = 110.0 * 2 ** (rng.choice([0, 2, 3, 5, 7, 8, 10], size=4) / 12)  # A minor-ish progression
    bar = 4 * beat
    for start in np.arange(0, seconds, bar):
        root = roots[int(start / bar) % 4]
        i0, i1 = int(start * sr), min(n, int((start + bar) * sr))
        tt = t[i0:i1] - start
        env = np.minimum(1.0, tt / 0.05) * np.exp(-tt / (bar * 1.5))
        for ratio in (1.0, 1.26, 1.5, 2.0):  # root, third, fifth, octave
            f = 2 * root * ratio
            for k in range(1, 7):  # harmonics of a soft sawtooth, two slightly detuned voices
                out[i0:i1] += env * 0.05 / k * (np.sin(2 * np.pi * f * k * tt) + np.sin(2 * np.pi * f * 1.003 * k * tt))
        for q in range(4):  # bass plays the root on every beat
            b0 = i0 + int(q * beat * sr)
            b1 = min(n, b0 + int(beat * 0.9 * sr))
            bt = t[b0:b1] - t[b0] if b1 > b0 else t[:0]
            out[b0:b1] += 0.25 * np.exp(-bt / 0.3) * np.sin(2 * np.pi * root / 2 * bt)
    for k, start in enumerate(np.arange(0, seconds, beat / 2)):  # eighth notes
        i0 = int(start * sr)
        m = min(n - i0, int(0.25 * sr))
        if m <= 0:
            continue
        dt = np.arange(m) / sr
        if k % 4 == 0:  # kick: falling sine
            out[i0:i0 + m] += 0.6 * np.exp(-dt / 0.08) * np.sin(2 * np.pi * (50 + 80 * np.exp(-dt / 0.03)) * dt)
        if k % 4 == 2:  # snare: noise burst + tone
            out[i0:i0 + m] += np.exp(-dt / 0.06) * (0.25 * rng.standard_normal(m) + 0.2 * np.sin(2 * np.pi * 190 * dt))
        hat = rng.standard_normal(m) * np.exp(-dt / 0.015) * 0.08  # hi-hat: short bright noise
        out[i0:i0 + m] += np.diff(hat, prepend=0.0)
    out /= np.abs(out).max() + 1e-9
    return (0.8 * out).astype(np.float32)
