"""Vector-field estimator for flow matching: a 1D U-Net with transformer blocks (Matcha-TTS decoder).

input concat(x_t, mu_y[, speaker]) at T frames -> down blocks (ResNet + transformer, one 2x
downsample) -> mid blocks -> up blocks with skips -> 1x1 conv to n_feats, plus a zero-initialised
time-conditioned linear path g_x(t) * x_t + g_mu(t) * mu (our addition: without it the tiny decoder
learned only the mean and ignored x_t; bench/RESULTS.md). The time t in [0, 1] enters every ResNet
through a sinusoidal embedding and an MLP. Lengths must be multiples of 2 (the caller pads to
`LENGTH_MULTIPLE`).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from models.attention import Attention
from models.precision import GroupNorm, LayerNorm

LENGTH_MULTIPLE = 4  # frame counts are padded to this (one 2x downsample, with room as in Matcha)


def timestep_embedding(t: torch.Tensor, dim: int, scale: float = 1000.0) -> torch.Tensor:
    """t [B] in [0, 1] -> [B, dim] sinusoids."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / max(half - 1, 1))
    args = scale * t.float()[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)


class SnakeBeta(nn.Module):
    """y = x + sin^2(alpha x) / beta with per-channel alpha = e^a, beta = e^b (a = b = 0 at init).

    The per-channel factors are computed in fp32 and applied in x's dtype: an fp32 factor would promote the
    widest activation of the block (4C) to fp32, and CUDA autocast returns `** 2` in fp32 (so s * s)."""

    def __init__(self, channels: int):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(channels))
        self.b = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., C]
        alpha, inv_beta = self.a.exp().to(x.dtype), torch.reciprocal(self.b.exp() + 1e-9).to(x.dtype)
        s = torch.sin(x * alpha)
        return x + s * s * inv_beta


def masked_group_norm(x: torch.Tensor, mask: torch.Tensor, norm: nn.GroupNorm) -> torch.Tensor:
    """GroupNorm whose statistics come from the real frames only (mask [B, 1, T]).

    Plain GroupNorm averages over the padding too, so an utterance would sound different alone and
    in a padded batch; with this it does not (statistics in float32, as autocast does for GroupNorm)."""
    b, c, t = x.shape
    g = norm.num_groups
    xg = x.float().view(b, g, c // g, t)
    m = mask.float()[:, None]                                          # [B, 1, 1, T]
    count = m.sum(dim=(2, 3), keepdim=True).clamp(min=1) * (c // g)
    mean = (xg * m).sum(dim=(2, 3), keepdim=True) / count
    var = (((xg - mean) * m) ** 2).sum(dim=(2, 3), keepdim=True) / count
    y = ((xg - mean) * torch.rsqrt(var + norm.eps)).view(b, c, t)
    return (y * norm.weight.float()[:, None] + norm.bias.float()[:, None]).to(x.dtype)


class Block1D(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, groups: int = 8):
        super().__init__()
        self.conv = nn.Conv1d(dim_in, dim_out, 3, padding=1)
        self.norm = GroupNorm(groups, dim_out)  # fp32 inside, returns the input's dtype (models/precision.py)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, padded: bool = True) -> torch.Tensor:
        h = self.conv(x * mask)
        h = masked_group_norm(h, mask, self.norm) if padded else self.norm(h)
        return F.mish(h) * mask


class ResnetBlock1D(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, time_dim: int):
        super().__init__()
        self.block1 = Block1D(dim_in, dim_out)
        self.time = nn.Linear(time_dim, dim_out)
        self.block2 = Block1D(dim_out, dim_out)
        self.skip = nn.Conv1d(dim_in, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t_emb: torch.Tensor, padded: bool = True) -> torch.Tensor:
        h = self.block1(x, mask, padded) + self.time(F.mish(t_emb))[:, :, None]  # [B, O, T]
        return self.block2(h, mask, padded) + self.skip(x * mask)


class TransformerBlock(nn.Module):
    """Pre-LN self-attention + SnakeBeta feed-forward on [B, T, C]."""

    def __init__(self, channels: int, n_heads: int, head_dim: int, dropout: float):
        super().__init__()
        self.norm1 = LayerNorm(channels)  # fp32 inside, returns the input's dtype (models/precision.py)
        self.attn = Attention(channels, n_heads, head_dim, dropout=0.0, bias=False)
        self.norm2 = LayerNorm(channels)
        self.ff = nn.Sequential(nn.Linear(channels, 4 * channels), SnakeBeta(4 * channels), nn.Dropout(dropout),
                                nn.Linear(4 * channels, channels))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), key_mask))
        return x + self.ff(self.norm2(x))


