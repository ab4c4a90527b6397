"""Monotonic alignment search as one Triton kernel, for CUDA tensors.

The Cython kernel runs on the CPU: every training step copies the [B, N, T] log-likelihoods to the
host, waits for the GPU to finish the encoder first, and leaves the GPU idle while it searches. Here
one program per utterance runs the same dynamic programme on the GPU: frame by frame it keeps the
column of running values over all tokens (a vector of N), stores it, and after a block-wide barrier
reads it back shifted by one token; then one thread walks the path back. Same recursion, same tie
rule (a tie keeps the token) as `alignment.maximum_path_torch`, so the paths agree exactly.

`TRITON_INTERPRET=1` runs the kernel on the CPU with numpy (how the tests check it without a GPU).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _mas_kernel(logp_ptr, value_ptr, path_ptr, n_lens_ptr, t_lens_ptr, N, T, BLOCK_N: tl.constexpr):
    """One utterance b: logp/value/path are [B, T, N] float32 (frame-major: a frame's tokens are contiguous)."""
    b = tl.program_id(0).to(tl.int64)
    n_len = tl.load(n_lens_ptr + b).to(tl.int32)
    t_len = tl.load(t_lens_ptr + b).to(tl.int32)
    rows = tl.arange(0, BLOCK_N)
    inside = rows < N
    logp = logp_ptr + b * T * N
    value = value_ptr + b * T * N
    path = path_ptr + b * T * N

    # frame 0 can only be token 0
    q = tl.load(logp + rows, mask=inside, other=float("-inf"))
    q = tl.where(rows == 0, q, float("-inf"))
    tl.store(value + rows, q, mask=inside)
    for t in range(1, t_len):
        tl.debug_barrier()  # the previous frame's column, stored by every thread, is visible to all
        shifted = tl.load(value + (t - 1) * N + rows - 1, mask=inside & (rows >= 1), other=float("-inf"))
        q = tl.load(logp + t * N + rows, mask=inside, other=float("-inf")) + tl.maximum(q, shifted)
        q = tl.where((rows <= t) & (rows < n_len), q, float("-inf"))
        tl.store(value + t * N + rows, q, mask=inside)
    tl.debug_barrier()

    # walk back from the last token at the last frame
    index = n_len - 1
    for k in range(0, t_len):
        t = t_len - 1 - k
        tl.store(path + t * N + index, 1.0)
        earlier = t > 0
        stay = tl.load(value + (t - 1) * N + index, mask=earlier, other=0.0)
        advance = tl.load(value + (t - 1) * N + index - 1, mask=earlier & (index > 0), other=float("-inf"))
        move = (index > 0) & earlier & ((index == t) | (advance > stay))
        index = index - move.to(tl.int32)


def kernel_warps(n_max: int) -> int:
    """The warps one utterance of `n_max` tokens runs with: its block is the next power of 2, 128 rows a warp
    (alignment.CHECK_TOKENS makes the start-up check cover each count)."""
    return min(8, max(1, triton.next_power_of_2(max(n_max, 16)) // 128))


def maximum_path_triton(log_p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log_p [B, N, T], mask [B, N, T] (1 on valid cells) -> hard path [B, N, T] float32, on log_p's device."""
    b, n_max, t_max = log_p.shape
    mask = mask.bool()
    n_lens = mask[:, :, 0].sum(1).to(torch.int32)
    t_lens = mask[:, 0, :].sum(1).to(torch.int32)
    logp = log_p.float().transpose(1, 2).contiguous()  # [B, T, N]
    value = torch.empty_like(logp)
    path = torch.zeros_like(logp)
    block = triton.next_power_of_2(max(n_max, 16))
    _mas_kernel[(b,)](logp, value, path, n_lens, t_lens, n_max, t_max, BLOCK_N=block,
                      num_warps=kernel_warps(n_max))  # the warps mas_disagreement checks
    return path.transpose(1, 2)
