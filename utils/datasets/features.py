"""The mel feature cache: `features/<FeatureConfig.key()>/<audio sha1[:16]>.npy`, [n_mels, frames] float32, or
float16 when the dataset was prepared with half_mels (half the disk; read back as float32, within 0.01 of it).

Keyed by the audio's content and the feature configuration, never by path alone: a clip replaced
by its music-removed version (a different file) gets its own entry. The sha1 of a file is memoized
by (path, size, mtime), in memory and in `features/digests.jsonl` (written by prepare, read by every
process once), so a training start pays one `stat` per clip, not a hash of the dataset's audio
(35 GB for 200 hours), while a file replaced by hand is still hashed again.
"""
from __future__ import annotations

import os
import threading
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from utils.audio import FeatureConfig, file_digest, load_audio, resample
from utils.events import StudioError
from utils.workspace import Workspace, append_jsonl_rows, read_jsonl_from, temp_beside

_DIGESTS: dict[tuple[str, int, int], str] = {}  # (resolved path, size, mtime_ns) -> sha1
_FRAMES: dict[str, int] = {}  # resolved .npy path -> mel frames
_READ: dict[Path, int] = {}  # index file -> bytes of it already taken into the memos
_LOCK = threading.Lock()
DIGESTS = "digests.jsonl"  # in features/: audio path, size, mtime -> sha1 (written by prepare)
FRAMES = "frames.jsonl"  # in features/<config key>/: entry -> frames (written with each mel)


def _follow(index: Path, take) -> None:
    """Feed what was appended to an index since this process last read it to `take(row)`."""
    with _LOCK:
        rows, _READ[index] = read_jsonl_from(index, _READ.get(index, 0))
        for row in rows:
            try:
                take(row)
            except (KeyError, TypeError, ValueError):
                continue


def content_sha1(path: Path, ds_dir: Path | None = None, resolved: bool = False) -> str:
    """sha1 of a file's bytes, memoized by (path, size, mtime); with `ds_dir`, through its digest index.
    `resolved`: the caller passes resolved paths (saves the system calls of resolving them again)."""
    path = Path(path) if resolved else Path(path).resolve()
    root = None if ds_dir is None else (Path(ds_dir) if resolved else Path(ds_dir).resolve())
    return _sha1(str(path), path.stat(), root)


def _sha1(path: str, st: os.stat_result, root: Path | None) -> str:
    """content_sha1 of a resolved path whose stat the caller has (`root`: the resolved dataset folder, or None)."""
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS and root is not None:
        _follow(root / "features" / DIGESTS, lambda e: _DIGESTS.__setitem__(
            (str(root / e["audio"]), int(e["size"]), int(e["mtime_ns"])), e["sha1"]))
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _DIGESTS[key] = file_digest(path)
        if root is not None:
            record_digests(root, [(path, digest)])
    return digest


def record_digests(ds_dir: Path, files: list[tuple[Path, str]]) -> None:
    """Append (file, sha1) pairs, with the file's size and mtime now, to the dataset's digest index."""
    ds_dir = Path(ds_dir).resolve()
    rows = [{"audio": str(Path(p).resolve().relative_to(ds_dir)), "size": (st := Path(p).stat()).st_size,
             "mtime_ns": st.st_mtime_ns, "sha1": sha1} for p, sha1 in files]
    append_jsonl_rows(ds_dir / "features" / DIGESTS, rows)


def cache_path(ds_dir: Path, sha1: str, cfg: FeatureConfig) -> Path:
    return Path(_entry_name(str(ds_dir), sha1, cfg))


def _entry_name(root: str, sha1: str, cfg: FeatureConfig) -> str:
    return os.path.join(root, "features", _key(cfg), f"{sha1[:16]}.npy")


@lru_cache(maxsize=16)
def _key(cfg: FeatureConfig) -> str:
    return cfg.key()  # a hash of the configuration: once per configuration, not once per clip (200k at a start)


