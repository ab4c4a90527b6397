"""Vocos-style vocoder: log-mel frames -> waveform through a ConvNeXt backbone and an ISTFT head.

The network runs at the mel frame rate and predicts a complex STFT that one inverse FFT turns into
audio, so it is an order of magnitude cheaper than upsampling GAN vocoders. Parameter names follow the
public `charactr/vocos-mel-24khz` checkpoint (`backbone.*`, `head.*`), so its weights load as they are.

    mel [B, n_mels, T] -> backbone -> [B, T, dim] -> head -> wave [B, hop * (T - 1)]
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class VocoderConfig:
    n_mels: int = 100          # input channels: the feature config's mel bands
    dim: int = 512             # backbone width
    intermediate_dim: int = 1536  # ConvNeXt inverted-bottleneck width
    num_layers: int = 8        # ConvNeXt blocks
    n_fft: int = 1024          # ISTFT size (513 bins predicted)
    hop_length: int = 256      # must equal the mel hop: one frame in, hop samples out
    sample_rate: int = 24_000  # only recorded, the network itself is rate-agnostic
    max_magnitude: float = 1e2  # Vocos "safeguard" clip of exp(log-magnitude)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "VocoderConfig":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


PRESETS = {
    "mel-24khz": VocoderConfig(),  # the public checkpoint's sizes (13.5 M parameters)
    "small": VocoderConfig(dim=256, intermediate_dim=768, num_layers=6),
    "tiny": VocoderConfig(dim=64, intermediate_dim=192, num_layers=2),  # tests and CPU smoke runs
}


class ConvNeXtBlock(nn.Module):
    """Depthwise conv (k=7) -> LN -> Linear -> GELU -> Linear -> layer scale -> residual."""

    def __init__(self, dim: int, intermediate_dim: int, layer_scale: float):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, T]
        h = self.dwconv(x).transpose(1, 2)               # [B, T, C]
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)      # [B, C, T]


class Backbone(nn.Module):
    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.embed = nn.Conv1d(cfg.n_mels, cfg.dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(cfg.dim, eps=1e-6)
        self.convnext = nn.ModuleList(
            ConvNeXtBlock(cfg.dim, cfg.intermediate_dim, 1.0 / cfg.num_layers) for _ in range(cfg.num_layers))
        self.final_layer_norm = nn.LayerNorm(cfg.dim, eps=1e-6)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Conv1d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:  # mel: [B, n_mels, T]
        x = self.embed(mel)                                 # [B, dim, T]
        x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))     # [B, T, dim]


class ISTFT(nn.Module):
    """Inverse STFT with center padding: T frames -> hop * (T - 1) samples."""

    def __init__(self, n_fft: int, hop_length: int):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.register_buffer("window", torch.hann_window(n_fft))  # periodic Hann, as the STFT

    def forward(self, spec: torch.Tensor) -> torch.Tensor:  # spec: complex [B, n_fft//2+1, T]
        return torch.istft(spec, self.n_fft, self.hop_length, self.n_fft, self.window, center=True)


class ISTFTHead(nn.Module):
    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.out = nn.Linear(cfg.dim, cfg.n_fft + 2)
        self.istft = ISTFT(cfg.n_fft, cfg.hop_length)
        self.max_magnitude = cfg.max_magnitude
        nn.init.trunc_normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, T, dim]
        # fp32 here whatever the autocast: exp() of the log-magnitude overflows fp16 before the clip.
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = self.out(x.float()).transpose(1, 2)          # [B, n_fft+2, T]
            log_mag, phase = h.chunk(2, dim=1)                # [B, n_fft/2+1, T] each
            mag = torch.exp(log_mag).clamp(max=self.max_magnitude)
            spec = torch.polar(mag, phase)                    # mag * (cos p + i sin p)
            return self.istft(spec)                           # [B, hop * (T - 1)]


class Vocoder(nn.Module):
    """The generator. `forward(mel)` with mel the natural-log magnitude mel [B, n_mels, T]."""

    def __init__(self, cfg: VocoderConfig = VocoderConfig()):
        super().__init__()
        self.cfg = cfg
        self.backbone = Backbone(cfg)
        self.head = ISTFTHead(cfg)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:  # [B, n_mels, T] -> [B, hop * (T - 1)]
        return self.head(self.backbone(mel))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
