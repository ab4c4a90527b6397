"""Checkpoint folders: `model.safetensors` + `config.json` (+ `trainer_state.pt` to resume).

    checkpoints/step-N/model.safetensors   inference weights (the EMA weights when EMA is on)
    checkpoints/step-N/config.json         {"model": sizes, "frontend": symbols, "speakers": [...],
                                            "features": FeatureConfig, "step": N, "train": TrainConfig, ...}
    checkpoints/step-N/trainer_state.pt    raw weights, optimizers, scaler, EMA, data position, counters

No random generator state is saved: the loop reseeds every rank's stream from (seed, rank, step) at each step,
so a resume on any rank continues the same noise without one.

A folder is written under a temporary name and renamed, so a crash or kill -9 never leaves a half
checkpoint behind (the temporary leftovers of a killed writer are cleared by `recover` at the next
start). Loading weights never unpickles: safetensors + JSON; trainer_state.pt is read with
torch.load(weights_only=True), and a file that would run code when unpickled is refused.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch

from utils.events import StudioError
from utils.safeload import load_safetensors, load_torch_plain, save_safetensors
from utils.voice_folders import STEP_RE

LEFTOVER_RE = re.compile(r"^\.(step-\d+)\.(tmp|old)-(\d+)$")  # what a writer killed mid-save leaves


def save_checkpoint(folder: Path, weights: dict[str, torch.Tensor], config: dict,
                    trainer_state: dict | None = None) -> Path:
    """Write a checkpoint folder atomically: its files (weights first), then the rename."""
    return write_atomically(folder, checkpoint_files(weights, config, trainer_state))


def checkpoint_files(weights: dict[str, torch.Tensor], config: dict,
                     trainer_state: dict | None = None) -> Iterator[tuple[str, bytes | Callable]]:
    """(file name, bytes or a function that writes the file to a path) of a checkpoint, in the order they are
    written, each made when the writer asks for it: a wrapper can act between two files (utils/training/faults.py
    pauses a save there, half written). Streamed to disk, not serialized in memory first: F5's weights (1.35 GB)
    and trainer state (~5.4 GB) would need that much RAM again (a Colab has 12 GB). A full disk is an
    OSError(ENOSPC) the trainer can name, whatever library wrote."""
    yield "model.safetensors", lambda path: save_safetensors(
        {k: v.detach().float().contiguous().cpu() for k, v in weights.items()}, path)
    yield "config.json", (json.dumps(config, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    if trainer_state is not None:
        yield "trainer_state.pt", lambda path: _save_torch(trainer_state, path)


def _save_torch(obj, path: Path) -> None:
    with open(path, "wb", buffering=0) as raw:
        torch.save(obj, _WholeWrites(raw))


class _WholeWrites:
    """A file torch.save can write to whose every write is whole or an OSError: an unbuffered file returns a short
    count when the disk fills, which torch reports as "unexpected pos" instead of the full disk it is."""

    def __init__(self, raw):
        self.raw = raw

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        while view:
            view = view[self.raw.write(view):]
        return len(data)

    def flush(self) -> None:
        self.raw.flush()


def write_atomically(folder: Path, files: Iterable[tuple[str, bytes | memoryview]]) -> Path:
    """Write `files` into a temporary folder beside `folder`, then rename it into place.

    A failed write (a full disk) removes its temporary folder, so the space it took is free again and the previous
    checkpoint stays the newest. Re-saving an existing step moves the old folder aside first (`recover` puts it
    back if a kill lands between the two renames)."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for name, data in files:
            _write(tmp / name, data)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():  # re-saving the same step (e.g. stop right after a periodic save)
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, folder)
    return folder


def _write(path: Path, data) -> None:
    try:
        if callable(data):
            data(path)
        else:
            with open(path, "wb") as f:
                f.write(data)
    except Exception as exc:  # a library's own wording of a full disk: safetensors' "os error 28", or torch's zip
        if _full_disk(exc):     # writer failing again in its clean-up over the OSError it met ("unexpected pos")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from exc
        raise
    with open(path, "rb+") as f:
        os.fsync(f.fileno())  # on disk before the rename makes the folder visible


