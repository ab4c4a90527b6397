"""Which vocoder speaks, decided here once for the Inference tab, A/B, batch speech, export and a run's
evaluations: "auto" is the voice's own vocoder, else the workspace's default (the public Vocos once fetched,
utils/vocoder/default.py), else Griffin-Lim; a name the curator picked is a folder in the workspace or a hub id;
and a vocoder made for other mel features than the model's is refused (it would turn good mels into noise)."""
from __future__ import annotations

from pathlib import Path

from utils.events import StudioError
from utils.vocoder.default import default_vocoder
from utils.voice_folders import is_vocoder
from utils.workspace import Workspace

GRIFFIN_LIM = "griffin-lim"


def auto_vocoder(ws: Workspace, voice_folder: Path | None = None) -> Path | None:
    """What "auto" means for a voice: its own vocoder, else the workspace default, else None (Griffin-Lim)."""
    if voice_folder is not None and is_vocoder(voice_folder / "vocoder"):
        return voice_folder / "vocoder"
    return default_vocoder(ws)


def resolve(ws: Workspace, name: str) -> str:
    """A vocoder setting with "auto" made concrete for a run's config (a run has no voice folder of its own): the
    default's folder relative to the workspace, else "griffin-lim"; other names pass unchanged."""
    if name != "auto":
        return name
    folder = default_vocoder(ws)
    return str(folder.relative_to(ws.root)) if folder is not None else GRIFFIN_LIM


def vocoder_source(ws: Workspace, vocoder: str) -> Path | str:
    """A vocoder folder/file in the workspace (paths outside it are refused), else a hub id as given."""
    path = Path(vocoder)
    if path.is_absolute() or (ws.root / path).exists():
        return ws.inside(path)
    if path.parts and path.parts[0] in ("vocoders", "runs", "voices"):  # meant the workspace, not the hub
        raise StudioError(f"No vocoder at {ws.root / path}: choose one the workspace lists (Inference tab), "
                          "or add the public Vocos there.")
    return vocoder


def check_features_match(features, vocoder_cfg, model_name: str, vocoder_name: str) -> None:
    """Refuse, naming both, a vocoder whose sample rate, mel count, hop or FFT size differs from the model's."""
    ours = {"sample rate": features.sample_rate, "mels": features.n_mels, "hop": features.hop_length,
            "FFT size": features.n_fft}
    theirs = {"sample rate": vocoder_cfg.sample_rate, "mels": vocoder_cfg.n_mels, "hop": vocoder_cfg.hop_length,
              "FFT size": vocoder_cfg.n_fft}
    diff = [f"{k} {ours[k]} vs {theirs[k]}" for k in ours if ours[k] != theirs[k]]
    if diff:
        raise StudioError(f"{model_name} makes different mel features than the vocoder {vocoder_name} expects "
                          f"({'; '.join(diff)}). Pick a vocoder trained on the same features, or Griffin-Lim.")
