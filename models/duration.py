"""Duration predictor: encoder states (detached, speaker included) -> log frame count per token."""
from __future__ import annotations

import torch
import torch.nn as nn

from models.text_encoder import ChannelNorm


class DurationPredictor(nn.Module):
    def __init__(self, in_channels: int, channels: int, kernel: int = 3, dropout: float = 0.1):
        super().__init__()
        self.net = nn.ModuleList([
            nn.Conv1d(in_channels, channels, kernel, padding=kernel // 2), nn.ReLU(), ChannelNorm(channels),
            nn.Dropout(dropout),
            nn.Conv1d(channels, channels, kernel, padding=kernel // 2), nn.ReLU(), ChannelNorm(channels),
            nn.Dropout(dropout),
        ])
        self.proj = nn.Conv1d(channels, 1, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: [B, C, N] (the caller detaches it: durations do not train the encoder); mask [B, 1, N] -> log w [B, 1, N]."""
        for layer in self.net:
            x = layer(x * mask) if isinstance(layer, nn.Conv1d) else layer(x)
        return self.proj(x * mask) * mask
