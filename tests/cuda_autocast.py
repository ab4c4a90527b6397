"""CUDA autocast's fp32 rule, played under CPU autocast: the dtypes a GPU run gives, checked on a machine without one.

CPU and CUDA autocast cast different op lists. CUDA runs the ops of its "fp32" lists (PyTorch's
aten/src/ATen/autocast_mode.h: AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE and the norm overloads) on fp32 copies
of their bf16/fp16 inputs, with autocast off inside, and returns fp32: layer_norm, group_norm, softmax and
log_softmax, exp, log, pow (so `x ** 2` and `2 ** x`), rsqrt, reciprocal (so `1 / x`), sum, cumsum, prod, the norms,
the losses, upsampling. CPU autocast leaves most of them in their input's dtype (a bf16 layer_norm returns bf16).
So a model whose activations all stay bf16 under CPU autocast can still carry fp32 residual streams on a GPU, and
its bf16 then saves neither memory nor time (issue 42: ~25 fp32 module outputs on an H100, 86.9 ms a step against
83.0 ms in fp32). `cuda_fp32_rule()` applies CUDA's rule to those ops while CPU autocast is on, so the CPU tests
(tests/test_model.py, tests/test_f5_model.py, tests/test_mms_model.py) see what an H100 sees.

It intercepts Python-level calls (a TorchFunctionMode, above autograd as autocast is, so the backward saves the
fp32 copies CUDA's would; the sums, softmaxes and norms get dtype=float32, as CUDA's do). Not seen: ops that C++
code calls inside another op, and TorchScript functions (transformers 5.17's WaveNet gate returns fp32 on a GPU, see
models/vits_training.py). gpu_tests/test_bf16.py checks the same promises on a real GPU.

    with torch.autocast("cpu", dtype=torch.bfloat16), cuda_fp32_rule():
        out = model(...)
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

# by the name of the Python function, Tensor method or operator that reaches the mode.
# AT_FORALL_FP32: run on fp32 copies of the half-precision inputs
FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "__rdiv__",
    "__rtruediv__", "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "cross_entropy",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp", "interpolate",
    "upsample", "upsample_nearest", "upsample_bilinear",
})
# AT_FORALL_FP32_SET_OPT_DTYPE and norm: called with dtype=float32 when the first argument is half precision and the
# call names no dtype (the input is not cast: the backward saves it as it is)
FP32_DTYPE = frozenset({
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum", "norm", "linalg_vector_norm", "linalg_matrix_norm",
    "vector_norm", "matrix_norm",
})
LOWER = (torch.bfloat16, torch.float16)


def _fp32(x):
    return x.float() if isinstance(x, torch.Tensor) and x.dtype in LOWER else x


class cuda_fp32_rule(TorchFunctionMode):
    """While CPU autocast is on, the ops on CUDA autocast's fp32 lists run on fp32 copies of their half-precision
    inputs, with autocast off, and return fp32, as on a GPU. Everything else runs as it would."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs, name = kwargs or {}, getattr(func, "__name__", None)
        if name not in FP32 and name not in FP32_DTYPE or not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)
        if name in FP32:
            args, kwargs = tree_map(_fp32, (args, kwargs))
        elif kwargs.get("dtype") is None and args and isinstance(args[0], torch.Tensor) and args[0].dtype in LOWER:
            kwargs = {**kwargs, "dtype": torch.float32}
        with torch.autocast("cpu", enabled=False):
            return func(*args, **kwargs)


def first_float(output) -> torch.Tensor | None:
    """A module's (first) floating-point output tensor: itself, the first of a tuple, list or transformers
    ModelOutput that is one, or None."""
    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() else None
    items = output.to_tuple() if hasattr(output, "to_tuple") else output if isinstance(output, (tuple, list)) else ()
    return next((t for t in map(first_float, items) if t is not None), None)


def output_dtypes(model: torch.nn.Module) -> tuple[dict, list]:
    """Forward hooks on every submodule: ({name: dtype of its first floating output at its first call}, the hooks'
    handles, to `.remove()`)."""
    dtypes, handles = {}, []

    def hook(module, inputs, output, name):
        t = first_float(output)
        if t is not None:
            dtypes.setdefault(name, t.dtype)

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(lambda m, i, o, name=name: hook(m, i, o, name)))
    return dtypes, handles


# fp32 by design: what the fp32 norms save (autocast's fp32 copy of their input, their statistics) and the
# attention kernels' logsumexp (flash, cudnn: logsumexp; memory-efficient: log_sumexp)
FP32_BY_DESIGN = {"NativeLayerNormBackward0", "NativeGroupNormBackward0", "_saved_logsumexp", "_saved_log_sumexp"}


def saved_fp32(output: torch.Tensor) -> set[tuple[str, tuple]]:
    """(autograd node, shape) of every fp32 activation that the backward of `output` holds: tensors saved by a node
    of its graph, less those fp32 by design (FP32_BY_DESIGN). Activations: 3 or more dims, none of them 1 after the
    batch's (per-channel statistics and single-channel tensors are left out)."""
    found, seen, todo = set(), set(), [output.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
        for attr in dir(node):
            if not attr.startswith("_saved_") or node.name() in FP32_BY_DESIGN or attr in FP32_BY_DESIGN:
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:  # freed, or not a tensor
                continue
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.dim() >= 3 and 1 not in t.shape[1:]:
                    found.add((node.name(), tuple(t.shape)))
    return found
