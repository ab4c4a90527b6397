"""Loading weight files that may come from anywhere (an upload, a download, a shared Drive folder)
without ever running code from them: safetensors as is, PyTorch pickles with weights_only=True.
A refused or damaged file becomes a StudioError that names it and says what to do."""
from __future__ import annotations

import pickle
from pathlib import Path

from utils.events import StudioError


def save_safetensors(tensors: dict, path: str | Path) -> None:
    """safetensors' save_file, with the mode any file this user writes gets (it makes the file 0600)."""
    import os

    from safetensors.torch import save_file

    from utils.workspace import file_mode

    save_file(tensors, str(path))
    os.chmod(path, file_mode())


def load_safetensors(path: str | Path) -> dict:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error type for a damaged or foreign file
        raise StudioError(f"{path} is not a valid safetensors file ({str(exc)[:200]}); it is damaged or was not "
                          "written by this app.") from None


def _is_pickle(path: str | Path) -> bool:
    """Whether the file is what torch.save writes (a zip archive, or a pickle before torch 1.6): only then can a
    refusal mean code it would run; other bytes are a damaged or foreign file."""
    with open(path, "rb") as f:
        head = f.read(2)
    return head == b"PK" or head[:1] == b"\x80"


def load_torch_plain(path: str | Path):
    """torch.load that accepts only tensors, numbers and plain containers (no objects, no code)."""
    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        if not _is_pickle(path) or isinstance(exc, EOFError) or "PytorchStreamReader" in str(exc):
            raise StudioError(f"{path} could not be read as PyTorch weights: it is damaged, cut short (a download "
                              "that stopped?) or another kind of file. Copy or download it again.") from None
        found = [line.strip() for line in str(exc).splitlines() if "GLOBAL" in line or "Unsupported" in line]
        reason = f" ({found[0][:200]})" if found else ""  # the class it names, or the instruction it would run
        raise StudioError(f"{path} was refused: it holds more than plain tensors and numbers, and loading it could "
                          f"run code{reason}. Use a file from a source you trust, or another checkpoint.") from None
