"""Checkpoint folders: `model.safetensors` + `config.json` (+ `trainer_state.pt` to resume).

    checkpoints/step-N/model.safetensors   inference weights (the EMA weights when EMA is on)
    checkpoints/step-N/config.json         {"model": sizes, "frontend": symbols, "speakers": [...],
                                            "features": FeatureConfig, "step": N, "train": TrainConfig, ...}
    checkpoints/step-N/trainer_state.pt    raw weights, optimizers, scaler, EMA, data position, counters

No random generator state is saved: the engine reseeds every rank's stream from (seed, rank, step) at each step,
so a resume on any rank continues the same noise without one.

A folder is written under a temporary name and renamed, so a crash or kill -9 never leaves a half
checkpoint behind (the temporary leftovers of a killed writer are cleared by `recover` at the next
start). Loading weights never unpickles: safetensors + JSON; trainer_state.pt is read with
torch.load(weights_only=True), and a file that would run code when unpickled is refused.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterable, Iterator

import torch
from safetensors.torch import save

from models.matcha import MatchaConfig, MatchaTTS
from utils.events import StudioError
from utils.safeload import load_safetensors, load_torch_plain

STEP_RE = re.compile(r"^step-(\d+)$")
LEFTOVER_RE = re.compile(r"^\.(step-\d+)\.(tmp|old)-(\d+)$")  # what a writer killed mid-save leaves


def save_checkpoint(folder: Path, weights: dict[str, torch.Tensor], config: dict,
                    trainer_state: dict | None = None) -> Path:
    """Write a checkpoint folder atomically: its files (weights first), then the rename."""
    return write_atomically(folder, checkpoint_files(weights, config, trainer_state))


def checkpoint_files(weights: dict[str, torch.Tensor], config: dict,
                     trainer_state: dict | None = None) -> Iterator[tuple[str, bytes | memoryview]]:
    """(file name, bytes) of a checkpoint in the order they are written, each made when the writer asks for it: a
    wrapper can act between two files (utils/training/faults.py pauses a save there, half written). Serialized in
    memory and written by plain file calls: a full disk is then an OSError(ENOSPC) the trainer can name, not a
    library's own error text."""
    yield "model.safetensors", save({k: v.detach().float().contiguous().cpu() for k, v in weights.items()})
    yield "config.json", (json.dumps(config, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    if trainer_state is not None:
        buffer = io.BytesIO()
        torch.save(trainer_state, buffer)
        yield "trainer_state.pt", buffer.getbuffer()


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
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename makes the folder visible


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


def prune(checkpoints: Path, keep: int, protect: set[Path] = frozenset()) -> list[Path]:
    """Delete all but the newest `keep` checkpoints (never those in `protect`, e.g. the best one)."""
    folders = step_folders(checkpoints)
    removed = []
    for _, p in folders[: max(0, len(folders) - keep)]:
        if p.resolve() not in {Path(x).resolve() for x in protect}:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def read_config(path: str | Path) -> dict:
    path = Path(path)
    try:
        return json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise StudioError(f"{path} is not a checkpoint folder (no config.json).") from exc


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[MatchaTTS, dict]:
    """Checkpoint folder -> (MatchaTTS in eval mode on `device`, config dict).

    config["frontend"] = {"kind", "symbols": list (index = token id, 0 = padding), ...},
    config["speakers"] = list of speaker names (index = speaker id), config["features"] = FeatureConfig dict,
    config["model"] = MatchaConfig dict (incl. mel_mean / mel_std). Synthesis:

        model, config = load_checkpoint("workspace/runs/r/checkpoints/step-1000")
        out = model.synthesise(token_ids, speaker=config["speakers"].index("am"), n_steps=10,
                               temperature=0.667, length_scale=1.0)
        out["mel"]  # [1, 100, T] denormalised natural-log mel -> utils.vocoder.griffin_lim / Vocos
    """
    path = Path(path)
    config = read_config(path)
    weights = path / "model.safetensors"
    if not weights.exists():
        raise StudioError(f"{path} has no model.safetensors.")
    if config.get("engine") == "f5":  # the same calls, spoken through the voice's reference clip
        from utils.f5.speech import load_f5

        return load_f5(path, device)
    model = MatchaTTS(MatchaConfig.from_dict(config["model"]))
    state = load_safetensors(weights)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise StudioError(f"{path}: weights do not match config.json (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    return model.to(device).eval(), config


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    weights = Path(path) / "model.safetensors"
    if not weights.exists():
        raise StudioError(f"{path} has no model.safetensors.")
    return load_safetensors(weights)


def load_trainer_state(path: Path) -> dict:
    """Raw weights, optimizers, scaler, EMA, data position and counters to resume (no RNG state: see the module
    docstring). Only tensors and plain containers are unpickled."""
    return load_torch_plain(Path(path) / "trainer_state.pt")
