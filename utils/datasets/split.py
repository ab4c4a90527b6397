"""Train/validation split, stratified by speaker and decided by a hash of the id.

Within each speaker, rows are ranked by sha1(speaker/id) and the lowest-ranked `val_fraction`
(at least one when the speaker has 10 or more rows) go to validation, and no more than VAL_MOST_CLIPS
in all, shared among the speakers by their rows (rounded up: a dataset of many speakers may hold out a
few more): 5 % of 200 hours would keep 10 hours of speech out of training, where ~30 minutes compare
checkpoints as well. Copies of a held-out row (its audio or its sentence) are held out with it. The rank of a
row never depends on other rows' content, so re-running prepare, or excluding and keeping rows, does not move
anything between train and val; adding data moves only a few rows.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict


def _rank(row: dict) -> str:
    return hashlib.sha1(f"{row.get('speaker', '')}/{row['id']}".encode("utf-8")).hexdigest()


VAL_MOST_CLIPS = 500  # held-out clips at most, whatever the dataset's size (~30 min of speech)


def assign_split(rows: list[dict], val_fraction: float = 0.05) -> None:
    """Set row["split"] in place for every row."""
    by_speaker: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_speaker[r.get("speaker", "")].append(r)
    for group in by_speaker.values():
        group.sort(key=_rank)
        n_val = min(round(len(group) * val_fraction), math.ceil(VAL_MOST_CLIPS * len(group) / len(rows)))
        if n_val == 0 and len(group) >= 10:
            n_val = 1
        for i, r in enumerate(group):
            r["split"] = "val" if i < n_val else "train"
    if rows and all(r["split"] == "train" for r in rows) and len(rows) >= 2:
        min(rows, key=_rank)["split"] = "val"  # training always gets something to validate on
    _hold_out_copies(rows)


def _hold_out_copies(rows: list[dict]) -> None:
    """A row with a held-out row's audio or sentence (a 48 kHz copy of a clip, a second take) is held out too: in
    training it would let the model have heard what its quality is measured on. Not where copies would take more
    rows from training than are held out already (a dataset made of repeats)."""
    from utils.datasets.checks import same_text_key

    def keys(r: dict) -> set:
        return {k for k in (same_text_key(r), r.get("sha1")) if k}

    held = set().union(*(keys(r) for r in rows if r["split"] == "val"))
    copies = [r for r in rows if r["split"] == "train" and keys(r) & held]
    if len(copies) <= sum(r["split"] == "val" for r in rows):
        for r in copies:
            r["split"] = "val"
