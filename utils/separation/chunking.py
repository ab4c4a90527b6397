"""Overlap-add chunking: any length in, bounded memory, model-rate conversions per chunk.

A file is cut into chunks of `chunk` samples that overlap by `overlap`. Each chunk is gated, resampled
to the backend's rate, converted to its channel count, separated in batches, converted back, and
cross-faded with linear ramps (which sum to one) into the output. Resampler and STFT edge effects sit
at chunk edges, where the ramps weigh them ~0. Only the batch being separated and one overlap of
finished output are held, so an hour-long file costs the same memory as a minute.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from utils.audio import resample
from utils.events import Event, StudioError
from utils.separation.gate import has_music, music_score

Reader = Callable[[int, int], np.ndarray]  # (start, length) -> [C, length] float32
Writer = Callable[[np.ndarray, np.ndarray], None]  # (speech [C, m], residual [C, m]), called in order


@dataclass
class ChunkReport:
    scores: list[float] = field(default_factory=list)
    separated: list[bool] = field(default_factory=list)
    peak_buffer_bytes: int = 0  # largest working set of one batch (inputs, model-rate copies, outputs)

    @property
    def score(self) -> float:
        return max(self.scores, default=0.0)

    @property
    def any_separated(self) -> bool:
        return any(self.separated)


def plan(n: int, chunk: int, overlap: int) -> list[int]:
    """Chunk starts; each chunk is `chunk` long (the last may be shorter but longer than `overlap`)."""
    if n <= chunk:
        return [0]
    hop = chunk - overlap
    return list(range(0, n - overlap, hop))


def chunk_span(backend, sr: int) -> tuple[int, int]:
    """(chunk, overlap) in samples at `sr` for a backend (its class or an instance)."""
    return int(backend.chunk_seconds * sr), max(1, int(backend.overlap_seconds * sr))


def gate_scores(x: np.ndarray, sr: int, backend) -> list[float]:
    """The gate's score of each chunk separate_chunks cuts from `x` [C, T], with no model loaded: a worker process
    can tell a clean clip (most of a dataset) from one with music before any separator runs."""
    chunk, overlap = chunk_span(backend, sr)
    n = x.shape[1]
    return [music_score(x[:, s:s + min(chunk, n - s)], sr) for s in plan(n, chunk, overlap)]


def _ramps(length: int, overlap: int, first: bool, last: bool) -> np.ndarray:
    w = np.ones(length, np.float32)
    up = (np.arange(overlap, dtype=np.float32) + 0.5) / overlap
    if not first:
        w[:overlap] = up
    if not last:
        w[length - overlap:] = 1.0 - up
    return w


def _to_model(x: np.ndarray, sr: int, backend) -> np.ndarray:
    """[C, L] at sr -> [C', L'] at the backend's rate and channel count."""
    y = resample(x, sr, backend.sample_rate)
    if backend.channels == 2 and y.shape[0] == 1:
        y = np.repeat(y, 2, axis=0)
    elif backend.channels == 2 and y.shape[0] > 2:
        y = np.stack([y.mean(axis=0)] * 2)
    return y


def _from_model(y: np.ndarray, channels: int, sr: int, length: int, backend) -> np.ndarray:
    if y.shape[0] != channels:
        y = np.repeat(y.mean(axis=0, keepdims=True), channels, axis=0)
    y = resample(np.ascontiguousarray(y), backend.sample_rate, sr)
    out = np.zeros((channels, length), np.float32)
    m = min(length, y.shape[1])
    out[:, :m] = y[:, :m]
    return out


def separate_chunks(read: Reader, write: Writer, n: int, sr: int, channels: int, backend, batch_size: int = 1,
                    gate_threshold: float | None = None, should_stop: Callable[[], bool] | None = None,
                    report: ChunkReport | None = None) -> Iterator[Event]:
    """Separate `n` samples from `read` into `write`. gate_threshold=None separates every chunk."""
    report = report if report is not None else ChunkReport()
    chunk, overlap = chunk_span(backend, sr)
    starts = plan(n, chunk, overlap)
    hop = chunk - overlap
    pending: np.ndarray | None = None  # weighted output of the previous chunk's overlap, not final yet
    for b0 in range(0, len(starts), max(1, batch_size)):
        if should_stop is not None and should_stop():
            raise StudioError("Music removal was cancelled; nothing was written.")
        batch = starts[b0:b0 + batch_size]
        inputs = [read(s, min(chunk, n - s)) for s in batch]
        outputs = [x.copy() for x in inputs]  # pass-through unless the gate says music
        todo = []
        for i, x in enumerate(inputs):
            score = music_score(x, sr) if gate_threshold is not None else 1.0
            music = gate_threshold is None or has_music(score, gate_threshold)
            report.scores.append(round(score, 4) if gate_threshold is not None else float("nan"))
            report.separated.append(music)
            if music and np.any(x):
                todo.append(i)
        model_in = {i: _to_model(inputs[i], sr, backend) for i in todo}
        # chunks of one length go through the model together; the short last chunk of a file goes alone, as it
        # would unbatched: zeros padded after it would change what the model hears at its end
        for width in sorted({y.shape[1] for y in model_in.values()}):
            group = [i for i in todo if model_in[i].shape[1] == width]
            stacked = np.stack([model_in[i] for i in group])
            if backend.channels == 1:  # mono models see each channel as its own item
                speech = backend.speech(stacked.reshape(-1, 1, width)).reshape(stacked.shape)
            else:
                speech = backend.speech(stacked)
            used = sum(x.nbytes for x in inputs) * 3 + stacked.nbytes * 3
            report.peak_buffer_bytes = max(report.peak_buffer_bytes, used)
            for k, i in enumerate(group):
                outputs[i] = _from_model(speech[k], inputs[i].shape[0], sr, inputs[i].shape[1], backend)
        for s, x, y in zip(batch, inputs, outputs):
            first, last = s == starts[0], s == starts[-1]
            w = _ramps(x.shape[1], overlap, first, last) if len(starts) > 1 else np.ones(x.shape[1], np.float32)
            y = y * w
            xw = x * w  # the residual is cross-faded the same way, so speech + residual == input
            if pending is not None:
                y[:, :overlap] += pending[0]
                xw[:, :overlap] += pending[1]
            if last:
                write(y, xw - y)
                pending = None
            else:
                write(y[:, :hop], xw[:, :hop] - y[:, :hop])
                pending = (y[:, hop:], xw[:, hop:])
        done = min(len(starts), b0 + len(batch))
        yield Event("separate", done, len(starts), f"{min(n, starts[done - 1] + chunk) / sr:.0f} of {n / sr:.0f} s of audio separated")