class UNetLevel(nn.Module):
    """One U-Net stage: ResNet then transformer blocks, optionally resampling at the end."""

    def __init__(self, dim_in: int, dim_out: int, time_dim: int, n_blocks: int, heads: int, head_dim: int,
                 dropout: float, resample: str | None):
        super().__init__()
        self.resnet = ResnetBlock1D(dim_in, dim_out, time_dim)
        self.transformers = nn.ModuleList(TransformerBlock(dim_out, heads, head_dim, dropout) for _ in range(n_blocks))
        if resample == "down":
            self.resample = nn.Conv1d(dim_out, dim_out, 3, stride=2, padding=1)
        elif resample == "up":
            self.resample = nn.ConvTranspose1d(dim_out, dim_out, 4, stride=2, padding=1)
        else:
            self.resample = nn.Conv1d(dim_out, dim_out, 3, padding=1)

    def forward(self, x, mask, key_mask, t_emb):
        """x [B, I, T] -> (features before resampling [B, O, T], resampled [B, O, T'])."""
        x = self.resnet(x, mask, t_emb, key_mask is not None)  # no key mask = no padding
        h = x.transpose(1, 2)  # [B, T, O]
        for block in self.transformers:
            h = block(h, key_mask)
        x = h.transpose(1, 2) * mask
        return x, self.resample(x * mask)


class Decoder(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, channels: tuple[int, ...], n_blocks: int,
                 n_mid: int, heads: int, head_dim: int, dropout: float):
        super().__init__()
        self.in_channels = in_channels
        time_dim = 4 * channels[0]
        self.time_mlp = nn.Sequential(nn.Linear(in_channels, time_dim), nn.SiLU(), nn.Linear(time_dim, time_dim))
        dims = [in_channels, *channels]
        self.down = nn.ModuleList(
            UNetLevel(dims[i], dims[i + 1], time_dim, n_blocks, heads, head_dim, dropout,
                      "down" if i < len(channels) - 1 else None) for i in range(len(channels)))
        self.mid = nn.ModuleList(
            UNetLevel(channels[-1], channels[-1], time_dim, n_blocks, heads, head_dim, dropout, "keep")
            for _ in range(n_mid))
        rev = list(reversed(channels))
        self.up = nn.ModuleList(
            UNetLevel(2 * rev[i], rev[i + 1] if i + 1 < len(rev) else rev[i], time_dim, n_blocks, heads, head_dim,
                      dropout, "up" if i < len(rev) - 1 else None) for i in range(len(rev)))
        self.final = Block1D(channels[0], channels[0])
        self.proj = nn.Conv1d(channels[0], out_channels, 1)
        # time-conditioned linear path x_t, mu -> v: for one target the exact field is (mu - x_t) / (1 - t),
        # linear in x_t with a gain that depends only on t; the U-Net learns the rest
        self.gain = nn.Linear(time_dim, 2 * out_channels)
        self.out_channels = out_channels
        self.grad_checkpointing = False
        for m in self.modules():
            if isinstance(m, (nn.Conv1d, nn.Linear, nn.ConvTranspose1d)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.zeros_(self.gain.weight)
        nn.init.zeros_(self.gain.bias)

    def _level(self, level, x, mask, key_mask, t_emb):
        if self.grad_checkpointing and self.training:
            return checkpoint(level, x, mask, key_mask, t_emb, use_reentrant=False)  # recompute in backward
        return level(x, mask, key_mask, t_emb)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, t: torch.Tensor,
                spk: torch.Tensor | None = None, padded: bool = True) -> torch.Tensor:
        """x, mu: [B, F, T]; mask [B, 1, T] float; t [B]; spk [B, S] -> velocity [B, F, T].
        `padded=False` says no frame is padding, so attention runs without a mask (FlashAttention-eligible)."""
        t_emb = self.time_mlp(timestep_embedding(t, self.in_channels).to(x.dtype))  # [B, 4C]
        parts = [x, mu] + ([spk[:, :, None].expand(-1, -1, x.shape[-1])] if spk is not None else [])
        h = torch.cat(parts, dim=1)  # [B, in, T]
        masks, skips = [mask], []
        for i, level in enumerate(self.down):
            m = masks[-1]
            skip, h = self._level(level, h, m, self._keys(m, padded), t_emb)
            skips.append(skip)
            if i < len(self.down) - 1:
                masks.append(m[:, :, ::2])  # [B, 1, T/2]
        for level in self.mid:
            _, h = self._level(level, h, masks[-1], self._keys(masks[-1], padded), t_emb)
        for level in self.up:
            m = masks.pop()
            _, h = self._level(level, torch.cat([h[:, :, :skips[-1].shape[-1]], skips.pop()], dim=1), m,
                               self._keys(m, padded), t_emb)
        g_x, g_mu = self.gain(F.mish(t_emb))[:, :, None].chunk(2, dim=1)  # [B, F, 1] each
        return (self.proj(self.final(h, mask, padded)) + g_x * x + g_mu * mu) * mask

    @staticmethod
    def _keys(mask: torch.Tensor, padded: bool) -> torch.Tensor | None:
        return mask[:, 0].bool() if padded else None
