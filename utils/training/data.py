"""Training data: manifest rows -> token ids + normalised log-mels, batched by total frames.

- `Frontend`: rows -> ids with utils.text's tokenizer (phonemes by default); the symbol table is
  saved in every checkpoint and grown, never reordered, when fine-tuning meets new symbols.
- `FrameBatchSampler`: length bucketing + dynamic batches of at most `max_frames` padded frames,
  a seeded shuffle per epoch, sharded across DDP ranks, and an exact start position for resume.
  It is endless: each batch carries its (epoch, index) so the trainer knows the data position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from utils.audio import FeatureConfig
from utils.events import StudioError
from utils.workspace import Workspace

# ---------------------------------------------------------------------------------- dataset API
def _dataset_api():
    """The datasets engineer's API (load_manifest, features)."""
    try:
        from utils.datasets import features, load_manifest  # package exports, when present
    except ImportError:
        from utils.datasets.features import features
        from utils.datasets.manifest import load_manifest
    return load_manifest, features


def training_rows(ws: Workspace, dataset: str) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows) of a dataset, excluded rows dropped."""
    load_manifest, _ = _dataset_api()
    rows = [r for r in load_manifest(ws, dataset) if not r.get("excluded")]
    if not rows:
        raise StudioError(f"Dataset {dataset!r} has no usable rows (all excluded or empty).")
    train = [r for r in rows if r.get("split", "train") != "val"]
    val = [r for r in rows if r.get("split") == "val"]
    if not train:
        raise StudioError(f"Dataset {dataset!r} has no rows in the train split.")
    return train, val


# ---------------------------------------------------------------------------------- frontend
class Frontend:
    """Rows -> ids through utils.text's Tokenizer (phoneme | char | bpe). The table goes into every
    checkpoint's config.json as "frontend" and only ever grows (existing ids never move)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @property
    def kind(self) -> str:
        return self.tokenizer.kind

    @property
    def symbols(self) -> list[str]:
        return self.tokenizer.symbols

    @classmethod
    def create(cls, kind: str, rows: list[dict], saved: dict | None = None) -> "Frontend":
        """The saved frontend (fine-tuning / resume) or a new one of `kind`, grown for `rows`."""
        from utils.text.tokenizers import Tokenizer, make_tokenizer

        if saved:
            tok = Tokenizer.from_dict(saved.get("tokenizer", saved))
        else:
            kind = "phoneme" if kind == "auto" else kind
            texts = [r.get("normalized") or r.get("text") or "" for r in rows]
            tok = make_tokenizer(kind, texts=texts if kind != "phoneme" else None)
        front = cls(tok)
        front.grow_for(rows)
        return front

    def units(self, row: dict) -> list[str]:
        """The manifest's reviewed phonemes when present ('|' = word boundary), else the tokenizer's own units."""
        if self.kind == "phoneme" and row.get("phonemes"):
            from utils.text.g2p import WORD_BOUNDARY

            return [WORD_BOUNDARY if s == "|" else s for s in row["phonemes"].split()]
        return self.tokenizer.units(row.get("normalized") or row.get("text") or "")

    def grow_for(self, rows: list[dict]) -> list[str]:
        """Append the symbols `rows` use that the table lacks; returns them."""
        if self.kind == "bpe":
            return []
        return self.tokenizer.grow([u for r in rows for u in self.units(r)])

    def encode_row(self, row: dict) -> list[int]:
        return self.tokenizer.encode_units(self.units(row))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "symbols": list(self.symbols), "tokenizer": self.tokenizer.to_dict()}


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


