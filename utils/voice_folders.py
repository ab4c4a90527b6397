"""What the folders of a workspace hold: acoustic checkpoints and voices, vocoders, a run's best checkpoint, and what a
VOICE argument names. Below inference, training and the model families, so that each can ask.

A VOICE argument (UI picker, CLI `--voice`, `--init`) is one of
  - an exported voice's name            -> workspace/voices/<name>/
  - a run's name                        -> that run's best checkpoint (lowest validation MCD), else its newest
  - a checkpoint folder in the workspace -> runs/<run>/checkpoints/step-N (relative or absolute inside it)
"""
from __future__ import annotations

import re
from pathlib import Path

from utils.events import StudioError
from utils.jobs import is_check_run
from utils.workspace import Workspace, read_json

STEP_RE = re.compile(r"^step-(\d+)$")  # a checkpoint's folder: runs/<run>/checkpoints/step-N, the one rule


def step_of(folder: Path | str | None) -> int | None:
    """The step of a checkpoint folder (step-N), None for any other path or none."""
    match = STEP_RE.match(Path(folder).name) if folder else None
    return int(match.group(1)) if match else None
DICTIONARY = "pronunciations.tsv"  # an exported voice's copy of the dictionary it was trained and heard with


def voice_dictionary(folder: Path) -> dict[str, list[str]]:
    """The pronunciation dictionary a voice folder carries ({} for a checkpoint, or a voice exported without one):
    what the voice reads with when it is loaded from its folder, outside any workspace."""
    from utils.text.lexicon import read_user_dict

    return read_user_dict(Path(folder) / DICTIONARY)


# ----------------------------------------------------------------------------- what a folder is
def is_acoustic(folder: Path) -> bool:
    """A checkpoint or voice that speaks: its weights beside its config, or a voice that speaks with its base's
    weights as they are (an OmniVoice voice made from a clip, with no training)."""
    config = read_json(folder / "config.json", {}) or {}
    if "model" not in config or config.get("kind") == "vocos":
        return False
    return (folder / "model.safetensors").exists() or (config["model"] or {}).get("weights") == "base"


def is_vocoder(folder: Path) -> bool:
    config = read_json(folder / "config.json", {}) or {}
    return (folder / "model.safetensors").exists() and config.get("kind") == "vocos"


def checkpoints_of(run: Path) -> list[Path]:
    """A run's checkpoint folders, oldest first."""
    ck = run / "checkpoints"
    found = [p for p in ck.iterdir() if p.is_dir() and STEP_RE.match(p.name)] if ck.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def newest_step(run: Path) -> int | None:
    """The step of a run's newest checkpoint, None before its first."""
    found = checkpoints_of(run)
    return step_of(found[-1]) if found else None


def run_folders(ws: Workspace) -> list[Path]:
    """Run folders whose checkpoints are offered (the transcript check's throwaway aligner is not a voice)."""
    found = sorted(p for p in ws.runs.iterdir() if p.is_dir()) if ws.runs.exists() else []
    return [p for p in found if not is_check_run(p)]


def list_voices(ws: Workspace) -> list[str]:
    """The voices of the workspace; a hidden folder is none (an export being written, `.NAME.tmp-export`: the
    Inference tab's timer listed it and said its name could not be used, during every successful export)."""
    if not ws.voices.exists():
        return []
    return sorted(p.name for p in ws.voices.iterdir() if not p.name.startswith(".") and p.is_dir() and is_acoustic(p))


def recorded_checkpoint(run_dir: Path, recorded: str | None) -> Path | None:
    """A checkpoint the run's status.json names, found in the run's own checkpoints folder: the path recorded is where
    the run trained, so a workspace moved or copied (from Drive to the local disk, to another mount) lost its runs'
    best, and the newest (or a checkpoint of the workspace it was copied from) was taken in its place."""
    if not recorded:
        return None
    folder = Path(run_dir) / "checkpoints" / Path(recorded).name
    return folder if is_acoustic(folder) else None


def best_checkpoint(ws: Workspace, run: str) -> Path | None:
    """The run's checkpoint with the lowest validation MCD when it still exists, else its newest."""
    run_dir = ws.run_dir(run)
    best = recorded_checkpoint(run_dir, (read_json(run_dir / "status.json", {}) or {}).get("best_checkpoint"))
    if best is not None:
        return best
    steps = [p for p in checkpoints_of(run_dir) if is_acoustic(p)]
    return steps[-1] if steps else None


def _speaking_runs(ws: Workspace) -> list[str]:
    """The runs a voice can be picked from by name: not the transcript check's throwaway aligner."""
    return [n for n in ws.list_runs() if not is_check_run(ws.run_dir(n))]


def resolve_voice(ws: Workspace, voice: str) -> Path:
    """A voice name, a run name or a checkpoint folder -> the acoustic checkpoint folder."""
    name = (voice or "").strip()
    if not name:
        raise StudioError("Pick a voice or a checkpoint first.")
    plain = "/" not in name and "\\" not in name
    if plain and (ws.voices / name).is_dir():
        folder = ws.voice_dir(name)
    elif plain and (ws.runs / name).is_dir():
        folder = best_checkpoint(ws, name)
        if folder is None:
            raise StudioError(f"Run {name} has no checkpoint yet; it writes one at each evaluation and when stopped.")
    elif Path(name).is_dir() and not ws.holds(name):  # an unzipped export: the studio speaks what it holds
        raise StudioError(f"{name} is outside the workspace: give its zip (Import a voice on the Inference tab, or "
                          f"synth --voice with the .zip), or copy the folder into {ws.voices} and give its name "
                          f"(--voice {Path(name).name}), or load it in Python with Voice.load as its README says.")
    elif name.lower().endswith(".zip"):
        raise StudioError(f"{name} is a voice zip: import it first (Import a voice on the Inference tab; synth "
                          "--voice takes the zip itself).")
    else:
        folder = ws.inside(name)
    if not folder.exists():
        raise StudioError(f"There is no voice, run or checkpoint called {name!r}. Voices: "
                          f"{', '.join(list_voices(ws)) or 'none yet'}; runs: {', '.join(_speaking_runs(ws)) or 'none yet'}.")
    if not folder.is_dir() or not is_acoustic(folder):
        raise StudioError(f"{name} is not an acoustic-model checkpoint (model.safetensors + config.json with "
                          "model and frontend); a vocoder folder goes in the vocoder field instead.")
    return folder
