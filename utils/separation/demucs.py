"""Demucs backend (Hybrid Transformer Demucs, `demucs` package) when its weights are on this machine.

Pretrained weights are a ~80 MB file that demucs downloads into torch hub's cache. We look for it
there (or take a path), load it with `torch.load(weights_only=True)` allowing only demucs' model
classes, and rebuild the model from the saved class, arguments and state. Offline, tests run the same
loader on a small randomly initialised HTDemucs saved in the same format.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from utils.events import StudioError

# htdemucs, the default 4-source model of demucs 4 (the signature file its remote repo names).
HTDEMUCS_FILE = "955717e8-8726e21a.th"
HTDEMUCS_URL = "https://dl.fbaipublicfiles.com/demucs/hybrid_transformer/" + HTDEMUCS_FILE


def cached_weights() -> Path | None:
    path = Path(torch.hub.get_dir()) / "checkpoints" / HTDEMUCS_FILE
    return path if path.exists() else None


def download_weights() -> Path:
    path = Path(torch.hub.get_dir()) / "checkpoints" / HTDEMUCS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.hub.download_url_to_file(HTDEMUCS_URL, str(path), progress=False)
    except Exception as exc:
        raise StudioError(f"The Demucs weights are not in {path.parent} and could not be downloaded ({exc}). "
                          f"Use the spleeter backend (works offline), or copy {HTDEMUCS_FILE} (from {HTDEMUCS_URL}, "
                          "on a machine that is online) into that folder.") from exc
    return path


def _model_classes() -> list[type]:
    from demucs.demucs import Demucs
    from demucs.hdemucs import HDemucs
    from demucs.htdemucs import HTDemucs

    return [Demucs, HDemucs, HTDemucs]


@lru_cache(maxsize=2)
def load_model(path: str, device: str = "cpu"):
    """Rebuild a demucs model from a serialized package {klass, args, kwargs, state} without unpickling code."""
    from demucs.states import set_state

    classes = _model_classes()
    try:
        with torch.serialization.safe_globals(classes):
            package = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise StudioError(f"{Path(path).name}: not a Demucs model file we can load safely ({str(exc)[:200]}).") from exc
    if not isinstance(package, dict) or package.get("klass") not in classes:
        raise StudioError(f"{Path(path).name}: not a Demucs model package (no known model class).")
    model = package["klass"](*package.get("args", ()), **package.get("kwargs", {}))
    set_state(model, package["state"])
    if "vocals" not in model.sources:
        raise StudioError(f"{Path(path).name}: this Demucs model has no 'vocals' source ({model.sources}).")
    return model.eval().to(device)


class DemucsBackend:
    name = "demucs"
    channels = 2
    chunk_seconds = 30.0  # demucs splits further into its own training-length segments
    overlap_seconds = 1.0

    def __init__(self, device: str = "cpu", weights: str | Path | None = None, download: bool = False):
        path = Path(weights) if weights else cached_weights()
        if path is None:
            if not download:
                raise StudioError("The Demucs weights are not in torch hub's cache; choose --backend demucs "
                                  "explicitly to download them (~80 MB), or use spleeter.")
            path = download_weights()
        self.device = device
        self.model = load_model(str(path), device)
        self.sample_rate = int(self.model.samplerate)
        self.channels = int(self.model.audio_channels)
        self.vocals = self.model.sources.index("vocals")

    @torch.inference_mode()
    def speech(self, batch: np.ndarray) -> np.ndarray:
        """[B, C, T] at the model's rate -> [B, C, T] vocals."""
        from demucs.apply import apply_model

        x = torch.as_tensor(batch, dtype=torch.float32)
        mono = x.mean(dim=1, keepdim=True)
        mean, std = mono.mean(dim=-1, keepdim=True), mono.std(dim=-1, keepdim=True) + 1e-8
        out = apply_model(self.model, (x - mean) / std, shifts=0, split=True, overlap=0.25,
                          device=self.device, progress=False)  # [B, sources, C, T]
        return (out[:, self.vocals].cpu() * std + mean).numpy().astype(np.float32)
