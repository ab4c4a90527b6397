"""The F5-TTS v1 backbone: a diffusion transformer (DiT) that predicts the flow of noisy mel frames.

F5-TTS has no duration model and no aligner. The text ids are padded with filler to the length of the
mel, embedded and smoothed by a few ConvNeXt blocks, and concatenated frame by frame with the noisy
mel and the audio prompt. A stack of adaLN-modulated transformer blocks (rotary positions, time as
the modulation signal) sorts out the alignment by itself.

    x, cond [B, T, mel]   text [B, N]   time [B]
      text -> TextEmbedding -> [B, T, text_dim]
      cat(x, cond, text) -> InputEmbedding -> [B, T, dim]
      -> depth x DiTBlock(time) -> final adaLN -> Linear -> flow [B, T, mel]

Module and parameter names follow the public SWivid/F5-TTS checkpoints (`time_embed.time_mlp.*`,
`text_embed.text_embed.weight`, `text_embed.text_blocks.*`, `input_embed.proj.*`,
`input_embed.conv_pos_embed.conv1d.*`, `rotary_embed.inv_freq`, `transformer_blocks.N.*`,
`norm_out.linear.*`, `proj_out.*`), so those weights load without renaming. The arithmetic follows the
reference package f5-tts 1.1.22; tests/test_f5_model.py checks the outputs against it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.attention import SDPAttention
from models.precision import LayerNorm, activation_dtype


def sinusoid_time(t: torch.Tensor, dim: int = 256, scale: float = 1000.0) -> torch.Tensor:
    """t [B] in [0, 1] -> [B, dim]: sines then cosines; times are scaled by 1000 so that neighbouring
    ODE steps get clearly different features."""
    half = dim // 2
    rate = torch.exp(torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1)))  # [half]
    angle = scale * t.unsqueeze(1) * rate.unsqueeze(0)  # [B, half]
    return torch.cat((angle.sin(), angle.cos()), dim=-1)


def text_positions(dim: int, length: int, theta: float = 10000.0) -> torch.Tensor:
    """Absolute sinusoidal positions added to the text embeddings: [length, dim] = [cos | sin]."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))  # [dim/2]
    angle = torch.outer(torch.arange(length).float(), freqs)  # [length, dim/2]
    return torch.cat((angle.cos(), angle.sin()), dim=-1)


class TimestepEmbedding(nn.Module):
    """Flow time t [B] -> modulation vector [B, dim] that every block's adaLN reads."""

    def __init__(self, dim: int, freq_dim: int = 256):
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:  # t: [B]
        return self.time_mlp(sinusoid_time(t, self.freq_dim).to(t.dtype))  # [B, dim]


