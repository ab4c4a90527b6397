"""Multi-head self-attention over [B, C, T] sequences through torch's scaled_dot_product_attention.

The kernel is picked per module by `backend` (set by the trainer, see `set_attention_backend`):
  "flash"     FlashAttention first, memory-efficient as fallback (FlashAttention takes no padding mask,
              so padded batches on a GPU run the memory-efficient kernel; unpadded ones run flash)
  "efficient" memory-efficient kernel only (CUDA)
  "math"      the reference implementation (any device)
  "auto"      let PyTorch choose
The choice is applied with `torch.nn.attention.sdpa_kernel` around the call, so it is the kernel
this model really runs, not a global flag.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
    "efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "math": [SDPBackend.MATH],
    "auto": None,
}


def rope(x: torch.Tensor, n_rot: int, base: float = 10_000.0) -> torch.Tensor:
    """Rotary position embedding on the first `n_rot` dims of each head. x: [B, H, T, D]."""
    if n_rot <= 0:
        return x
    t = x.shape[2]
    half = n_rot // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # [half]
    angles = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * freqs[None]  # [T, half]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


class SDPAttention(nn.Module):
    """An attention layer whose scaled-dot-product kernel the trainer picks (`backend`, see the module docstring);
    every model's attention layers derive from it, so `set_attention_backend` reaches them all. A subclass sets
    `head_shape` (heads, head size): what `kernel_failure` tries the kernel on."""
    backend = "auto"
    head_shape: tuple[int, int] = (1, 64)

    def attend(self, q, k, v, attn_mask=None, dropout_p: float = 0.0) -> torch.Tensor:
        """q, k, v [B, H, T, D] -> [B, H, T, D] through the chosen kernel family."""
        backends = BACKENDS[self.backend]
        if backends is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        with sdpa_kernel(backends):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


class Attention(SDPAttention):
    def __init__(self, channels: int, n_heads: int, head_dim: int | None = None, dropout: float = 0.0,
                 rope_fraction: float = 0.0, bias: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = head_dim or channels // n_heads
        inner = self.n_heads * self.head_dim
        self.qkv = nn.Linear(channels, 3 * inner, bias=bias)
        self.out = nn.Linear(inner, channels)
        self.dropout = dropout
        self.n_rot = int(self.head_dim * rope_fraction) // 2 * 2
        self.head_shape = (self.n_heads, self.head_dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x: [B, T, C]; mask: [B, T] bool (True = real frame), or None for an unpadded batch -> [B, T, C]."""
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x [B, H, T, D]
        q, k = rope(q, self.n_rot), rope(k, self.n_rot)
        attn_mask = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, T]: padded keys hidden
        y = self.attend(q, k, v, attn_mask, self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))  # [B, T, C]


def set_attention_backend(model: nn.Module, backend: str) -> int:
    """Point every Attention module of `model` at one SDPA kernel family; returns how many were set."""
    if backend not in BACKENDS:
        raise ValueError(f"attention backend must be one of {sorted(BACKENDS)}, not {backend!r}")
    n = 0
    for m in model.modules():
        if isinstance(m, SDPAttention):
            m.backend = backend
            n += 1
    return n



def kernel_failure(model: nn.Module, dtype: torch.dtype) -> str:
    """"" when the kernel family `model`'s attention layers are set to runs their shapes, forward and backward, with
    and without a padding mask (where the model masks keys), on the device and in the dtype they train in; else the
    error's first line. A kernel the GPU lacks (an older card, a head size a fused kernel does not take) would
    otherwise end the run at its first step with "No available kernel"."""
    layer = next((m for m in model.modules() if isinstance(m, SDPAttention)), None)
    if layer is None or BACKENDS[layer.backend] is None:
        return ""
    heads, size = layer.head_shape
    device = next(model.parameters()).device
    # its own generator: the run's random stream untouched
    q = torch.randn(2, heads, 24, size, generator=torch.Generator().manual_seed(0), device="cpu")
    q = q.to(device, dtype).requires_grad_()
    mask = torch.ones(2, 1, 1, 24, dtype=torch.bool, device=device)
    mask[1, ..., 17:] = False  # the second item padded
    try:
        for attn_mask in (None, mask) if getattr(model, "masks_attention", True) else (None,):  # F5 v1 masks no key
            layer.attend(q, q, q, attn_mask).float().sum().backward()
    except RuntimeError as exc:
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return ""
