"""Monotonic alignment search (Glow-TTS / Matcha) and the hard-path helpers around it.

`maximum_path` finds, per utterance, the monotonic path through a [tokens x frames] log-likelihood
matrix that maximises the summed log-likelihood (each token gets >= 1 frame). Implementations:
"triton" (`mas_triton`, on the GPU: no copy to the host, no idle GPU), "cython" (the maintained
kernel of the `monotonic-alignment-search` package, on the CPU) and "torch" (the same dynamic
programme in torch ops: per-frame recursion over all tokens at once, then a backtrack vectorised over
the batch). All three give the same path. Always float32: the -inf bookkeeping breaks in fp16/bf16.
"""
from __future__ import annotations

import torch

try:  # Cython kernel, parallel over the batch on the CPU
    from monotonic_alignment_search import maximum_path_cython as _mas_cython
except ImportError:  # pragma: no cover - depends on the environment
    _mas_cython = None


def cython_available() -> bool:
    """Whether the compiled Cython search (monotonic-alignment-search) is installed: the fastest on a CPU."""
    return _mas_cython is not None


def sequence_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """lengths [B] -> bool [B, max_len], True on real positions."""
    max_len = int(max_len or lengths.max())
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def maximum_path(log_p: torch.Tensor, mask: torch.Tensor, implementation: str = "auto") -> torch.Tensor:
    """log_p: [B, N, T] log-likelihood of frame t under token n; mask: [B, N, T] (1 on valid cells)
    -> hard alignment [B, N, T] of 0/1 (same dtype as log_p)."""
    log_p = log_p.float()
    if implementation == "auto":
        implementation = "cython" if _mas_cython is not None else "torch"
    if implementation == "triton":
        from models.mas_triton import maximum_path_triton

        return maximum_path_triton(log_p.detach(), mask)
    if implementation == "cython":
        return _mas_cython(log_p.detach(), mask).to(log_p.dtype)
    return maximum_path_torch(log_p.detach(), mask)


@torch.no_grad()
def maximum_path_torch(log_p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Torch MAS: Q[n, t] = L[n, t] + max(Q[n, t-1], Q[n-1, t-1]), then backtrack. Shapes as maximum_path."""
    b, n_max, t_max = log_p.shape
    device = log_p.device
    mask = mask.bool()
    n_len = mask[:, :, 0].sum(1)  # [B] tokens
    t_len = mask[:, 0, :].sum(1)  # [B] frames
    neg = torch.tensor(float("-inf"), device=device)
    rows = torch.arange(n_max, device=device)
    q = torch.full((b, n_max), float("-inf"), device=device)  # running column Q[:, :, t]
    advance = torch.zeros(b, n_max, t_max, dtype=torch.bool, device=device)  # came from n-1 at frame t
    for t in range(t_max):
        if t == 0:
            q = torch.where(rows[None] == 0, log_p[:, :, 0], neg)
            continue
        shifted = torch.cat([torch.full((b, 1), float("-inf"), device=device), q[:, :-1]], dim=1)  # Q[n-1, t-1]
        advance[:, :, t] = shifted > q  # a tie keeps the token (stay)
        q = log_p[:, :, t] + torch.maximum(q, shifted)
        q = torch.where((rows[None] <= t) & (rows[None] < n_len[:, None]), q, neg)
    path = torch.zeros(b, n_max, t_max, dtype=log_p.dtype, device=device)
    index = n_len - 1  # [B] current token while walking back
    batch = torch.arange(b, device=device)
    for t in range(t_max - 1, -1, -1):
        active = t < t_len
        path[batch[active], index[active], t] = 1.0
        step = active & (index > 0) & ((index == t) | advance[batch, index.clamp(min=0), t])
        index = index - step.long()
    return path


def durations_to_path(durations: torch.Tensor, t_max: int) -> torch.Tensor:
    """Integer durations [B, N] -> hard path [B, N, T]: token n covers frames cum[n-1] .. cum[n]-1."""
    cum = torch.cumsum(durations, dim=1)  # [B, N]
    frames = torch.arange(t_max, device=durations.device)[None, None, :]  # [1, 1, T]
    return ((frames < cum[:, :, None]) & (frames >= (cum - durations)[:, :, None])).float()


# Most tokens of each check batch in turn: real batches (300-800 tokens with blanks) run the Triton kernel with more
# warps than short ones, so the check covers every warp count it launches with (1, 2, 4, 8: mas_triton.kernel_warps).
CHECK_TOKENS = (40, 250, 500, 1000)


def mas_disagreement(implementation: str, device: str | torch.device, trials: int = 8) -> str:
    """Empty when `implementation` finds the same paths as the torch reference on random batches on `device`
    (with padding and ties, at every warp count of the Triton kernel), else what differed. The trainer runs it
    before trusting a GPU kernel."""
    gen = torch.Generator().manual_seed(1234)
    for trial in range(trials):
        b, most = 3, CHECK_TOKENS[trial % len(CHECK_TOKENS)]
        n_lens = torch.randint(max(1, most // 2), most + 1, (b,), generator=gen, device=gen.device)
        n_lens[0] = most  # the batch's block size, and so its warps, is fixed by its longest
        t_lens = n_lens + torch.randint(0, 120, (b,), generator=gen, device=gen.device)
        log_p = torch.randn(b, int(n_lens.max()), int(t_lens.max()), generator=gen, device=gen.device) * 3
        if trial % 2:
            log_p = log_p.round()  # ties
        mask = (sequence_mask(n_lens)[:, :, None] & sequence_mask(t_lens)[:, None, :]).float()
        expected = maximum_path_torch(log_p, mask)
        try:
            got = maximum_path(log_p.to(device), mask.to(device), implementation).cpu()
        except Exception as exc:  # e.g. a Triton too old for the kernel: the caller falls back, never crashes
            return f"the kernel failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ''}"
        if not torch.equal(got, expected):
            return f"{int((got != expected).sum())} of {expected.numel()} cells differ on check batch {trial}"
    return ""