class GRN(nn.Module):
    """Global response normalisation (ConvNeXt-V2): rescales channels by their share of the L2 energy
    over time, which keeps the channels from collapsing onto a few."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, T, C]
        energy = torch.norm(x, p=2, dim=1, keepdim=True)  # [B, 1, C], fp32 under CUDA autocast
        share = (energy / (energy.mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)
        # in x's dtype: an fp32 factor (or fp32 gamma, beta) would make the block's output fp32 under autocast
        return self.gamma.to(x.dtype) * (x * share) + self.beta.to(x.dtype) + x


class ConvNeXtV2Block(nn.Module):
    """Depthwise conv (k=7) -> LN -> Linear -> GELU -> GRN -> Linear -> residual, on [B, T, C]."""

    def __init__(self, dim: int, intermediate_dim: int):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm(dim, eps=1e-6)  # fp32 inside, returns the input's dtype (models/precision.py)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.grn = GRN(intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, T, C]
        h = self.dwconv(x.transpose(1, 2)).transpose(1, 2)  # [B, T, C]
        h = self.pwconv2(self.grn(self.act(self.pwconv1(self.norm(h)))))
        return x + h


class TextEmbedding(nn.Module):
    """Text ids [B, N] -> features [B, T, text_dim] aligned to the T mel frames by padding only.

    Ids are shifted by one so that row 0 is the filler; callers pad with -1 (-> filler). Frames beyond
    the text, and beyond each utterance's length when `lens` is given, carry the filler and are zeroed
    between the ConvNeXt blocks (`mask_padding`), so the padding never leaks into real tokens.
    """

    max_positions = 8192  # ~87 s of 24 kHz audio at hop 256, as the reference

    def __init__(self, num_embeds: int, text_dim: int, conv_layers: int, mask_padding: bool = True):
        super().__init__()
        self.text_embed = nn.Embedding(num_embeds + 1, text_dim)  # row 0: filler
        self.mask_padding = mask_padding
        self.text_blocks = nn.Sequential(*[ConvNeXtV2Block(text_dim, text_dim * 2) for _ in range(conv_layers)])
        pos = text_positions(text_dim, self.max_positions) if conv_layers else torch.zeros(0)
        self.register_buffer("freqs_cis", pos, persistent=False)  # not in the public checkpoint

    def forward(self, text: torch.Tensor, length: int, lens: torch.Tensor | None = None,
                drop_text: bool = False) -> torch.Tensor:
        if length > self.max_positions and len(self.text_blocks):
            raise ValueError(f"{length} frames is longer than the {self.max_positions} text positions F5-TTS has")
        ids = text[:, :length] + 1  # [B, <=T]; -1 padding -> 0 filler
        ids = F.pad(ids, (0, length - ids.shape[1]), value=0)  # [B, T]
        valid = None
        if lens is not None:  # per-utterance lengths: frames past the end are filler and zero
            valid = torch.arange(length, device=ids.device)[None, :] < lens[:, None]  # [B, T]
            ids = ids.masked_fill(~valid, 0)
        filler = ids == 0  # decided before the CFG drop, as the reference does
        if drop_text:
            ids = torch.zeros_like(ids)
        h = self.text_embed(ids)  # [B, T, text_dim]
        if valid is not None:
            h = h.masked_fill(~valid[..., None], 0.0)
        if len(self.text_blocks) == 0:
            return h
        pos = self.freqs_cis[:length]  # [T, text_dim]
        h = h + (pos[None] * valid[..., None].to(pos.dtype) if valid is not None else pos)
        h = h.to(activation_dtype(h.device.type, h.dtype))  # bf16 under autocast: the blocks' residual stream
        if not self.mask_padding:
            return self.text_blocks(h)
        h = h.masked_fill(filler[..., None], 0.0)
        for block in self.text_blocks:
            h = block(h).masked_fill(filler[..., None], 0.0)
        return h


class ConvPositionEmbedding(nn.Module):
    """Two grouped convs (k=31) with Mish: a relative position signal added to the input projection."""

    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16):
        super().__init__()
        pad = kernel_size // 2
        self.conv1d = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=pad), nn.Mish(),
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=pad), nn.Mish(),
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = x.transpose(1, 2)  # [B, dim, T]
        keep = mask[:, None, :] if mask is not None else None  # [B, 1, T]
        if keep is not None:  # padding frames must not bleed into real ones through the kernel
            h = h.masked_fill(~keep, 0.0)
        for layer in self.conv1d:
            h = layer(h)
            if keep is not None and isinstance(layer, nn.Conv1d):
                h = h.masked_fill(~keep, 0.0)
        return h.transpose(1, 2)  # [B, T, dim]


class InputEmbedding(nn.Module):
    """cat(noisy mel, prompt mel, text) -> Linear -> + conv positions: [B, T, 2 mel + text] -> [B, T, dim]."""

    def __init__(self, mel_dim: int, text_dim: int, dim: int):
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + text_dim, dim)
        self.conv_pos_embed = ConvPositionEmbedding(dim)

    def forward(self, x, cond, text_emb, drop_audio_cond: bool = False, mask=None) -> torch.Tensor:
        if drop_audio_cond:
            cond = torch.zeros_like(cond)
        h = self.proj(torch.cat((x, cond, text_emb), dim=-1))  # [B, T, dim]
        return self.conv_pos_embed(h, mask) + h


class RotaryEmbedding(nn.Module):
    """Rotary positions over adjacent channel pairs (x_transformers' layout: angles repeated per pair).

    `inv_freq` is a persistent buffer because the public checkpoint stores it."""

    def __init__(self, dim_head: int, base: float = 10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim_head, 2).float() / dim_head)))

    def forward(self, length: int) -> torch.Tensor:
        # float32 even in a half-precision model: bf16 cannot count frames past 256
        pos = torch.arange(length, device=self.inv_freq.device, dtype=torch.float32)
        angle = torch.outer(pos, self.inv_freq.float())  # [T, dim_head/2]
        return angle.repeat_interleave(2, dim=-1)  # [T, dim_head]: (a0, a0, a1, a1, ...)


def apply_rotary(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, d] rotated pairwise by angle [T, d]; computed in float32 as the reference does."""
    xf = x.float()
    pairs = xf.unflatten(-1, (-1, 2))  # [B, H, T, d/2, 2]
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (x0, x1) -> (-x1, x0)
    return (xf * angle.cos() + rotated * angle.sin()).to(x.dtype)


class Attention(SDPAttention):
    """Multi-head self-attention with rotary positions on all heads (or the first `pe_attn_head`).

    Keys are not masked by default (`attn_mask=False`, as the v1 checkpoint was trained): padding frames
    are only zeroed at the output. Dropout sits after the output projection (`to_out.1`)."""

    def __init__(self, dim: int, heads: int, dim_head: int, dropout: float, qk_norm: str | None,
                 pe_attn_head: int | None, attn_mask: bool):
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        self.head_shape = (heads, dim_head)
        self.pe_attn_head, self.attn_mask = pe_attn_head, attn_mask
        inner = heads * dim_head
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        if qk_norm not in (None, "rms_norm"):
            raise ValueError(f"qk_norm must be None or 'rms_norm', not {qk_norm!r}")
        self.q_norm = nn.RMSNorm(dim_head, eps=1e-6) if qk_norm else None
        self.k_norm = nn.RMSNorm(dim_head, eps=1e-6) if qk_norm else None
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(dropout)])

    def forward(self, x: torch.Tensor, angle: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, self.heads, self.dim_head).transpose(1, 2)
                   for proj in (self.to_q, self.to_k, self.to_v))  # [B, H, T, d] each
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        n = self.heads if self.pe_attn_head is None else self.pe_attn_head
        q = torch.cat((apply_rotary(q[:, :n], angle), q[:, n:]), dim=1)
        k = torch.cat((apply_rotary(k[:, :n], angle), k[:, n:]), dim=1)
        key_mask = mask[:, None, None, :] if (self.attn_mask and mask is not None) else None  # [B, 1, 1, T]
        h = self.attend(q, k, v, key_mask)  # [B, H, T, d], through the kernel the trainer chose
        h = self.to_out[1](self.to_out[0](h.transpose(1, 2).reshape(b, t, -1)))  # [B, T, dim]
        return h if mask is None else h.masked_fill(~mask[..., None], 0.0)


