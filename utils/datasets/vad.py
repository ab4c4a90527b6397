"""Voice activity: Silero VAD over long recordings (streamed, never loaded whole), and the cheap
energy measures used on short clips (edge trimming, active frames, SNR estimate)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

VAD_RATE = 16_000
BLOCK_SECONDS = 300  # read 5 minutes at a time: a 3-hour file costs ~20 MB of memory, not 1 GB


@lru_cache(maxsize=1)
def _silero():
    import torch
    from silero_vad import load_silero_vad

    import warnings

    torch.set_num_threads(1)  # one VAD per worker process; the pool provides the parallelism
    with warnings.catch_warnings():  # the packaged model is TorchScript; torch warns about jit.load
        warnings.simplefilter("ignore", FutureWarning)
        return load_silero_vad()


def speech_segments(path: Path, threshold: float = 0.5) -> list[tuple[float, float]]:
    """Speech (start s, end s) in a recording of any length, read block by block."""
    import torch
    from silero_vad import get_speech_timestamps

    model = _silero()
    segments: list[tuple[float, float]] = []
    with sf.SoundFile(str(path)) as f:
        stream = soxr.ResampleStream(f.samplerate, VAD_RATE, 1, dtype="float32")
        offset = 0  # samples at VAD_RATE already analysed
        while True:
            block = f.read(int(BLOCK_SECONDS * f.samplerate), dtype="float32", always_2d=True)
            last = len(block) < int(BLOCK_SECONDS * f.samplerate)
            mono = stream.resample_chunk(block.mean(axis=1), last=last)
            if len(mono):
                stamps = get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(mono)), model,
                                               threshold=threshold, sampling_rate=VAD_RATE)
                segments += [((offset + s["start"]) / VAD_RATE, (offset + s["end"]) / VAD_RATE) for s in stamps]
                offset += len(mono)
            if last:
                break
    return merge_gaps(segments, 0.05)  # join speech cut at a block boundary


def merge_gaps(segments: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(segments):
        if out and s - out[-1][1] <= gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def clips_from_speech(segments: list[tuple[float, float]], min_len: float, max_len: float,
                      max_gap: float = 0.6, pad: float = 0.15) -> list[tuple[float, float]]:
    """Group speech into clips: join neighbours closer than `max_gap` while the clip stays under
    `max_len`, split longer speech evenly, and drop what stays shorter than `min_len`."""
    clips: list[list[float]] = []
    for s, e in segments:
        if clips and s - clips[-1][1] <= max_gap and e - clips[-1][0] <= max_len:
            clips[-1][1] = e
        else:
            clips.append([s, e])
    out = []
    for s, e in clips:
        n = int(np.ceil((e - s) / max_len))
        step = (e - s) / n
        out += [(s + i * step, s + (i + 1) * step) for i in range(n)]
    return [(max(0.0, s - pad), e + pad) for s, e in out if e - s >= min_len]


def refine_cue(start: float, end: float, segments: list[tuple[float, float]], slack: float = 0.3,
               pad: float = 0.08) -> tuple[float, float]:
    """Move a subtitle cue's edges to the speech it covers (cues are often early or late by ~0.2 s)."""
    inside = [(s, e) for s, e in segments if e > start - slack and s < end + slack]
    if not inside:
        return start, end
    return max(start - slack, inside[0][0] - pad, 0.0), min(end + slack, inside[-1][1] + pad)


# ---------------------------------------------------------------------------- short-clip energy
FRAME = 0.02  # s


def frame_db(audio: np.ndarray, sr: int) -> np.ndarray:
    """RMS level of 20 ms frames in dBFS."""
    n = max(1, int(FRAME * sr))
    frames = len(audio) // n
    if frames == 0:
        return np.array([20 * np.log10(max(float(np.sqrt(np.mean(audio ** 2))) if len(audio) else 0, 1e-10))])
    x = audio[: frames * n].reshape(frames, n).astype(np.float64)
    return 10 * np.log10(np.maximum((x * x).mean(axis=1), 1e-20))


def trim_bounds(db: np.ndarray, sr: int, n_samples: int, trim_db: float, pad: float) -> tuple[int, int]:
    """Sample range from the first to the last frame within `trim_db` of the loudest, plus `pad`."""
    active = np.flatnonzero(db > db.max() - trim_db)
    if len(active) == 0:
        return 0, n_samples
    n = max(1, int(FRAME * sr))
    start = max(0, active[0] * n - int(pad * sr))
    end = min(n_samples, (active[-1] + 1) * n + int(pad * sr))
    return start, end


def snr_estimate(db: np.ndarray) -> float:
    """Speech level (90th percentile frame) over noise floor (10th percentile), in dB."""
    if len(db) < 10:
        return 99.0
    return float(min(np.percentile(db, 90) - np.percentile(db, 10), 99.0))
