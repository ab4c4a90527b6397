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


def load_torch_plain(path: str | Path):
    """torch.load that accepts only tensors, numbers and plain containers (no objects, no code)."""
    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        reason = next((line for line in lines if "GLOBAL" in line), lines[0][:200]).strip()
        raise StudioError(f"{path} was refused: it holds more than plain tensors and numbers, and loading it could "
                          f"run code ({reason}). Use a file from a source you trust, or another checkpoint.") from None
