"""Read the public F5-TTS checkpoints into a plain `transformer.*` state dict for models.f5.F5TTS.

Layouts seen in SWivid/F5-TTS releases and in its trainer's output:

    .safetensors  flat: `ema_model.transformer.<...>` (the EMA weights, 364 tensors for v1 Base)
                  plus the EMA bookkeeping scalars `initted` and `step`
    .pt           {"ema_model_state_dict": {same keys as above},
                   "model_state_dict": {`transformer.<...>`: online weights}   (training checkpoints only)
                   "optimizer_state_dict", "scheduler_state_dict", "step"}     (training checkpoints only)

The EMA weights are the released model, so they are preferred; a file without them falls back to the
online weights. Files older than the reference's commit 305e3ea also hold the mel extractor's window and
filterbank (`mel_spec.*`): they are dropped. Loading never unpickles: safetensors, or torch.load with
weights_only=True.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

EMA_PREFIX = "ema_model."
BOOKKEEPING = ("initted", "step")


def public_state_dict(path: str | Path, expect: nn.Module | Mapping[str, torch.Tensor] | None = None
                      ) -> dict[str, torch.Tensor]:
    """Weights of a public-format checkpoint as `transformer.*` tensors on the CPU.

    With `expect` (a model or its state dict), a file whose keys or shapes differ is refused with a
    ValueError naming the missing and unexpected keys and the first shape mismatch.
    """
    raw = _read(Path(path))
    state = _normalise(raw, Path(path).name)
    if expect is not None:
        check_state_dict(state, expect.state_dict() if isinstance(expect, nn.Module) else expect, Path(path).name)
    return state


def _read(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{path}: no such checkpoint file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return {"ema_model_state_dict": load_file(str(path), device="cpu")}
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle errors come as several types; the message says which
        raise ValueError(f"{path.name}: not a readable PyTorch checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(data, Mapping):
        raise ValueError(f"{path.name}: expected a dict of weights, found {type(data).__name__}")
    if "ema_model_state_dict" in data or "model_state_dict" in data:
        return dict(data)
    return {"ema_model_state_dict": dict(data)}  # a bare state dict


def _normalise(raw: Mapping, name: str) -> dict[str, torch.Tensor]:
    """Pick the EMA weights (else the online ones), strip `ema_model.`, drop bookkeeping and mel keys."""
    ema = raw.get("ema_model_state_dict") or {}
    state = {k[len(EMA_PREFIX):]: v for k, v in ema.items() if k.startswith(EMA_PREFIX)}
    if not state:  # a bare state dict, or a file saved without EMA
        state = {k: v for k, v in ema.items() if k not in BOOKKEEPING} or dict(raw.get("model_state_dict") or {})
    state = {k: v for k, v in state.items() if not k.startswith("mel_spec.")}
    if not state:
        raise ValueError(f"{name}: holds no model weights (looked for ema_model_state_dict and model_state_dict)")
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"{name}: entry {bad[0]!r} is not a tensor")
    return state


def check_state_dict(state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], name: str = "checkpoint"):
    """Raise ValueError describing how `state` differs from `expected` (keys, then shapes); None if equal."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {_few(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_few(unexpected)}")
    for k in sorted(set(state) & set(expected)):
        if tuple(state[k].shape) != tuple(expected[k].shape):
            problems.append(f"shape of {k}: file {list(state[k].shape)}, model {list(expected[k].shape)}")
            break
    if problems:
        raise ValueError(f"{name} does not fit this F5-TTS model: " + "; ".join(problems))


def text_num_embeds(state: Mapping[str, torch.Tensor]) -> int:
    """Vocabulary size (without the filler row) of a checkpoint, to build a matching F5Config."""
    return state["transformer.text_embed.text_embed.weight"].shape[0] - 1


def _few(keys: list[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f", ... ({len(keys) - n} more)" if len(keys) > n else "")
