"""The codec's tokens of a dataset, extracted once and cached beside its mels: OmniVoice learns from the Higgs Audio
v2 codec's 8 codebooks (25 frames a second), not from audio, and encoding a clip costs far more than a training
step reads. As the mel cache (utils/datasets/features.py), an entry is named by the audio's content and the codec:

    datasets/NAME/features/omnivoice-<codec key>/<audio sha1[:16]>.npy     int16 [8, frames]

The codec key hashes the codec's config.json and weights and the encoding's version (ENCODING), so a changed codec
or a changed encode() never reuses older tokens, and a clip replaced by its music-removed version (other bytes) gets
its own entry. Each entry is written atomically, so a killed extraction keeps every clip it finished and the next
run encodes only the rest. About 400 bytes a second of speech (1.4 MB an hour): the disk this takes is said in the
run's guidance (expectations.py).

    key = codec_key(base)
    paths = extract(ws, "am", rows, codec, key, "cuda", log)     # {row id: .npy}, encoding what is missing
"""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from utils.events import StudioError
from utils.omnivoice.about import CODEBOOKS, CODEC_FOLDER, FRAMES_PER_S, SAMPLE_RATE

ENCODING = 2              # how encode() makes a clip's tokens (cut, level): one more at each change, so that
                          # the cache never hands back tokens an older encode() made
PEAK = 0.9                # the package's data readers (omnivoice.data.dataset) bring every training clip's peak
                          # here before encoding it
PROGRESS_EVERY_S = 30.0   # seconds between the log's progress lines while encoding
BYTES_PER_S = 2 * CODEBOOKS * FRAMES_PER_S  # int16 tokens a second of speech, for the disk estimate


def codec_key(base: Path) -> str:
    """The cache's short name for the codec and the encoding: a hash of the codec's config.json, its weights' content
    (memoized by path, size and time, so a run hashes the 0.8 GB once) and ENCODING."""
    from utils.datasets.features import content_sha1

    codec = Path(base) / CODEC_FOLDER
    digest = hashlib.sha1(f"encoding {ENCODING}\n".encode())
    digest.update((codec / "config.json").read_bytes())
    digest.update(content_sha1(codec / "model.safetensors").encode())
    return digest.hexdigest()[:12]


def cache_dir(ws, dataset: str, key: str) -> Path:
    return ws.dataset_dir(dataset).resolve() / "features" / f"omnivoice-{key}"


def entry(ws, dataset: str, row: dict, key: str) -> tuple[Path, Path]:
    """(audio file, cache entry) of a manifest row; the entry is named by the audio's content."""
    from utils.datasets.features import audio_path, content_sha1

    wav = Path(audio_path(ws, dataset, row))  # refuses a path that leaves the dataset, naming the row
    if not wav.is_file():
        raise StudioError(f"row {row.get('id')!r}: {row['audio']} is missing; run prepare again.")
    return wav, cache_dir(ws, dataset, key) / f"{content_sha1(wav, ws.dataset_dir(dataset))[:16]}.npy"


def level(wave: np.ndarray) -> np.ndarray:
    """A clip at the package's own level, peak 0.9, as its readers put every clip it trained on: the level of the
    studio's clips (about -23 dBFS) sat 3-6 dB below it. Every clip the codec encodes goes through here, a dataset's
    clips for training (encode) and a voice's reference clip (speech.clone_prompt, which the package then lifts to an
    RMS of 0.1 when it is quieter, as for any voice)."""
    wave = np.asarray(wave, dtype=np.float32)
    peak = float(np.abs(wave).max()) if wave.size else 0.0
    return wave * np.float32(PEAK / (peak + 1e-7))


def encode(codec, wave: np.ndarray, device: str) -> np.ndarray:
    """int16 [8, frames] of a 24 kHz clip at the package's level, cut to whole codec frames first (as the package
    cuts a voice's clip)."""
    import torch

    hop = codec.config.hop_length
    wave = np.ascontiguousarray(level(wave[: len(wave) // hop * hop]), dtype=np.float32)
    with torch.inference_mode():
        codes = codec.encode(torch.from_numpy(wave).to(device)[None, None]).audio_codes[0]  # [8, frames]
    return codes.to(torch.int16).cpu().numpy()


def extract(ws, dataset: str, rows: list[dict], codec, key: str, device: str, log=print) -> dict[str, Path]:
    """{row id: cache entry} for every row whose audio can be read, encoding only the entries missing (a thread
    reads the next clips while the codec encodes). A row whose audio is missing or unreadable is skipped, named in
    the log. `codec` None (a process of a run other than the one that encodes): only the entries already there."""
    from utils.audio import load_audio
    from utils.datasets.features import save_npy

    paths, todo = {}, []
    for row in rows:
        try:
            wav, path = entry(ws, dataset, row, key)
        except StudioError as exc:
            log(f"tokens: skipped: {exc}")
            continue
        if path.is_file():
            paths[row["id"]] = path
        elif codec is not None:
            paths[row["id"]] = path
            todo.append((row, wav, path))
    log(f"tokens: {len(paths) - len(todo)} of {len(paths)} clips already encoded (features/{cache_dir(ws, dataset, key).name}/)"
        + (f"; encoding {len(todo)} with the codec on {device}" if todo else ""))
    if not todo:
        return paths
    start = last = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        reads = [pool.submit(load_audio, wav, SAMPLE_RATE) for _, wav, _ in todo[:4]]
        for i, (row, wav, path) in enumerate(todo):
            if i + 4 < len(todo):  # a few clips read ahead bound the memory
                reads.append(pool.submit(load_audio, todo[i + 4][1], SAMPLE_RATE))
            try:
                wave, _ = reads[i].result()
            except StudioError as exc:
                log(f"tokens: skipped: {exc}")
                paths.pop(row["id"])
                continue
            reads[i] = None
            save_npy(path, encode(codec, wave, device))
            if time.monotonic() - last >= PROGRESS_EVERY_S or i + 1 == len(todo):
                last = time.monotonic()
                log(f"tokens: {i + 1}/{len(todo)} clips encoded ({last - start:.0f} s)")
    return paths


def load(path: Path) -> np.ndarray:
    """A cache entry: int16 [8, frames]."""
    return np.load(path)
