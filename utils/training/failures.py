"""What a training error means: out of memory (the loop halves the micro-batch and goes on) or a setting the GPU
refuses (a sentence on what to change). Shared by the loop, the batch probe and the compile guard."""
from __future__ import annotations

import torch


def is_oom(exc: BaseException) -> bool:
    """Out-of-memory by type or by message (CUDA, MPS and CPU allocators word it differently). cuDNN's
    NOT_SUPPORTED is not one: it refuses a setting (a dtype, a layout), and halving the batch would only hide that
    until "out of memory even with one utterance" names the wrong cause (see `explain_failure`)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(s in text for s in (
        "out of memory", "cuda error: out of memory", "can't allocate memory", "mps backend out of memory",
        "status_alloc_failed",  # cuDNN's and cuBLAS's own words (a handle or workspace that found no memory)
        "cufft_alloc_failed"))


def explain_failure(exc: BaseException) -> str:
    """A sentence on what to change, for errors whose own text does not say ("" for the others)."""
    text = str(exc).lower()
    if "cudnn_status_not_supported" in text:
        return (" cuDNN (NVIDIA's convolution library) does not support this combination of settings on this GPU: "
                "set precision to fp32, or turn off cudnn_benchmark, in the Optimizations tab and press Resume.")
    return ""