def mel_stats(ws: Workspace, dataset: str, items: list[Item], feat_cfg: FeatureConfig,
              max_clips: int = MEL_STATS_CLIPS) -> tuple[float, float]:
    """One scalar mean and std over the training frames and channels (Matcha's normalisation), from at most
    `max_clips` clips spread evenly over the list (all of a small dataset; 200 hours is not read whole)."""
    _, features = _dataset_api()
    total = total_sq = count = 0.0
    every = max(1, -(-len(items) // max_clips))
    for it in items[::every]:
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
        _, features = _dataset_api()
        it = self.items[i]
        mel = (torch.from_numpy(features(self.ws, self.dataset, it.row, self.feat_cfg)) - self.mean) / self.std
        return {"tokens": torch.tensor(it.tokens, dtype=torch.long), "mel": mel.float(), "speaker": it.speaker,
                "pos": (epoch, index), "index": i}


def round_up(n: int, multiple: int) -> int:
    return int(math.ceil(n / multiple) * multiple)


class Collate:
    """Pad tokens to a multiple of 8 and mels to `length_multiple` frames (bucketed shapes)."""

    def __init__(self, length_multiple: int = 4, token_multiple: int = 8):
        self.length_multiple, self.token_multiple = length_multiple, token_multiple

    def __call__(self, items: list[dict]) -> dict:
        n = round_up(max(len(x["tokens"]) for x in items), self.token_multiple)
        t = round_up(max(x["mel"].shape[-1] for x in items), self.length_multiple)
        b, f = len(items), items[0]["mel"].shape[0]
        tokens = torch.zeros(b, n, dtype=torch.long)
        mels = torch.zeros(b, f, t)
        for i, x in enumerate(items):
            tokens[i, : len(x["tokens"])] = x["tokens"]
            mels[i, :, : x["mel"].shape[-1]] = x["mel"]
        return {"tokens": tokens, "token_lens": torch.tensor([len(x["tokens"]) for x in items]),
                "mels": mels, "mel_lens": torch.tensor([x["mel"].shape[-1] for x in items]),
                "speakers": torch.tensor([x["speaker"] for x in items]), "pos": items[0]["pos"],
                "index": torch.tensor([x["index"] for x in items])}


def split_batch(batch: dict, parts: int, length_multiple: int = 4) -> list[dict]:
    """Cut a collated batch into `parts` smaller micro-batches (after an out-of-memory), trimming padding."""
    b = batch["tokens"].shape[0]
    parts = min(parts, b)
    bounds = [round(i * b / parts) for i in range(parts + 1)]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        t = round_up(int(batch["mel_lens"][lo:hi].max()), length_multiple)
        n = int(batch["token_lens"][lo:hi].max())
        out.append({"tokens": batch["tokens"][lo:hi, :n], "token_lens": batch["token_lens"][lo:hi],
                    "mels": batch["mels"][lo:hi, :, :t], "mel_lens": batch["mel_lens"][lo:hi],
                    "speakers": batch["speakers"][lo:hi], "pos": batch["pos"], "index": batch["index"][lo:hi]})
    return out


# ----------------------------------------------------------------------------------- sampler
class FrameBatchSampler:
    """Endless batches of item indices, each batch at most `max_frames` padded frames.

    Epoch e: shuffle (seed + e), sort by padded length in buckets, fill batches greedily, shuffle
    the batch order, keep every world_size-th batch for this rank. Yields lists of
    (index, epoch, batch_index) keys, starting at `start` = (epoch, batch_index).
    """

    def __init__(self, frames: list[int], max_frames: int, seed: int = 0, rank: int = 0, world_size: int = 1,
                 length_multiple: int = 4, start: tuple[int, int] = (0, 0), shuffle: bool = True):
        self.frames, self.max_frames, self.seed = list(frames), int(max_frames), seed
        self.rank, self.world_size, self.length_multiple = rank, world_size, length_multiple
        self.start, self.shuffle = start, shuffle

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng(self.seed + epoch)
        order = rng.permutation(len(self.frames)) if self.shuffle else np.arange(len(self.frames))
        padded = [round_up(self.frames[i], self.length_multiple) for i in order]
        order = [int(order[i]) for i in np.argsort(padded, kind="stable")]  # bucketed by padded length
        batches, cur, longest = [], [], 0
        for i in order:
            longest_if = max(longest, round_up(self.frames[i], self.length_multiple))
            if cur and longest_if * (len(cur) + 1) > self.max_frames:
                batches.append(cur)
                cur, longest_if = [], round_up(self.frames[i], self.length_multiple)
            cur.append(i)
            longest = longest_if
        if cur:
            batches.append(cur)
        if self.shuffle:
            batches = [batches[j] for j in rng.permutation(len(batches))]
        if self.world_size > 1:  # equal counts per rank (DDP steps in lock step)
            usable = max(self.world_size, len(batches) // self.world_size * self.world_size)
            batches = (batches * self.world_size)[:usable][self.rank::self.world_size]
        return batches

    def __iter__(self):
        epoch, index = self.start
        while True:
            batches = self.epoch_batches(epoch)
            for j in range(index, len(batches)):
                yield [(i, epoch, j) for i in batches[j]]
            epoch, index = epoch + 1, 0

    def batches_per_epoch(self) -> int:
        return len(self.epoch_batches(0))


def make_loader(dataset: MelDataset, sampler: FrameBatchSampler, m, prefetch_factor: int = 2):
    """The training DataLoader with the resolved worker / pinning / prefetch settings."""
    kw = {}
    if m.num_workers > 0:
        kw = {"persistent_workers": m.persistent_workers, "prefetch_factor": prefetch_factor}
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=m.num_workers,
                                       pin_memory=m.pin_memory, collate_fn=Collate(m.length_multiple), **kw)


def batch_to_device(batch: dict, device, non_blocking: bool = False) -> dict:
    """The batch's tensors on `device`, except the lengths: the model reads those on the CPU for its padding
    checks, which on the GPU would make the host wait for every queued kernel (a sync per step)."""
    return {k: v.to(device, non_blocking=non_blocking) if torch.is_tensor(v) and not k.endswith("_lens") else v
            for k, v in batch.items()}