def store_mel(path: Path, mel: np.ndarray, half: bool = False) -> None:
    """Write a cache entry (in 16-bit floats with `half`) and note its length in the folder's frames index (a
    training start then needs no file of the cache to know how long each clip is)."""
    save_npy(path, mel.astype(np.float16) if half else mel)
    append_jsonl_rows(path.parent / FRAMES, [{"entry": path.stem, "frames": int(mel.shape[-1])}])


def cached_frames(path: Path | str) -> int | None:
    """Frames of the cache entry `path` from its folder's frames index, or its .npy header; None on a miss. An
    indexed entry needs no system call: its frames follow from its name (the audio's content and the config)."""
    entry = str(path)  # as cache_path made it, from the resolved dataset folder
    if entry not in _FRAMES:
        folder = os.path.dirname(entry)
        _follow(Path(folder) / FRAMES, lambda e: _FRAMES.__setitem__(f"{folder}/{e['entry']}.npy", int(e["frames"])))
    if entry in _FRAMES:
        return _FRAMES[entry]
    try:  # an entry cached before the index existed: its header, noted for the next start
        with open(entry, "rb") as f:
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            frames = _FRAMES[entry] = int(header(f)[0][-1])
    except _UNREADABLE:
        return None
    append_jsonl_rows(Path(entry).parent / FRAMES, [{"entry": Path(entry).stem, "frames": frames}])
    return frames


def save_npy(path: Path, array: np.ndarray) -> None:
    """Atomic .npy write: a reader (training workers) never sees half an array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_beside(path)
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
        store_mel(path, mel_numpy(audio, cfg, device))
    return path


def _entry(ws: Workspace, name: str, row: dict, cfg: FeatureConfig) -> tuple[Path, Path]:
    """(audio file, cache entry) of a manifest row: the entry is named by the audio's content."""
    wav, entry = _entry_names(ws, name, row, cfg)
    return Path(wav), Path(entry)


def audio_path(ws: Workspace, name: str, row: dict) -> str:
    """A manifest row's audio file, resolved, refused (StudioError naming the row) when it points outside the
    dataset folder: `..`, an absolute path or an outward link in an edited manifest."""
    root = str(_dataset_root(ws.root, name))
    wav = _resolved(root, row["audio"])
    if wav != root and not wav.startswith(root.rstrip(os.sep) + os.sep):
        raise StudioError(f"row {row.get('id')!r}: audio path {row['audio']!r} points outside the dataset.")
    return wav


def _entry_names(ws: Workspace, name: str, row: dict, cfg: FeatureConfig) -> tuple[str, str]:
    """_entry as strings, with one system call when nothing is a link: a training start makes one per clip (200k),
    and building and parsing Path objects was most of its time."""
    ds_dir = _dataset_root(ws.root, name)
    root = str(ds_dir)
    wav = audio_path(ws, name, row)
    try:
        st = os.stat(wav)
    except FileNotFoundError:
        raise StudioError(f"row {row.get('id')!r}: {row['audio']} is missing; run prepare again.") from None
    return wav, _entry_name(root, _sha1(wav, st, ds_dir), cfg)


def _resolved(root: str, audio: str) -> str:
    """`root / audio` with every link and `..` resolved, as Path.resolve gives it, but with its folder resolved once
    (a resolve costs a system call per path component: 0.1 ms a clip, 20 s for 200k clips at a training start)."""
    folder, base = os.path.split(audio)
    if base in ("", ".", ".."):
        return os.path.realpath(os.path.join(root, audio))
    path = os.path.join(_resolved_folder(os.path.join(root, folder)), base)
    return os.path.realpath(path) if os.path.islink(path) else path


@lru_cache(maxsize=256)
def _resolved_folder(folder: str) -> str:
    return os.path.realpath(folder)


@lru_cache(maxsize=64)
def _dataset_root(workspace: Path, name: str) -> Path:
    """The dataset folder, checked and resolved once per process (not once per clip)."""
    return Workspace.open(workspace).dataset_dir(name).resolve()


_UNREADABLE = (FileNotFoundError, ValueError, EOFError, OSError)  # a miss, or a damaged entry: compute it


