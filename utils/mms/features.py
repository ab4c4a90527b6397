"""The spectrograms VITS was trained on (MMS-TTS's checkpoints included): 16 kHz audio, a 1024-point STFT with a
256-sample hop and a 1024 Hann window, not centred but reflect-padded by (1024 - 256) / 2 each side (so a clip of
L samples has L // 256 frames, one per 256 decoder samples), magnitudes sqrt(re^2 + im^2 + 1e-6).

- the linear magnitudes (513 bins) are what the posterior encoder reads;
- their 80-band mel, on the Slaney scale with Slaney's area normalisation (librosa's default), 0-8 kHz, natural
  log floored at 1e-5, is what the mel loss compares.

These are not the studio's Vocos features (utils.audio: 24 kHz, 100 HTK bands, centred): the mel loss must be the
one the base's loss weights were tuned on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
import torch


@dataclass(frozen=True)
class VitsFeatures:
    sample_rate: int = 16_000
    n_fft: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None  # None: sample_rate / 2
    log_floor: float = 1e-5

    def to_dict(self) -> dict:
        return asdict(self)

    def frames(self, n_samples: int) -> int:
        return n_samples // self.hop_length


def spectrogram(wave: torch.Tensor, cfg: VitsFeatures = VitsFeatures()) -> torch.Tensor:
    """Waveform(s) [T] or [B, T] -> linear magnitudes [.., n_fft / 2 + 1, T // hop] (fp32)."""
    wave = wave.float()
    pad = (cfg.n_fft - cfg.hop_length) // 2
    padded = torch.nn.functional.pad(wave.unsqueeze(-2), (pad, pad), mode="reflect").squeeze(-2)
    window = torch.hann_window(cfg.win_length, device=wave.device)
    spec = torch.stft(padded, cfg.n_fft, cfg.hop_length, cfg.win_length, window, center=False, return_complex=True)
    return torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-6)


def log_mel(magnitudes: torch.Tensor, cfg: VitsFeatures = VitsFeatures()) -> torch.Tensor:
    """Linear magnitudes [.., bins, frames] -> natural-log Slaney mel [.., n_mels, frames]."""
    bank = slaney_filterbank(cfg).to(magnitudes.device)  # [n_mels, bins]
    return torch.log(torch.clamp(bank @ magnitudes, min=cfg.log_floor))


@lru_cache(maxsize=4)
def slaney_filterbank(cfg: VitsFeatures) -> torch.Tensor:
    """[n_mels, n_fft / 2 + 1] triangular filters on the Slaney mel scale (linear below 1 kHz, logarithmic above),
    each scaled to unit area (2 / its width in Hz), as librosa.filters.mel builds them by default."""
    f_max = cfg.f_max if cfg.f_max is not None else cfg.sample_rate / 2
    freqs = np.linspace(0, cfg.sample_rate / 2, cfg.n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(cfg.f_min), _hz_to_mel(f_max), cfg.n_mels + 2))  # [n_mels + 2]
    rising = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    falling = (edges[2:, None] - freqs[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    bank = np.maximum(0.0, np.minimum(rising, falling))
    bank *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return torch.from_numpy(bank).float()


_F_SP, _MIN_LOG_HZ = 200.0 / 3, 1000.0  # Slaney: 200/3 Hz a mel below 1 kHz
_MIN_LOG_MEL, _LOG_STEP = _MIN_LOG_HZ / _F_SP, np.log(6.4) / 27.0


def _hz_to_mel(hz):
    hz = np.asarray(hz, dtype=np.float64)
    return np.where(hz >= _MIN_LOG_HZ, _MIN_LOG_MEL + np.log(np.maximum(hz, 1e-10) / _MIN_LOG_HZ) / _LOG_STEP,
                    hz / _F_SP)


def _mel_to_hz(mel):
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL)), mel * _F_SP)
