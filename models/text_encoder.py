"""Transformer text encoder (Matcha-TTS layout): token ids -> hidden states and the prior mean mu.

embedding * sqrt(C) -> conv prenet (residual, zero-init output) -> concat speaker vector ->
N post-LN transformer layers (SDPA attention with RoPE on half of each head, conv FFN) -> 1x1 conv
to mu (in normalised-mel space). Every layer can recompute its activations in the backward pass
(`grad_checkpointing`).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from models.attention import Attention
from models.precision import LayerNorm


class ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of [B, C, T]. Computed as autocast computes it (fp32 on a GPU), returned
    in the input's dtype (models/precision.py): a bf16 residual stream stays bf16 instead of doubling its memory."""

    def __init__(self, channels: int, eps: float = 1e-4):
        super().__init__()
        self.norm = LayerNorm(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class ConvPrenet(nn.Module):
    def __init__(self, channels: int, n_layers: int = 3, kernel: int = 5, dropout: float = 0.5):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(
            nn.Conv1d(channels, channels, kernel, padding=kernel // 2), ChannelNorm(channels), nn.ReLU(),
            nn.Dropout(dropout)) for _ in range(n_layers))
        self.proj = nn.Conv1d(channels, channels, 1)
        nn.init.zeros_(self.proj.weight)  # starts as the identity
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: [B, C, T]; mask: [B, 1, T] float."""
        h = x
        for layer in self.layers:
            h = layer(h * mask)
        return (x + self.proj(h)) * mask


class EncoderLayer(nn.Module):
    def __init__(self, channels: int, n_heads: int, ffn: int, kernel: int, dropout: float):
        super().__init__()
        # no dropout on the attention probabilities (Matcha has 0.1): then every fused SDPA kernel,
        # CPU flash included, can run it; the residual dropout below stays
        self.attn = Attention(channels, n_heads, dropout=0.0, rope_fraction=0.5)
        self.norm1 = ChannelNorm(channels)
        self.ff1 = nn.Conv1d(channels, ffn, kernel, padding=kernel // 2)
        self.ff2 = nn.Conv1d(ffn, channels, kernel, padding=kernel // 2)
        self.norm2 = ChannelNorm(channels)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """x: [B, C, T]; mask: [B, 1, T] float; key_mask: [B, T] bool or None."""
        a = self.attn(x.transpose(1, 2), key_mask).transpose(1, 2)  # [B, C, T]
        x = self.norm1(x + self.drop(a)) * mask
        h = self.ff2(self.drop(F.relu(self.ff1(x * mask))) * mask)
        return self.norm2(x + self.drop(h)) * mask


class TextEncoder(nn.Module):
    def __init__(self, n_symbols: int, channels: int, n_layers: int, n_heads: int, ffn: int, kernel: int,
                 dropout: float, spk_dim: int, n_feats: int):
        super().__init__()
        self.channels = channels
        self.emb = nn.Embedding(n_symbols, channels)
        nn.init.normal_(self.emb.weight, 0.0, channels ** -0.5)
        self.prenet = ConvPrenet(channels)
        width = channels + spk_dim  # speaker vector joins after the prenet (Matcha multispeaker)
        self.width = width
        self.layers = nn.ModuleList(EncoderLayer(width, n_heads, ffn, kernel, dropout) for _ in range(n_layers))
        self.proj_mu = nn.Conv1d(width, n_feats, 1)
        self.grad_checkpointing = False

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, spk: torch.Tensor | None,
                key_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens: [B, N] ids; mask: [B, 1, N]; spk: [B, S] or None -> (mu [B, F, N], hidden [B, C+S, N])."""
        x = self.emb(tokens).transpose(1, 2).to(mask.dtype) * math.sqrt(self.channels)  # [B, C, N], bf16 under autocast
        x = self.prenet(x, mask)
        if spk is not None:
            x = torch.cat([x, spk[:, :, None].expand(-1, -1, x.shape[-1]).to(x.dtype)], dim=1) * mask  # [B, C+S, N]
        for layer in self.layers:
            if self.grad_checkpointing and self.training:
                x = checkpoint(layer, x, mask, key_mask, use_reentrant=False)  # recompute in backward
            else:
                x = layer(x, mask, key_mask)
        return self.proj_mu(x) * mask, x
