"""Mixed precision: the dtype layers compute in, and norms that compute as autocast does and return their input's dtype.

CUDA autocast runs layer_norm and group_norm in fp32 and returns fp32 (CPU autocast returns bf16). Everything after
such a norm (the residual sum, the mask product, the activation) then runs and is saved for the backward in fp32:
twice the memory, and no speed-up from bf16 (issue 42). These keep the fp32 computation and cast the result back,
so a bf16 stream stays bf16 on either device; in fp32 the cast does nothing. Parameter names are nn.LayerNorm's and
nn.GroupNorm's, so checkpoints load unchanged. tests/cuda_autocast.py plays CUDA's rule on the CPU to check them.
"""
from __future__ import annotations

import torch
import torch.nn as nn


def activation_dtype(device_type: str, weights: torch.dtype) -> torch.dtype:
    """The dtype layers compute in: autocast's (bf16/fp16) when it is on, else the weights'. Masks and embeddings
    are made in it, so `x * mask` keeps a bf16 activation in bf16 instead of promoting it to fp32 (twice the memory)."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weights


class LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).to(x.dtype)


class GroupNorm(nn.GroupNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).to(x.dtype)
