"""Audio I/O, resampling and the model's mel features.

Audio is read and written with soundfile (WAV, FLAC, OGG, MP3 and whatever libsndfile decodes) and
resampled with soxr. What libsndfile cannot decode (M4A/AAC from phones and video sites, WebM, WMA,
AMR) is decoded by ffmpeg when it is installed. Mel features match the public 24 kHz Vocos vocoder exactly (n_fft 1024, hop 256,
100 HTK mels without filter normalisation, full band, center=True, natural log of magnitude floored
at 1e-7) so a Vocos vocoder, trained here or supplied by the user, turns our mels into audio.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from utils.events import StudioError
from utils.workspace import temp_beside

MODEL_SAMPLE_RATE = 24_000
# containers and codecs libsndfile does not read; ffmpeg decodes them
FFMPEG_SUFFIXES = (".m4a", ".aac", ".mp4", ".m4b", ".webm", ".mkv", ".mka", ".mov", ".wma", ".amr", ".3gp")


@dataclass(frozen=True)
class FeatureConfig:
    sample_rate: int = MODEL_SAMPLE_RATE
    n_fft: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    n_mels: int = 100
    f_min: float = 0.0
    f_max: float | None = None  # None = sample_rate / 2 (full band, as Vocos)
    log_floor: float = 1e-7

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureConfig":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def key(self) -> str:
        """Short stable id of this configuration, used to key the feature cache."""
        text = ",".join(f"{k}={v}" for k, v in sorted(self.to_dict().items()))
        return hashlib.sha1(text.encode()).hexdigest()[:10]

    def frames(self, n_samples: int) -> int:
        return n_samples // self.hop_length + 1  # center=True


def audio_info(path: str | Path) -> sf._SoundFileInfo:
    if not Path(path).exists():  # not "damaged": a path mistyped is the usual cause
        raise StudioError(f"{Path(path).name}: file not found at {path}.")
    try:
        return sf.info(str(path))
    except Exception as exc:  # soundfile raises several types for unreadable files
        raise StudioError(unreadable(Path(path).name, exc)) from exc


# The first bytes of containers libsndfile does not read, whatever the file is called (a phone's AAC saved as .mp3
# or .wav was "not readable audio" while ffmpeg was there to decode it): MP4/M4A/3GP ("ftyp" at byte 4),
# Matroska/WebM, ASF (WMA), AMR.
FFMPEG_MAGIC = ((4, b"ftyp"), (0, b"\x1a\x45\xdf\xa3"), (0, b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"), (0, b"#!AMR"))


def needs_ffmpeg(path: str | Path) -> bool:
    """Whether only ffmpeg decodes this file: by its suffix, else by its first bytes."""
    path = Path(path)
    if path.suffix.lower() in FFMPEG_SUFFIXES:
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return any(head[at:at + len(magic)] == magic for at, magic in FFMPEG_MAGIC)


def decode_with_ffmpeg(src: str | Path, dst: str | Path) -> Path:
    """Decode `src` (any format ffmpeg reads) to a FLAC file `dst`, written atomically; `src` is only read."""
    src, dst = Path(src), Path(dst)
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        kind = (f"{src.suffix.lstrip('.').upper()} audio" if src.suffix.lower() in FFMPEG_SUFFIXES else
                "this audio (M4A/AAC, WebM, WMA or AMR inside, whatever its name says)")
        raise StudioError(f"{src.name}: {kind} needs ffmpeg to decode. Install it "
                          "(apt-get install ffmpeg, brew install ffmpeg; Colab has it) or re-export the file as WAV, "
                          "FLAC or MP3.")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.stem}.tmp{os.getpid()}.flac")
    done = subprocess.run([ffmpeg, "-nostdin", "-v", "error", "-y", "-i", str(src), "-vn", "-map", "0:a:0",
                           "-c:a", "flac", "-sample_fmt", "s16", str(tmp)], capture_output=True, text=True)
    if done.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        reason = (done.stderr.strip().splitlines() or ["no audio stream"])[-1][:200]
        raise StudioError(f"{src.name}: not readable audio (ffmpeg: {reason}). Re-export it as WAV or FLAC.")
    os.replace(tmp, dst)
    return dst


def load_audio(path: str | Path, sample_rate: int | None = None, mono: bool = True) -> tuple[np.ndarray, int]:
    """Decode a file to float32. mono=True gives shape [T] (channels averaged), else [C, T]."""
    path = Path(path)
    if not path.exists():
        raise StudioError(f"{path.name}: file not found at {path}.")
    if path.stat().st_size == 0:
        raise StudioError(f"{path.name}: the file is empty (0 bytes). Replace it or remove its row.")
    if needs_ffmpeg(path):
        with tempfile.TemporaryDirectory() as tmp:
            return load_audio(decode_with_ffmpeg(path, Path(tmp) / "decoded.flac"), sample_rate, mono)
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:
        raise StudioError(unreadable(path.name, exc)) from exc
    if data.shape[0] == 0:
        raise StudioError(f"{path.name}: the file holds no audio samples.")
    audio = data.mean(axis=1) if mono else data.T
    if sample_rate and sr != sample_rate:
        audio, sr = resample(audio, sr, sample_rate), sample_rate
    return np.ascontiguousarray(audio, dtype=np.float32), sr


def resample(audio: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """High-quality resampling (soxr). Accepts [T] or [C, T]."""
    if orig_sr == target_sr:
        return audio
    if audio.ndim == 1:
        return soxr.resample(audio, orig_sr, target_sr).astype(np.float32)
    return soxr.resample(audio.T, orig_sr, target_sr).T.astype(np.float32)


def save_audio(path: str | Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Write audio atomically; the format follows the suffix (.wav is 16-bit PCM, .flac 16-bit)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    audio = np.asarray(audio, dtype=np.float32)
    data = audio.T if audio.ndim == 2 else audio
    fd, tmp = temp_beside(path, path.suffix)
    os.close(fd)
    try:
        sf.write(tmp, np.clip(data, -1.0, 1.0), sample_rate, subtype="PCM_16" if path.suffix.lower() in (".wav", ".flac") else None)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.clip(np.asarray(audio, dtype=np.float32), -1, 1), sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """Content hash of a file: caches are keyed by what the audio is, not where it lies."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=8)