def norm(x: torch.Tensor) -> torch.Tensor:
    """The blocks' LayerNorm without weights (eps 1e-6), in fp32 under CUDA autocast, returned in x's dtype so the
    modulation after it and the residual stream stay bf16 (models/precision.py)."""
    return F.layer_norm(x, x.shape[-1:], eps=1e-6).to(x.dtype)


class AdaLayerNorm(nn.Module):
    """Time -> (shift, scale, gate) for attention and for the feed-forward; returns the modulated input
    of the attention and the four values the block still needs."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim * 6)  # zero-initialised in DiT: every block starts as identity

    def forward(self, x: torch.Tensor, t: torch.Tensor):
        shift, scale, gate, shift_ff, scale_ff, gate_ff = self.linear(F.silu(t)).chunk(6, dim=1)  # [B, dim] each
        h = norm(x) * (1 + scale[:, None]) + shift[:, None]
        return h, gate, shift_ff, scale_ff, gate_ff


class AdaLayerNormFinal(nn.Module):
    """Time -> (scale, shift) (in that order) for the last norm before the output projection."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim * 2)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(t)).chunk(2, dim=1)  # [B, dim] each
        return norm(x) * (1 + scale[:, None]) + shift[:, None]


class FeedForward(nn.Module):
    """Linear -> GELU (tanh) -> dropout -> Linear; nested as `ff.0.0`, `ff.2` like the checkpoint."""

    def __init__(self, dim: int, mult: float, dropout: float):
        super().__init__()
        inner = int(dim * mult)
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")),
                                nn.Dropout(dropout), nn.Linear(inner, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    """x + gate * Attn(adaLN(x)), then x + gate * FF(modulated LN(x)); all modulation comes from time."""

    def __init__(self, dim, heads, dim_head, ff_mult, dropout, qk_norm, pe_attn_head, attn_mask):
        super().__init__()
        self.attn_norm = AdaLayerNorm(dim)
        self.attn = Attention(dim, heads, dim_head, dropout, qk_norm, pe_attn_head, attn_mask)
        self.ff = FeedForward(dim, ff_mult, dropout)

    def forward(self, x: torch.Tensor, t: torch.Tensor, angle: torch.Tensor, mask=None) -> torch.Tensor:
        h, gate, shift_ff, scale_ff, gate_ff = self.attn_norm(x, t)
        x = x + gate[:, None] * self.attn(h, angle, mask)
        h = norm(x) * (1 + scale_ff[:, None]) + shift_ff[:, None]
        return x + gate_ff[:, None] * self.ff(h)


class DiT(nn.Module):
    """The F5-TTS backbone. Text is embedded separately (`embed_text`) so that a sampler embeds it once
    for all ODE steps instead of caching it inside the module.

    forward: x, cond [B, T, mel], text_emb [B, T, text_dim], time [B] or [] -> flow [B, T, mel].
    """

    def __init__(self, *, dim: int, depth: int, heads: int, dim_head: int, ff_mult: float, mel_dim: int,
                 text_num_embeds: int, text_dim: int, conv_layers: int, dropout: float = 0.1,
                 qk_norm: str | None = None, pe_attn_head: int | None = None, attn_mask: bool = False,
                 long_skip: bool = False, text_mask_padding: bool = True):
        super().__init__()
        self.time_embed = TimestepEmbedding(dim)
        self.text_embed = TextEmbedding(text_num_embeds, text_dim, conv_layers, text_mask_padding)
        self.input_embed = InputEmbedding(mel_dim, text_dim, dim)
        self.rotary_embed = RotaryEmbedding(dim_head)
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(dim, heads, dim_head, ff_mult, dropout, qk_norm, pe_attn_head, attn_mask)
            for _ in range(depth))
        self.long_skip_connection = nn.Linear(dim * 2, dim, bias=False) if long_skip else None
        self.norm_out = AdaLayerNormFinal(dim)
        self.proj_out = nn.Linear(dim, mel_dim)
        self.checkpoint_activations = False  # set by the trainer: recompute each block in backward
        self._zero_init()

    def _zero_init(self):
        """Modulation and output start at zero, so a freshly built model is an identity-ish DiT (adaLN-Zero)."""
        for layer in [b.attn_norm.linear for b in self.transformer_blocks] + [self.norm_out.linear, self.proj_out]:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def embed_text(self, text: torch.Tensor, length: int, lens: torch.Tensor | None = None,
                   drop_text: bool = False) -> torch.Tensor:
        """text [B, N] (-1 = padding) -> [B, length, text_dim]."""
        return self.text_embed(text, length, lens, drop_text)

    def forward(self, x, cond, text_emb, time, mask=None, drop_audio_cond: bool = False) -> torch.Tensor:
        time = time.expand(x.shape[0]) if time.ndim == 0 else time  # [B]
        h = self.input_embed(x, cond, text_emb, drop_audio_cond, mask)  # [B, T, dim]
        return self._transform(h, self.time_embed(time), mask)

    def forward_cfg(self, x, cond, text_emb, null_text_emb, time, mask=None) -> torch.Tensor:
        """Conditional and unconditional (no prompt, null text) flows in one batch: -> [2B, T, mel],
        the conditional half first."""
        time = time.expand(x.shape[0]) if time.ndim == 0 else time  # [B]
        t = self.time_embed(time)
        h = torch.cat((self.input_embed(x, cond, text_emb, False, mask),
                       self.input_embed(x, cond, null_text_emb, True, mask)), dim=0)  # [2B, T, dim]
        mask = torch.cat((mask, mask), dim=0) if mask is not None else None
        return self._transform(h, torch.cat((t, t), dim=0), mask)

    def _transform(self, h: torch.Tensor, t: torch.Tensor, mask) -> torch.Tensor:
        angle = self.rotary_embed(h.shape[1])  # [T, dim_head]
        residual = h
        for block in self.transformer_blocks:
            if self.checkpoint_activations and torch.is_grad_enabled():
                h = checkpoint(block, h, t, angle, mask, use_reentrant=False)
            else:
                h = block(h, t, angle, mask)
        if self.long_skip_connection is not None:
            h = self.long_skip_connection(torch.cat((h, residual), dim=-1))
        return self.proj_out(self.norm_out(h, t))  # [B, T, mel]
