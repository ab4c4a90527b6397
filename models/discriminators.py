"""Discriminators for vocoder GAN training (never part of an exported voice).

- Multi-period (HiFi-GAN): the waveform folded into [T/p, p] images for p in (2, 3, 5, 7, 11), so
  each sub-discriminator sees one phase of every period and judges periodic structure.
- Multi-resolution (UnivNet, the recipe the public Vocos checkpoint was trained with): 2-D convs over
  linear magnitude spectrograms at three STFT resolutions, judging spectral detail.

Each `forward(wave [B, T])` returns (logits, features): one logit map per sub-discriminator and, for
each, the list of intermediate activations used by the feature-matching loss.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

LRELU_SLOPE = 0.1


class PeriodDiscriminator(nn.Module):
    """`all_features`: keep every layer's activations for feature matching, as VITS does (Vocos skips the first)."""

    def __init__(self, period: int, channels=(32, 128, 512, 1024, 1024), all_features: bool = False):
        super().__init__()
        self.period, self.first_feature = period, 0 if all_features else 1
        layers, c_in = [], 1
        for i, c_out in enumerate(channels):
            stride = (3, 1) if i < len(channels) - 1 else (1, 1)
            layers.append(weight_norm(nn.Conv2d(c_in, c_out, (5, 1), stride, padding=(2, 0))))
            c_in = c_out
        self.convs = nn.ModuleList(layers)
        self.post = weight_norm(nn.Conv2d(c_in, 1, (3, 1), padding=(1, 0)))

    def forward(self, wave: torch.Tensor):  # wave: [B, T]
        pad = (-wave.shape[-1]) % self.period
        x = F.pad(wave.unsqueeze(1), (0, pad), mode="reflect")  # [B, 1, T']
        x = x.view(x.shape[0], 1, -1, self.period)               # [B, 1, T'/p, p]
        features = []
        for i, conv in enumerate(self.convs):
            x = F.leaky_relu(conv(x), LRELU_SLOPE)
            if i >= self.first_feature:  # Vocos keeps the maps from the second layer on
                features.append(x)
        x = self.post(x)
        features.append(x)
        return x.flatten(1), features


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, periods=(2, 3, 5, 7, 11), channels=(32, 128, 512, 1024, 1024)):
        super().__init__()
        self.discriminators = nn.ModuleList(PeriodDiscriminator(p, channels) for p in periods)

    def forward(self, wave: torch.Tensor):
        outs = [d(wave) for d in self.discriminators]
        return [o[0] for o in outs], [o[1] for o in outs]


class ResolutionDiscriminator(nn.Module):
    def __init__(self, n_fft: int, hop_length: int, win_length: int, channels: int = 32):
        super().__init__()
        self.n_fft, self.hop_length, self.win_length = n_fft, hop_length, win_length
        self.convs = nn.ModuleList([
            weight_norm(nn.Conv2d(1, channels, (3, 9), padding=(1, 4))),
            weight_norm(nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4))),
            weight_norm(nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4))),
            weight_norm(nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4))),
            weight_norm(nn.Conv2d(channels, channels, (3, 3), padding=(1, 1))),
        ])
        self.post = weight_norm(nn.Conv2d(channels, 1, (3, 3), padding=(1, 1)))

    def forward(self, wave: torch.Tensor):  # wave: [B, T]
        window = torch.ones(self.win_length, device=wave.device, dtype=wave.dtype)  # rectangular, as UnivNet
        spec = torch.stft(wave, self.n_fft, self.hop_length, self.win_length, window,
                          center=True, return_complex=True).abs()   # [B, F, frames]
        x = spec.transpose(1, 2).unsqueeze(1)                       # [B, 1, frames, F]
        features = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU_SLOPE)
            features.append(x)
        x = self.post(x)
        features.append(x)
        return x.flatten(1), features


class MultiResolutionDiscriminator(nn.Module):
    def __init__(self, resolutions=((1024, 256, 1024), (2048, 512, 2048), (512, 128, 512)), channels: int = 32):
        super().__init__()
        self.discriminators = nn.ModuleList(ResolutionDiscriminator(*r, channels=channels) for r in resolutions)

    def forward(self, wave: torch.Tensor):
        outs = [d(wave) for d in self.discriminators]
        return [o[0] for o in outs], [o[1] for o in outs]
