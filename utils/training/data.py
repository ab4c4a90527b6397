"""The acoustic model's data: manifest rows -> items (token ids, frame counts, speaker) -> normalised log-mels.
Symbols come from utils/training/frontend.py; batches from utils/training/batching.py."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from utils.audio import FeatureConfig
from utils.events import StudioError
from utils.datasets.features import features
from utils.datasets.manifest import load_manifest
from utils.training.frontend import Frontend
from utils.workspace import Workspace


TRAINING_KEYS = ("id", "audio", "text", "normalized", "phonemes", "duration", "speaker", "split", "sha1", "excluded",
                 "flags", "music")  # what the trainers read of a row


def training_rows(ws: Workspace, dataset: str) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows) of a dataset, excluded rows dropped."""
    rows = [r for r in load_manifest(ws, dataset, TRAINING_KEYS) if not r.get("excluded")]
    if not rows:
        raise StudioError(f"Dataset {dataset!r} has no usable rows (all excluded or empty).")
    train = [r for r in rows if r.get("split", "train") != "val"]
    val = [r for r in rows if r.get("split") == "val"]
    if not train:
        raise StudioError(f"Dataset {dataset!r} has no rows in the train split.")
    return train, val


def held_out_or_fit(dataset: str, train: list, val: list, eval_clips: int, log) -> list:
    """What a run evaluates on: the held-out items, else (said in the log) the first training ones, which measure
    fit, not generalisation. A dataset of which no training row could be prepared is refused."""
    if not train:
        raise StudioError(f"Dataset {dataset!r}: no training row could be used (see the log).")
    if val:
        return val
    log("data: no held-out (val) rows: evaluation uses the first training clips (this measures fit, not "
        "generalisation)")
    return train[: max(1, eval_clips)]


# ----------------------------------------------------------------------------------- items
@dataclass
class Item:
    row: dict
    tokens: list[int]
    frames: int
    speaker: int


def prepare_items(ws: Workspace, dataset: str, rows: list[dict], frontend: Frontend, speakers: list[str],
                  feat_cfg: FeatureConfig, log=print) -> list[Item]:
    """Encode and measure every row (computing missing mel features once); drop rows MAS cannot align."""
    from utils.datasets.features import feature_frames

    items, dropped = [], []
    for row in rows:
        tokens = frontend.encode_row(row)
        frames = feature_frames(ws, dataset, row, feat_cfg)  # the .npy header, not the array
        if not tokens or frames < len(tokens):
            dropped.append(row.get("id"))
            continue
        items.append(Item(row, tokens, frames, speakers.index(row.get("speaker", "default"))))
    if dropped:
        log(f"data: {len(dropped)} row(s) skipped (no symbols, or fewer mel frames than symbols): "
            f"{', '.join(map(str, dropped[:5]))}{' ...' if len(dropped) > 5 else ''}")
    return items


MEL_STATS_CLIPS = 1000  # clips the normalisation is measured on: ~1 h of speech pins a scalar mean/std down
VAL_LOSS_CLIPS = 256  # held-out clips the validation loss is measured on (a big set prepared before the split's
# 500-clip cap holds out 5 %: ~11k at 200 h)


def spread(items: list, most: int) -> list:
    """At most `most` of the items, evenly spread over the list (all of a short one)."""
    return items[::max(1, -(-len(items) // most))]


def mel_stats(ws: Workspace, dataset: str, items: list[Item], feat_cfg: FeatureConfig,
              max_clips: int = MEL_STATS_CLIPS) -> tuple[float, float]:
    """One scalar mean and std over the training frames and channels (Matcha's normalisation), from at most
    `max_clips` clips spread evenly over the list (all of a small dataset; 200 hours is not read whole)."""
    total = total_sq = count = 0.0
    for it in spread(items, max_clips):
        mel = features(ws, dataset, it.row, feat_cfg).astype(np.float64)
        total += mel.sum()
        total_sq += (mel ** 2).sum()
        count += mel.size
    mean = total / count
    return float(mean), float(math.sqrt(max(total_sq / count - mean ** 2, 1e-8)))


class MelDataset(torch.utils.data.Dataset):
    """Index by (item index, epoch, batch index); returns tensors ready for `collate`."""

    def __init__(self, ws: Workspace, dataset: str, items: list[Item], feat_cfg: FeatureConfig, mean: float,
                 std: float):
        self.ws, self.dataset, self.items, self.feat_cfg = ws, dataset, items, feat_cfg
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.items)

    def __getitem__(self, key):
        i, epoch, index = key if isinstance(key, tuple) else (key, -1, -1)
        it = self.items[i]
        mel = (torch.from_numpy(features(self.ws, self.dataset, it.row, self.feat_cfg)) - self.mean) / self.std
        return {"tokens": torch.tensor(it.tokens, dtype=torch.long), "mel": mel.float(), "speaker": it.speaker,
                "pos": (epoch, index), "index": i}