def mel_filterbank(cfg: FeatureConfig = FeatureConfig()):
    """HTK-scale triangular filters without normalisation, [n_fft/2+1, n_mels] (torch float32; shared, so
    never modify it in place).

    The matrix Vocos' features use (torchaudio's `melscale_fbanks(norm=None, mel_scale="htk")`, equal to
    librosa's `filters.mel(htk=True, norm=None)`), written with torch alone: the studio needs no
    torchaudio, whose builds pair with only some torch builds (see the README's install notes).
    """
    import torch

    f_max = cfg.f_max if cfg.f_max is not None else cfg.sample_rate / 2
    freqs = torch.linspace(0, cfg.sample_rate // 2, cfg.n_fft // 2 + 1, dtype=torch.float64)
    mel_lo, mel_hi = (2595.0 * np.log10(1.0 + f / 700.0) for f in (cfg.f_min, f_max))
    mels = torch.linspace(mel_lo, mel_hi, cfg.n_mels + 2, dtype=torch.float64)
    edges = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)                       # [n_mels + 2] in Hz
    rising = (freqs[:, None] - edges[None, :-2]) / (edges[1:-1] - edges[:-2])
    falling = (edges[None, 2:] - freqs[:, None]) / (edges[2:] - edges[1:-1])
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()


def magnitude_spectrogram(wav, cfg: FeatureConfig = FeatureConfig(), center: bool = True):
    """|STFT| of waveform(s) [T] or [B, T] -> [.., n_fft/2+1, frames] (Hann window; `center`: reflect-padded by
    n_fft/2 each side first, as Vocos' features are; False when the caller padded already)."""
    import torch

    window = torch.hann_window(cfg.win_length, device=wav.device, dtype=wav.dtype)
    spec = torch.stft(wav, cfg.n_fft, hop_length=cfg.hop_length, win_length=cfg.win_length, window=window,
                      center=center, pad_mode="reflect", return_complex=True)
    return spec.abs()


def log_mel_of_magnitude(magnitude, cfg: FeatureConfig = FeatureConfig()):
    """|STFT| [.., n_fft/2+1, frames] -> natural-log mel [.., n_mels, frames], floored at cfg.log_floor."""
    import torch

    mel = torch.matmul(mel_filterbank(cfg).to(magnitude.device).T, magnitude)
    return torch.log(torch.clamp(mel, min=cfg.log_floor))


def log_mel(audio, cfg: FeatureConfig = FeatureConfig()):
    """Log-magnitude mel of waveform(s) [T] or [B, T] (torch tensor or numpy) -> torch [.., n_mels, frames]."""
    import torch

    return log_mel_of_magnitude(magnitude_spectrogram(torch.as_tensor(audio, dtype=torch.float32), cfg), cfg)


def short_reason(exc: Exception) -> str:
    """What the audio reader said, for a curator: its first line, without the server path it names ("Error opening
    '/tmp/.../x.wav': ..."), cut at a word rather than mid-word."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^Error opening '[^']*':\s*", "", text)
    return text if len(text) <= 160 else text[:160].rsplit(" ", 1)[0] + " ..."


def unreadable(name: str, exc: Exception) -> str:
    """The message for an audio file that cannot be read: which file, in plain words, and what to do."""
    return f"{name}: not readable audio, damaged or not a sound file ({short_reason(exc)}); re-export it as WAV or FLAC."
