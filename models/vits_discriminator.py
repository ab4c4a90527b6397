"""The VITS discriminator: one scale discriminator on the raw waveform plus five period discriminators (HiFi-GAN's
multi-period, the same network as the vocoder's, models/discriminators.py), in one list whose order and parameter
names follow the original VITS checkpoints (`discriminators.0` is the scale one), so that MMS-TTS's published
discriminator (facebook/mms-tts, full_models/<lang>/D_100000.pth) loads into it (`original_state_dict`).

`forward(wave [B, T])` returns (logits, features): one logit map per sub-discriminator and, for each, every layer's
activations (VITS matches all of them, the first layer's included). Never part of a voice: training only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from models.discriminators import LRELU_SLOPE, PeriodDiscriminator

PERIODS = (2, 3, 5, 7, 11)
SCALE_CHANNELS = (16, 64, 256, 1024, 1024, 1024)
PERIOD_CHANNELS = (32, 128, 512, 1024, 1024)
SCALE_KERNELS, SCALE_STRIDES = (15, 41, 41, 41, 41, 5), (1, 4, 4, 4, 4, 1)


class ScaleDiscriminator(nn.Module):
    """MelGAN's discriminator on the waveform itself (VITS keeps only the first scale): strided convolutions whose
    groups hold 4 input channels each, between a plain first and last one."""

    def __init__(self, channels=SCALE_CHANNELS):
        super().__init__()
        layers, c_in = [], 1
        for i, (c_out, k, stride) in enumerate(zip(channels, SCALE_KERNELS, SCALE_STRIDES)):
            groups = c_in // 4 if 0 < i < len(channels) - 1 else 1
            layers.append(weight_norm(nn.Conv1d(c_in, c_out, k, stride, padding=k // 2, groups=groups)))
            c_in = c_out
        self.convs = nn.ModuleList(layers)
        self.post = weight_norm(nn.Conv1d(c_in, 1, 3, padding=1))

    def forward(self, wave: torch.Tensor):  # wave: [B, T]
        x = wave.unsqueeze(1)                                    # [B, 1, T]
        features = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU_SLOPE)               # [B, C, T / stride...]
            features.append(x)
        x = self.post(x)
        features.append(x)
        return x.flatten(1), features


class VitsDiscriminator(nn.Module):
    """The published sizes by default (46.7 M parameters); tests pass tiny ones (`sizes_of` reads them back)."""

    def __init__(self, scale_channels=SCALE_CHANNELS, period_channels=PERIOD_CHANNELS, periods=PERIODS):
        super().__init__()
        self.discriminators = nn.ModuleList(
            [ScaleDiscriminator(tuple(scale_channels))]
            + [PeriodDiscriminator(p, tuple(period_channels), all_features=True) for p in periods])

    def forward(self, wave: torch.Tensor):
        outs = [d(wave) for d in self.discriminators]
        return [o[0] for o in outs], [o[1] for o in outs]


def original_state_dict(state: dict) -> dict:
    """A discriminator's weights as the original VITS code names them (`discriminators.1.conv_post.weight_g`, ...)
    -> this module's names. The old weight-norm pair (weight_g, weight_v) is kept: torch's weight_norm
    parametrization reads it itself when the state dict loads."""
    return {k.replace(".conv_post.", ".post."): v for k, v in state.items()}


def sizes_of(state: dict) -> dict:
    """The constructor's sizes that a state dict in either naming holds (the published discriminator or a tiny test
    one), read from its weight shapes: {"scale_channels", "period_channels", "periods"}."""
    state = original_state_dict(state)

    def out_channels(sub: int) -> tuple:
        found = []
        while (w := next((state[k] for k in (f"discriminators.{sub}.convs.{len(found)}.{s}" for s in (
                "weight_v", "parametrizations.weight.original1", "weight")) if k in state), None)) is not None:
            found.append(int(w.shape[0]))
        return tuple(found)

    n_periods = sum(1 for k in state if k.startswith("discriminators.") and k.endswith(".post.bias")) - 1
    return {"scale_channels": out_channels(0), "period_channels": out_channels(1), "periods": PERIODS[:n_periods]}
