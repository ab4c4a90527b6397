"""The mel feature cache: `features/<FeatureConfig.key()>/<audio sha1[:16]>.npy`, float32 [n_mels, frames].

Keyed by the audio's content and the feature configuration, never by path alone: a clip replaced
by its music-removed version (a different file) gets its own entry. The sha1 of a file is memoized
by (path, size, mtime), so a training loop pays one `stat` per lookup, not a hash.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from utils.audio import FeatureConfig, file_digest, load_audio, resample
from utils.events import StudioError
from utils.workspace import Workspace

_DIGESTS: dict[tuple[str, int, int], str] = {}


def content_sha1(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _DIGESTS[key] = file_digest(path)
    return digest


def cache_path(ds_dir: Path, sha1: str, cfg: FeatureConfig) -> Path:
    return ds_dir / "features" / cfg.key() / f"{sha1[:16]}.npy"


def save_npy(path: Path, array: np.ndarray) -> None:
    """Atomic .npy write: a reader (training workers) never sees half an array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mel_numpy(audio: np.ndarray, cfg: FeatureConfig, device: str = "cpu") -> np.ndarray:
    import torch

    from utils.audio import log_mel

    with torch.no_grad():
        mel = log_mel(torch.from_numpy(np.ascontiguousarray(audio)).to(device), cfg)  # [n_mels, frames]
    return mel.float().cpu().numpy()


def compute_and_store(wav: Path, mel_dir: Path, sha1: str, cfg_dict: dict, device: str = "cpu") -> Path:
    cfg = FeatureConfig.from_dict(cfg_dict)
    path = Path(mel_dir) / f"{sha1[:16]}.npy"
    if not path.exists():
        audio, sr = load_audio(wav)
        if sr != cfg.sample_rate:
            audio = resample(audio, sr, cfg.sample_rate)
        save_npy(path, mel_numpy(audio, cfg, device))
    return path


def features(ws: Workspace, name: str, row: dict, cfg: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """Log-mel [n_mels, frames] float32 of a manifest row, computed and cached on a miss."""
    ds_dir = ws.dataset_dir(name)
    wav = (ds_dir / row["audio"]).resolve()
    if not wav.is_relative_to(ds_dir.resolve()):
        raise StudioError(f"row {row.get('id')!r}: audio path {row['audio']!r} points outside the dataset.")
    if not wav.exists():
        raise StudioError(f"row {row.get('id')!r}: {row['audio']} is missing; run prepare again.")
    path = cache_path(ds_dir, content_sha1(wav), cfg)
    try:
        return np.load(path)
    except (FileNotFoundError, ValueError, EOFError, OSError):
        pass  # a miss (or a damaged entry): compute it
    compute_and_store(wav, path.parent, path.stem, cfg.to_dict())
    return np.load(path)


def mel_batch(audios: list[np.ndarray], cfg: FeatureConfig, device: str) -> list[np.ndarray]:
    """Mels of clips of different lengths in one batched call, equal to `log_mel` of each clip alone:
    each clip gets its own reflect padding (what center=True does), then zeros to the longest, and
    the frames past a clip's own end are cut off."""
    import torch
    import torch.nn.functional as F

    from utils.audio import _mel_transform

    half = cfg.n_fft // 2
    longest = max(len(a) for a in audios) + 2 * half
    batch = torch.zeros(len(audios), longest, device=device)
    for i, a in enumerate(audios):
        wav = torch.from_numpy(np.ascontiguousarray(a)).to(device, non_blocking=True)
        batch[i, : len(a) + 2 * half] = F.pad(wav[None, None], (half, half), mode="reflect")[0, 0]
    transform = _mel_transform(cfg, str(device))
    spec = transform.spectrogram
    with torch.no_grad():
        # the same STFT and filterbank as log_mel, with the padding already done (center=False)
        window = spec.window.to(device)
        stft = torch.stft(batch, cfg.n_fft, cfg.hop_length, cfg.win_length, window, center=False,
                          return_complex=True).abs()          # [B, n_fft/2+1, frames]
        mel = transform.mel_scale(stft)                        # [B, n_mels, frames]
        mel = torch.log(torch.clamp(mel, min=cfg.log_floor)).float().cpu().numpy()
    return [mel[i, :, : cfg.frames(len(a))] for i, a in enumerate(audios)]


def precompute_gpu(ds_dir: Path, rows: list[dict], cfg: FeatureConfig, device: str, cancelled=lambda: False,
                   batch_seconds: float = 600.0):
    """Mels for many clips on a GPU: a thread pool reads clips ahead and writes results while the
    GPU computes batches of similar-length clips (about `batch_seconds` of audio each).
    Yields (clips done, clips to do)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    out_dir = ds_dir / "features" / cfg.key()
    todo = sorted((r for r in rows if not (out_dir / f"{r['sha1'][:16]}.npy").exists()),
                  key=lambda r: r["duration"])  # similar lengths together: little padding
    batches, cur, secs = [], [], 0.0
    for r in todo:
        cur.append(r)
        secs += r["duration"]
        if secs >= batch_seconds:
            batches.append(cur)
            cur, secs = [], 0.0
    batches += [cur] if cur else []
    with ThreadPoolExecutor(max_workers=8) as pool:
        load = lambda batch: [pool.submit(load_audio, ds_dir / r["audio"]) for r in batch]
        ahead = deque(load(b) for b in batches[:2])  # two batches read ahead bound the memory
        saves: deque = deque()
        done = 0
        for k, batch in enumerate(batches):
            if cancelled():
                break
            audios = [f.result()[0] for f in ahead.popleft()]
            if k + 2 < len(batches):
                ahead.append(load(batches[k + 2]))
            for row, mel in zip(batch, mel_batch(audios, cfg, device)):
                saves.append(pool.submit(save_npy, out_dir / f"{row['sha1'][:16]}.npy", np.ascontiguousarray(mel)))
            while len(saves) > 2048:
                saves.popleft().result()
            done += len(batch)
            yield done, len(todo)
        for s in saves:
            s.result()
