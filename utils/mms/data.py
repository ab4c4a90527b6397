"""The MMS engine's data: manifest rows -> clips (token ids, spectrogram frames) -> batches of token ids, 16 kHz
waveforms and their linear spectrograms (utils/mms/features.py), of at most N padded frames, in the shared
sampler's order (utils.training.batching.FrameBatchSampler: length buckets, a seeded shuffle a pass, a share a
rank, an exact start for resume).

The dataset's clips are 24 kHz (the studio's rate); the base learnt 16 kHz, so each clip is resampled once when
first read and kept in memory (an hour of speech is ~230 MB at 16 kHz).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from utils.audio import load_audio
from utils.events import StudioError
from utils.mms.features import VitsFeatures, spectrogram
from utils.training.loader import ignore_stop_signals

FEATURES = VitsFeatures()


@dataclass
class Clip:
    row: dict
    path: Path
    ids: list[int]
    frames: int  # spectrogram frames, from the row's duration (batching needs no audio read)


def prepare_clips(ws, dataset: str, rows: list[dict], text, user_dict: dict, log=print) -> list[Clip]:
    """Encode and measure every row; drop those with nothing to say or fewer frames than symbols (the alignment
    search gives every symbol a frame at least)."""
    from utils.datasets.features import audio_path

    clips, dropped = [], []
    for row in rows:
        try:  # an edited manifest may point anywhere: only the dataset's own files are read (as the mel cache does)
            path = Path(audio_path(ws, dataset, row))
        except StudioError as exc:
            log(f"data: skipped: {exc}")
            continue
        ids = text.encode(row.get("normalized") or row.get("text") or "", user_dict)
        frames = FEATURES.frames(int(float(row.get("duration") or 0) * FEATURES.sample_rate))
        if not ids or frames < len(ids):
            dropped.append(row.get("id"))
            continue
        clips.append(Clip(row, path, ids, frames))
    if dropped:
        log(f"data: {len(dropped)} row(s) skipped (nothing uroman's letters can say, or fewer spectrogram frames than "
            f"symbols): {', '.join(map(str, dropped[:5]))}{' ...' if len(dropped) > 5 else ''}")
    return clips


class ClipDataset(torch.utils.data.Dataset):
    """Index by (clip index, pass, batch index), as the sampler yields them; 16 kHz audio cached in memory."""

    def __init__(self, clips: list[Clip], cache_seconds: float = 4 * 3600):
        self.clips, self.cache, self.budget = clips, {}, int(cache_seconds * FEATURES.sample_rate)

    def __len__(self):
        return len(self.clips)

    def wave(self, i: int) -> torch.Tensor:
        """The clip at 16 kHz, cut to a whole number of spectrogram frames."""
        if i not in self.cache:
            audio, _ = load_audio(self.clips[i].path, FEATURES.sample_rate)
            audio = torch.from_numpy(audio[: FEATURES.frames(len(audio)) * FEATURES.hop_length].copy())
            if sum(len(w) for w in self.cache.values()) + len(audio) > self.budget:
                return audio
            self.cache[i] = audio
        return self.cache[i]

    def __getitem__(self, key):
        i, epoch, index = key if isinstance(key, tuple) else (key, -1, -1)
        wave = self.wave(i)
        return {"ids": torch.tensor(self.clips[i].ids), "wave": wave, "spec": spectrogram(wave, FEATURES),
                "pos": (epoch, index), "index": i}


def batch_bytes(frames: int) -> int:
    """The tensors of a batch of `frames` padded frames (spectrogram bins and waveform samples, fp32): what each
    batch a loader worker makes occupies in shared memory (~6 MB for 16 clips of 2.3 s)."""
    return frames * (FEATURES.n_fft // 2 + 1 + FEATURES.hop_length) * 4


def collate(items: list[dict]) -> dict:
    """Pad to the longest: ids [B, N], wave [B, L], spec [B, bins, T], with their lengths."""
    b = len(items)
    n, t = max(len(x["ids"]) for x in items), max(x["spec"].shape[-1] for x in items)
    batch = {"ids": torch.zeros(b, n, dtype=torch.long), "wave": torch.zeros(b, t * FEATURES.hop_length),
             "spec": torch.zeros(b, items[0]["spec"].shape[0], t),
             "id_lens": torch.tensor([len(x["ids"]) for x in items]),
             "spec_lens": torch.tensor([x["spec"].shape[-1] for x in items]), "pos": items[0]["pos"]}
    for i, x in enumerate(items):
        batch["ids"][i, : len(x["ids"])] = x["ids"]
        batch["wave"][i, : len(x["wave"])] = x["wave"]
        batch["spec"][i, :, : x["spec"].shape[-1]] = x["spec"]
    return batch


def split(batch: dict, parts: int) -> list[dict]:
    """A batch cut into `parts` micro-batches of consecutive clips (after an out-of-memory), padding trimmed."""
    b = len(batch["ids"])
    bounds = [round(i * b / min(parts, b)) for i in range(min(parts, b) + 1)]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        n, t = int(batch["id_lens"][lo:hi].max()), int(batch["spec_lens"][lo:hi].max())
        out.append({"ids": batch["ids"][lo:hi, :n], "wave": batch["wave"][lo:hi, : t * FEATURES.hop_length],
                    "spec": batch["spec"][lo:hi, :, :t], "id_lens": batch["id_lens"][lo:hi],
                    "spec_lens": batch["spec_lens"][lo:hi], "pos": batch["pos"]})
    return out


def loader(dataset: ClipDataset, sampler, m, prefetch_factor: int = 2, num_workers: int | None = None):
    """The training DataLoader with the machine's worker and pinning settings (`num_workers` overrides the
    machine's: utils.training.loader.ResilientLoader restarts it with fewer)."""
    workers = m.num_workers if num_workers is None else num_workers
    extra = {"persistent_workers": m.persistent_workers, "prefetch_factor": prefetch_factor,
             "worker_init_fn": ignore_stop_signals} if workers else {}
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers,
                                       pin_memory=m.pin_memory, collate_fn=collate, **extra)
