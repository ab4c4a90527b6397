"""A small fixed set of batch shapes for compiled training: length buckets placed where the dataset's clips are, a
fixed batch size each, tokens padded to their bucket's bound.

Why: torch.compile builds one graph per batch shape (static shapes, utils/training/compiled.py), a minute or more
each. Batches filled up to a frame budget (FrameBatchSampler without a plan) make a new (clips, length) pair at almost
every step: 196 shapes for the text encoder and 33 for the decoder over two epochs of a 200 h set. With a plan every
batch of bucket k is (size_k, tokens_k, frames_k): at most BUCKETS graphs per part, whatever the dataset's size.
The bounds are chosen from the length histogram for the least work (bench/compile_shapes.py: 200 h of lognormal
1-20 s clips at 40,000 frames, 8 buckets, about 13 % of the frames padding).

Only a compiled run uses a plan: eager code runs any shape at the same speed, and fixed buckets cost padding.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

BUCKETS = 8            # the most shapes a compiled part meets in training
PADDING_GOAL = 0.10    # fewer buckets while the work they add stays under this share (short clips rarely reach it:
                       # rounding to x64 alone costs more)
BUCKET_GAIN = 0.01     # past the goal, a further bucket (a graph per compiled part, a minute or more) must save
                       # more than this share of the work: a 120-clip set took 7 buckets, the 7th for one clip


def round_up(n: int, multiple: int) -> int:
    return int(math.ceil(n / multiple) * multiple)


@dataclass(frozen=True)
class Bucket:
    frames: int  # every clip of the bucket is padded to this many mel frames
    tokens: int  # ... and its text to this many tokens
    size: int    # clips in each of its batches


class ShapePlan:
    """The buckets of one run, shortest first. `index(frames)`: the bucket a clip of that many frames goes to."""

    def __init__(self, buckets: list[Bucket]):
        self.buckets = sorted(buckets, key=lambda b: b.frames)
        self.bounds = [b.frames for b in self.buckets]

    def __len__(self) -> int:
        return len(self.buckets)

    def index(self, frames: int) -> int:
        """The first bucket longer than the clip: every planned clip has padding, so no batch runs without a padding
        mask (which would be another graph of the same shape)."""
        return min(bisect.bisect_right(self.bounds, frames), len(self.buckets) - 1)

    def of_batch(self, frames: list[int]) -> Bucket:
        """The bucket of a batch: that of its longest clip (every clip of a planned batch is of one bucket)."""
        return self.buckets[self.index(max(frames))]

    def describe(self) -> str:
        return ", ".join(f"{b.size}x{b.frames}" for b in self.buckets)

    @classmethod
    def fit(cls, frames: list[int], tokens: list[int], max_frames: int, multiple: int = 64, token_multiple: int = 8,
            most: int = BUCKETS) -> "ShapePlan":
        """The fewest buckets (at most `most`) whose work stays within PADDING_GOAL of the clips' own frames, else the
        fewest within BUCKET_GAIN of the least work any count makes; bounds are multiples of `multiple` frames. Work
        counts what a batch of the bucket computes, so a bucket's last batch, topped up to its size with clips of the
        bucket, counts whole."""
        lengths = sorted(round_up(f + 1, multiple) for f in frames)  # at least a frame of padding (`index`)
        values = sorted(set(lengths))
        counts = [bisect.bisect_right(lengths, v) for v in values]  # clips up to each value, cumulative
        most = max(1, min(most, sum(lengths) // max_frames))  # no more buckets than batches an epoch fills: a graph
        # costs more than a small set's padding ever does (the GPU test's 120 clips, one batch: 6 graphs a part, not 2)
        chosen = _least_work(values, counts, max_frames, most, sum(frames))
        return cls(_buckets(chosen, frames, tokens, max_frames, token_multiple))


def batch_size(bound: int, clips: int, max_frames: int) -> int:
    """Clips a batch of a bucket: its clips shared evenly among the fewest batches the frame budget allows (at least
    one clip), so that topping up its last batch adds at most one clip a batch."""
    batches = math.ceil(clips / max(1, max_frames // bound))
    return max(1, math.ceil(clips / batches))


def _work(bound: int, clips: int, max_frames: int) -> int:
    size = batch_size(bound, clips, max_frames)
    return math.ceil(clips / size) * size * bound


def _least_work(values: list[int], counts: list[int], max_frames: int, most: int, real: int) -> list[int]:
    """Bucket bounds among `values` by dynamic programming over the sorted lengths: best[k][j] is the least work of
    the clips up to values[j-1] in k buckets, the last bound values[j-1]."""
    m, inf = len(values), float("inf")
    best = [[inf] * (m + 1) for _ in range(most + 1)]
    cut = [[0] * (m + 1) for _ in range(most + 1)]
    best[0][0] = 0
    for k in range(1, most + 1):
        for j in range(1, m + 1):
            for i in range(k - 1, j):
                below = counts[i - 1] if i else 0
                cost = best[k - 1][i] + _work(values[j - 1], counts[j - 1] - below, max_frames)
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    usable = [k for k in range(1, most + 1) if best[k][m] < inf]
    enough = max(real * (1 + PADDING_GOAL), min(best[k][m] for k in usable) * (1 + BUCKET_GAIN))
    k = next(k for k in usable if best[k][m] <= enough)  # the fewest buckets doing about the least work
    bounds, j = [], m
    while k:
        bounds.append(values[j - 1])
        j, k = cut[k][j], k - 1
    return sorted(bounds)


def _buckets(bounds: list[int], frames: list[int], tokens: list[int], max_frames: int,
             token_multiple: int) -> list[Bucket]:
    members: dict[int, list[int]] = {}
    for f, n in zip(frames, tokens):
        members.setdefault(min(bisect.bisect_right(bounds, f), len(bounds) - 1), []).append(n)
    return [Bucket(bound, round_up(max(members[k]) + 1, token_multiple),  # a token of padding too
                   batch_size(bound, len(members[k]), max_frames)) for k, bound in enumerate(bounds) if k in members]
