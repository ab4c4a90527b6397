"""Batches by total frames: collate (padding to bucketed shapes), micro-batch splitting, the loader.

`FrameBatchSampler`: length bucketing + dynamic batches of at most `max_frames` padded frames, a seeded
shuffle per epoch, sharded across DDP ranks, and an exact start position for resume. It is endless: each
batch carries its (epoch, index) so the trainer knows the data position. With a `ShapePlan` (a compiled run,
utils/training/shapes.py) every batch is one of the plan's few shapes instead, its last one of each bucket included,
and an out-of-memory split keeps that shape in equal pieces.
"""
from __future__ import annotations

import numpy as np
import torch

from utils.training.loader import ignore_stop_signals
from utils.training.shapes import ShapePlan, round_up


class Collate:
    """Pad tokens to a multiple of 8 and mels to `length_multiple` frames, or, with a plan, both to the batch's
    bucket's bounds (one of the plan's shapes)."""

    def __init__(self, length_multiple: int = 4, token_multiple: int = 8, plan: ShapePlan | None = None):
        self.length_multiple, self.token_multiple, self.plan = length_multiple, token_multiple, plan

    def __call__(self, items: list[dict]) -> dict:
        n = round_up(max(len(x["tokens"]) for x in items), self.token_multiple)
        t = round_up(max(x["mel"].shape[-1] for x in items), self.length_multiple)
        if self.plan is not None:
            bucket = self.plan.of_batch([x["mel"].shape[-1] for x in items])
            n, t = max(n, bucket.tokens), max(t, bucket.frames)
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


def split_batch(batch: dict, parts: int, length_multiple: int = 4, token_multiple: int = 8,
                fixed: bool = False) -> list[dict]:
    """Cut a collated batch into `parts` smaller micro-batches (after an out-of-memory), trimming padding to the
    multiples Collate pads to: a compiled model builds one graph a shape (utils/training/compiled.py), and tokens
    cut to each piece's own longest would bring a new one at almost every split. `fixed` (a planned batch): every
    piece keeps the batch's padded shape and has the same number of clips, so each bucket's pieces are one shape."""
    if fixed:
        return _equal_pieces(batch, parts)
    b = batch["tokens"].shape[0]
    parts = min(parts, b)
    bounds = [round(i * b / parts) for i in range(parts + 1)]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        t = round_up(int(batch["mel_lens"][lo:hi].max()), length_multiple)
        n = min(round_up(int(batch["token_lens"][lo:hi].max()), token_multiple), batch["tokens"].shape[1])
        out.append({"tokens": batch["tokens"][lo:hi, :n], "token_lens": batch["token_lens"][lo:hi],
                    "mels": batch["mels"][lo:hi, :, :t], "mel_lens": batch["mel_lens"][lo:hi],
                    "speakers": batch["speakers"][lo:hi], "pos": batch["pos"], "index": batch["index"][lo:hi]})
    return out


def _equal_pieces(batch: dict, parts: int) -> list[dict]:
    """Pieces of ceil(b / parts) clips each, padding kept; the last one topped up with the batch's first clips (its
    "rows" counts only its own, which weigh its share of the step)."""
    b = batch["tokens"].shape[0]
    size = -(-b // min(parts, b))
    out = []
    for lo in range(0, b, size):
        rows = list(range(lo, min(lo + size, b)))
        own = len(rows)
        rows += list(range(size - own))
        piece = {k: v[rows] if torch.is_tensor(v) else v for k, v in batch.items()}
        out.append({**piece, "rows": own} if own < size else piece)
    return out


# ----------------------------------------------------------------------------------- sampler
class FrameBatchSampler:
    """Endless batches of item indices, each batch at most `max_frames` padded frames.

    Epoch e: shuffle (seed + e), sort by padded length in buckets, fill batches greedily, shuffle
    the batch order, keep every world_size-th batch for this rank. Yields lists of
    (index, epoch, batch_index) keys, starting at `start` = (epoch, batch_index).
    """

    def __init__(self, frames: list[int], max_frames: int, seed: int = 0, rank: int = 0, world_size: int = 1,
                 length_multiple: int = 4, start: tuple[int, int] = (0, 0), shuffle: bool = True,
                 plan: ShapePlan | None = None):
        self.frames, self.max_frames, self.seed = list(frames), int(max_frames), seed
        self.rank, self.world_size, self.length_multiple = rank, world_size, length_multiple
        self.start, self.shuffle, self.plan = start, shuffle, plan

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng(self.seed + epoch)
        order = rng.permutation(len(self.frames)) if self.shuffle else np.arange(len(self.frames))
        batches = self._planned(order) if self.plan is not None else self._filled(order)
        if self.shuffle:
            batches = [batches[j] for j in rng.permutation(len(batches))]
        if self.world_size > 1:  # equal counts per rank (DDP steps in lock step)
            usable = max(self.world_size, len(batches) // self.world_size * self.world_size)
            batches = (batches * self.world_size)[:usable][self.rank::self.world_size]
        return batches

    def _planned(self, order) -> list[list[int]]:
        """Each bucket's clips (in the epoch's order) in batches of its size; the last one topped up with earlier
        clips of the bucket, so that it has the bucket's shape too."""
        members: dict[int, list[int]] = {}
        for i in order:
            members.setdefault(self.plan.index(self.frames[i]), []).append(int(i))
        batches = []
        for k, clips in sorted(members.items()):
            size = self.plan.buckets[k].size
            for lo in range(0, len(clips), size):
                batch = clips[lo:lo + size]
                batches.append(batch + [clips[j % len(clips)] for j in range(size - len(batch))])
        return batches

    def _filled(self, order) -> list[list[int]]:
        """Clips sorted by padded length, each batch filled up to `max_frames` padded frames."""
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


def make_loader(dataset: torch.utils.data.Dataset, sampler: FrameBatchSampler, m, prefetch_factor: int = 2,
                num_workers: int | None = None, collate_fn=None):
    """The training DataLoader with the resolved worker / pinning / prefetch settings (`num_workers` overrides
    the machine's: utils.training.loader.ResilientLoader restarts it with fewer; `collate_fn`: a family's own,
    else the mel batches' Collate)."""
    workers = m.num_workers if num_workers is None else num_workers
    kw = {}
    if workers > 0:
        kw = {"persistent_workers": m.persistent_workers, "prefetch_factor": prefetch_factor,
              "worker_init_fn": ignore_stop_signals}
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers,
                                       pin_memory=m.pin_memory, collate_fn=collate_fn or Collate(m.length_multiple), **kw)


def batch_to_device(batch: dict, device, non_blocking: bool = False) -> dict:
    """The batch's tensors on `device`, except the lengths: the model reads those on the CPU for its padding
    checks, which on the GPU would make the host wait for every queued kernel (a sync per step)."""
    return {k: v.to(device, non_blocking=non_blocking) if torch.is_tensor(v) and not k.endswith("_lens") else v
            for k, v in batch.items()}