def features(ws: Workspace, name: str, row: dict, cfg: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """Log-mel [n_mels, frames] float32 of a manifest row (a half-precision entry widened), computed and cached on
    a miss; a configuration that differs from a cached one only by a higher log floor is read from that one."""
    wav, path = _entry(ws, name, row, cfg)
    try:
        return np.load(path).astype(np.float32, copy=False)
    except _UNREADABLE:
        pass
    if (lower := lower_floor(cfg)) is not None:
        try:
            mel = np.load(_entry(ws, name, row, lower)[1]).astype(np.float32, copy=False)
            return np.maximum(mel, np.float32(np.log(cfg.log_floor)))
        except _UNREADABLE:
            pass
    compute_and_store(wav, path.parent, path.stem, cfg.to_dict())
    return np.load(path).astype(np.float32, copy=False)


def lower_floor(cfg: FeatureConfig) -> FeatureConfig | None:
    """The prepared cache's configuration when `cfg` is it with a higher log floor (F5's 1e-5 against 1e-7), else
    None: log(max(x, f)) = max(log(max(x, f0)), log f) for f >= f0, so one cache serves both. F5 used to rebuild every
    mel of its first run in the trainer's main process (minutes and ~2 GB for 15 h, on every rank)."""
    lower = replace(cfg, log_floor=FeatureConfig.log_floor)
    return lower if cfg.log_floor > lower.log_floor else None


def feature_frames(ws: Workspace, name: str, row: dict, cfg: FeatureConfig = FeatureConfig()) -> int:
    """Number of mel frames of a row, without reading its mel (computed on a miss)."""
    _, path = _entry_names(ws, name, row, cfg)
    frames = cached_frames(path)
    if frames is None and (lower := lower_floor(cfg)) is not None:
        frames = cached_frames(_entry_names(ws, name, row, lower)[1])  # the same frames as the prepared entry
    return frames if frames is not None else int(features(ws, name, row, cfg).shape[-1])


def mel_batch(audios: list[np.ndarray], cfg: FeatureConfig, device: str) -> list[np.ndarray]:
    """Mels of clips of different lengths in one batched call, equal to `log_mel` of each clip alone:
    each clip gets its own reflect padding (what center=True does), then zeros to the longest, and
    the frames past a clip's own end are cut off."""
    import torch
    import torch.nn.functional as F

    from utils.audio import log_mel_of_magnitude, magnitude_spectrogram

    half = cfg.n_fft // 2
    longest = max(len(a) for a in audios) + 2 * half
    batch = torch.zeros(len(audios), longest, device=device)
    for i, a in enumerate(audios):
        wav = torch.from_numpy(np.ascontiguousarray(a)).to(device, non_blocking=True)
        batch[i, : len(a) + 2 * half] = F.pad(wav[None, None], (half, half), mode="reflect")[0, 0]
    with torch.no_grad():  # the same STFT and filterbank as log_mel, with the padding already done
        mel = log_mel_of_magnitude(magnitude_spectrogram(batch, cfg, center=False), cfg).float().cpu().numpy()
    return [mel[i, :, : cfg.frames(len(a))] for i, a in enumerate(audios)]


def precompute_gpu(ds_dir: Path, rows: list[dict], cfg: FeatureConfig, device: str, cancelled=lambda: False,
                   batch_seconds: float = 600.0, half: bool = False):
    """Mels for many clips on a GPU: a thread pool reads clips ahead and writes results (16-bit with `half`) while
    the GPU computes batches of similar-length clips (about `batch_seconds` of audio each).
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
                saves.append(pool.submit(store_mel, out_dir / f"{row['sha1'][:16]}.npy", np.ascontiguousarray(mel),
                                         half))
            while len(saves) > 2048:
                saves.popleft().result()
            done += len(batch)
            yield done, len(todo)
        for s in saves:
            s.result()
    if str(device).startswith("cuda"):  # 10-minute batches leave GBs cached in this (the app's) process
        import torch

        torch.cuda.empty_cache()