def _full_disk(exc: BaseException | None) -> bool:
    """Whether a full disk (or quota) is behind `exc`, its cause or the error it interrupted."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "os error 28" in str(exc) or "No space left" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def step_folders(checkpoints: Path) -> list[tuple[int, Path]]:
    """Complete checkpoint folders under `checkpoints/`, oldest first."""
    out = []
    if Path(checkpoints).is_dir():
        for p in Path(checkpoints).iterdir():
            m = STEP_RE.match(p.name)
            if m and (p / "model.safetensors").exists() and (p / "config.json").exists():
                out.append((int(m.group(1)), p))
    return sorted(out)


def recover(checkpoints: Path) -> list[str]:
    """Clear what a writer killed mid-save left (run at trainer start, before anything is saved).

    `.step-N.tmp-PID` is a half-written folder: deleted. `.step-N.old-PID` is a complete checkpoint that
    was being replaced by a re-save of the same step: put back if the new one never arrived."""
    notes = []
    if not Path(checkpoints).is_dir():
        return notes
    for p in sorted(Path(checkpoints).iterdir()):
        m = LEFTOVER_RE.match(p.name)
        if not m:
            continue
        target = p.with_name(m.group(1))
        if m.group(2) == "old" and not target.exists():
            os.replace(p, target)
            notes.append(f"{target.name} restored (its re-save was interrupted)")
        else:
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {p.name} (a save interrupted by a crash or kill)")
    return notes


def latest_resumable(checkpoints: Path) -> Path | None:
    for _, p in reversed(step_folders(checkpoints)):
        if (p / "trainer_state.pt").exists():
            return p
    return None


def resume_point(resume: str | None, checkpoints: Path) -> Path | None:
    """The checkpoint a run continues from: "auto" the newest resumable one in `checkpoints` (None when there is
    none), "none" or "" none, anything else the folder it names."""
    if resume == "auto":
        return latest_resumable(checkpoints)
    return Path(resume) if resume not in ("none", "", None) else None


def prune(checkpoints: Path, keep: int, protect: set[Path] = frozenset(), state_newest_only: bool = False) -> list[Path]:
    """Delete all but the newest `keep` checkpoints (never those in `protect`, e.g. the best one). With
    `state_newest_only`, also the trainer state of every one but the newest: a run resumes from its newest
    checkpoint, and F5's state is ~5.4 GB a checkpoint (two fill a free 15 GB Drive); the older ones keep what
    export and speech need."""
    folders = step_folders(checkpoints)
    removed = []
    for _, p in folders[: max(0, len(folders) - keep)]:
        if p.resolve() not in {Path(x).resolve() for x in protect}:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    for _, p in folders[:-1] if state_newest_only else []:
        (p / "trainer_state.pt").unlink(missing_ok=True)
    return removed


def make_room(checkpoints: Path, margin: float = 1.1) -> str:
    """Before a save that writes a trainer state and keeps only the newest (F5: 5.4 GB): when the disk cannot hold
    the new checkpoint beside the previous one's state (the new one is as big as the newest, plus `margin`), that
    state goes first, so two are never on disk (a free 15 GB Drive filled around step 500-1000). Returns what was
    done and kept, for the log ("" when there was room)."""
    folders = step_folders(checkpoints)
    state = folders[-1][1] / "trainer_state.pt" if folders else None
    if state is None or not state.is_file():
        return ""
    needed = margin * sum(f.stat().st_size for f in state.parent.iterdir() if f.is_file())
    free = shutil.disk_usage(checkpoints).free
    if free >= needed:
        return ""
    state.unlink()
    name = state.parent.name
    return (f"disk: {free / 2**30:.1f} GB free and the new checkpoint needs about {needed / 2**30:.1f} GB, so {name}'s "
            f"trainer state was removed before writing it (its weights are kept: should this save fail, a new run "
            f"can start from {name}, though not resume it)")


def read_config(path: str | Path) -> dict:
    path = Path(path)
    try:
        return json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise StudioError(f"{path} is not a checkpoint folder (no config.json).") from exc


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    weights = Path(path) / "model.safetensors"
    if not weights.exists():
        raise StudioError(f"{path} has no model.safetensors.")
    return load_safetensors(weights)


def load_trainer_state(path: Path) -> dict:
    """Raw weights, optimizers, scaler, EMA, data position and counters to resume (no RNG state: see the module
    docstring). Only tensors and plain containers are unpickled."""
    return load_torch_plain(Path(path) / "trainer_state.pt")
