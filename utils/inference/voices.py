"""Finding what can speak: exported voices, runs' checkpoints, vocoders; loading them once; the device.

A VOICE argument (UI picker, CLI `--voice`) is one of
  - an exported voice's name            -> workspace/voices/<name>/
  - a run's name                        -> that run's best checkpoint (lowest validation MCD), else its newest
  - a checkpoint folder in the workspace -> runs/<run>/checkpoints/step-N (relative or absolute inside it)
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from utils import hardware
from utils.events import StudioError
from utils.vocoder.choice import GRIFFIN_LIM, auto_vocoder, vocoder_source
from utils.voice_folders import (best_checkpoint, checkpoints_of, is_acoustic, is_vocoder, list_voices,
                                 recorded_checkpoint, resolve_voice, run_folders)
from utils.workspace import Workspace, read_json



# ----------------------------------------------------------------------------------- listing
def list_acoustic_checkpoints(ws: Workspace) -> list[str]:
    """Acoustic-model checkpoints under runs/, relative to the workspace (vocoder runs left out)."""
    return [str(p.relative_to(ws.root)) for run in run_folders(ws) for p in checkpoints_of(run) if is_acoustic(p)]


def list_vocoders(ws: Workspace) -> list[str]:
    """Vocoder checkpoints under runs/ (from `train-vocoder`) and vocoders/ (supplied weights)."""
    found = [str(p.relative_to(ws.root)) for run in run_folders(ws) for p in checkpoints_of(run) if is_vocoder(p)]
    supplied = ws.root / "vocoders"
    if supplied.is_dir():
        found += [str(p.relative_to(ws.root)) for p in sorted(supplied.iterdir())
                  if p.is_dir() and (is_vocoder(p) or (p / "pytorch_model.bin").exists())]
    return found


def vocoder_menu(ws: Workspace) -> list[tuple[str, str]]:
    """(label, value) pairs for a vocoder picker, below its "auto" entry: vocoders trained here first (newest
    first), then supplied ones, then the public default, then Griffin-Lim."""
    from utils.vocoder.default import DEFAULT_NAME, default_vocoder

    found = list_vocoders(ws)
    trained = sorted((v for v in found if v.startswith("runs")), key=lambda v: -(ws.root / v).stat().st_mtime)
    supplied = [v for v in found if not v.startswith("runs") and Path(v).name != DEFAULT_NAME]
    menu = [(f"{v} (trained here)", v) for v in trained] + [(v, v) for v in supplied]
    default = default_vocoder(ws)
    if default is not None:
        rel = str(default.relative_to(ws.root))
        menu.append((f"{rel} (public Vocos, MIT licence)", rel))
    return menu + [(f"{GRIFFIN_LIM} (no vocoder: buzzy)", GRIFFIN_LIM)]


def auto_vocoder_label(ws: Workspace) -> str:
    from utils.vocoder.default import default_vocoder

    fallback = "the public Vocos" if default_vocoder(ws) is not None else "Griffin-Lim (buzzy)"
    return f"auto: the voice's own vocoder, else {fallback}"


def own_sound(config: dict) -> str:
    """The vocoder line of a voice whose model makes the waveform itself: none is used, whatever is picked."""
    from utils import families

    family = families.of(config)
    return f"none ({family.TITLE} makes the waveform itself, at {family.SAMPLE_RATE / 1000:g} kHz)"


def vocoder_note(ws: Workspace, voice: str | None, vocoder: str | None) -> str:
    """The line under the Inference pickers, for the vocoder that will speak this voice: the default's licence or
    download (or why it buzzes) only when "auto" falls to it, since a picked or the voice's own vocoder wins."""
    from utils import families
    from utils.vocoder.default import default_dir, status_line

    try:
        folder = resolve_voice(ws, voice) if voice else None
    except StudioError:
        folder = None
    config = (read_json(folder / "config.json", {}) or {}) if folder else {}
    if folder is not None and not families.of(config).USES_VOCODER:
        return f"Vocoder: {own_sound(config)}."
    if vocoder in (None, "", "auto"):
        own = auto_vocoder(ws, folder)
        return "Vocoder: the voice's own (exported with it)." if own is not None and own.parent == folder \
            else status_line(ws)
    if vocoder == GRIFFIN_LIM:
        return "Vocoder: none, as picked: Griffin-Lim makes the sound (buzzy). Pick auto or a vocoder for a clean voice."
    if (ws.root / vocoder).resolve() == default_dir(ws).resolve():
        return status_line(ws)
    where = " (trained here)" if Path(vocoder).parts[:1] == ("runs",) else ""
    return f"Vocoder: {vocoder}{where}, as picked, makes the sound (vocos)."


def voice_choices(ws: Workspace) -> list[tuple[str, str]]:
    """(label, value) pairs for a picker: exported voices, then each run's checkpoints, newest first,
    the best one marked with its MCD."""
    choices = [(f"{name} (exported voice)", name) for name in list_voices(ws)]
    for run in run_folders(ws):
        steps = [p for p in checkpoints_of(run) if is_acoustic(p)]
        if not steps:
            continue
        status = read_json(run / "status.json", {}) or {}
        best = recorded_checkpoint(run, status.get("best_checkpoint"))
        for p in reversed(steps):
            label = f"{run.name} · step {p.name.split('-')[1]}"
            if best is not None and p.name == best.name and status.get("best_mcd") is not None:
                label += f" · best, MCD {float(status['best_mcd']):.2f} dB"
            choices.append((label, str(p.relative_to(ws.root))))
    return choices


def model_of(ws: Workspace, value: str) -> str:
    """The checkpoint a picker's value speaks with: an exported voice's source (config.json), else the value."""
    if "/" in value or not ws.voice_dir(value).is_dir():
        return value
    return ((read_json(ws.voice_dir(value) / "config.json", {}) or {}).get("voice") or {}).get("source") or value


def other_voice(ws: Workspace, a: str | None, values: list[str]) -> str | None:
    """A second voice to compare with `a`: the first of `values` that is another model. An exported voice and the
    checkpoint it came from are one model (A/B started on them spoke the same sound twice); `a` if nothing else."""
    same = model_of(ws, a) if a else None
    return next((v for v in values if v != a and model_of(ws, v) != same), a)


def default_voice(ws: Workspace) -> str | None:
    """The picker's value before the curator picks: the best checkpoint (else the newest) of the run training now;
    else, when a voice was exported after every run's last word, that voice (the curator's own pick); else the run
    whose best checkpoint has the lowest MCD (walk-c's 13.53 dB, written last, came before walk-a's 7.53 dB), else
    the run written last, a run stopped or failed before any evaluation coming last. During a run this follows its
    newest best, where the first value offered used to stay on the run's first, oldest checkpoint."""
    from utils.jobs import ACTIVE

    found = []  # (active, chosen: not a run stopped or failed before any evaluation, when, value, MCD or None)
    for run in run_folders(ws):
        folder = best_checkpoint(ws, run.name)
        if folder is not None:
            status_file = run / "status.json"
            status = read_json(status_file, {}) or {}
            cut_short = status.get("state") in ("stopped", "failed") and status.get("best_mcd") is None
            found.append((status.get("state") in ACTIVE, not cut_short,
                          status_file.stat().st_mtime if status_file.exists() else folder.stat().st_mtime,
                          str(folder.relative_to(ws.root)), status.get("best_mcd")))
    voices = [(False, True, ws.voice_dir(name).stat().st_mtime, name, None) for name in list_voices(ws)]
    if not found + voices:
        return None
    newest = max(found + voices)
    measured = [f for f in found if isinstance(f[4], (int, float))]
    if newest[0] or newest in voices or not measured:
        return newest[3]
    return min(measured, key=lambda f: f[4])[3]


def voice_engine(ws: Workspace, voice: str | None) -> str:
    """The model family of a voice, as its checkpoint says (utils/families.py; checkpoints written before the field
    say nothing and are the default family's): the families' samplers take different steps and settings."""
    from utils import families

    try:
        folder = resolve_voice(ws, voice) if voice else None
    except StudioError:
        return families.DEFAULT
    return families.of((read_json(folder / "config.json", {}) or {}) if folder else {}).NAME


def speakers(ws: Workspace, voice: str) -> list[str]:
    config = read_json(resolve_voice(ws, voice) / "config.json", {}) or {}
    return list(config.get("speakers") or [])


# ------------------------------------------------------------------------------------ device
DEVICES = ("auto", "cpu", "cuda")


def pick_device(ws: Workspace, requested: str = "auto") -> tuple[str, str]:
    """(device, why). `auto` keeps off a GPU that a training run of this workspace holds, so the run keeps
    its memory and speed; `cuda` shares it anyway (inference needs a few hundred MB)."""
    import torch

    from utils import jobs

    requested = (requested or "auto").lower()
    if requested not in DEVICES:
        raise StudioError(f"Device {requested!r}: use one of {', '.join(DEVICES)}.")
    if requested == "cpu" or not hardware.has_cuda():
        return "cpu", "CPU" if requested == "cpu" else "CPU (no GPU here)"
    training = jobs.gpu_runs(ws)
    if requested == "cuda":
        return "cuda", "GPU" + (f", shared with training run {', '.join(training)}" if training else "")
    if not training:
        return "cuda", "GPU"
    free = idle_gpus(ws, torch.cuda.device_count())
    if free:  # a second card no run holds: speech there is as fast, and the run keeps its own
        return f"cuda:{free[0]}", f"GPU {free[0]}: training run {', '.join(training)} holds the other"
    release_gpu_models()  # the models this process keeps on the GPU would sit on memory the run needs
    return "cpu", f"CPU: the GPU is busy with training run {', '.join(training)} (choose GPU to share it)"


def idle_gpus(ws: Workspace, count: int) -> list[int]:
    """The GPUs (0..count-1) that no training run of this workspace holds or waits for (as
    utils.runs.control.pick_devices finds a free one for a run)."""
    from utils import jobs

    return [i for i in range(count) if not jobs.device_busy(ws, f"cuda:{i}")]


def release_gpu_models() -> int:
    """Forget the loaded models that live on the GPU and hand their memory back; returns how many."""
    import torch

    gone = [key for key in _MODELS if ":cuda" in key[0]]  # "acoustic:cuda", "vocoder:cuda:1", ...
    for key in gone:
        del _MODELS[key]
    if gone:
        torch.cuda.empty_cache()
    return len(gone)


# ------------------------------------------------------------------------------ loaded models
_MODELS: OrderedDict[tuple, object] = OrderedDict()  # a few loaded models, keyed by folder + mtime + device
_MODELS_KEPT = 4


def _cached(kind: str, folder: Path, load):
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).exists()), folder)
    key = (kind, str(folder), weights.stat().st_mtime_ns if weights.exists() else 0)
    if key not in _MODELS:
        _MODELS[key] = load()
        while len(_MODELS) > _MODELS_KEPT:
            _MODELS.popitem(last=False)
    _MODELS.move_to_end(key)
    return _MODELS[key]


def load_acoustic(folder: Path, device: str):
    """(model, config) of a checkpoint folder, loaded once per device."""
    from utils import families

    return _cached(f"acoustic:{device}", folder, lambda: families.load(folder, device))


def load_vocoder_for(ws: Workspace, voice_folder: Path, vocoder: str | None, device: str):
    """(model or None for Griffin-Lim, label). None/"auto": see `auto_vocoder`."""
    from utils.vocoder import load_vocoder

    if vocoder in (None, "", "auto"):
        chosen = auto_vocoder(ws, voice_folder)
        if chosen is None:
            return None, GRIFFIN_LIM
        label = "vocos (voice)" if chosen.parent == voice_folder else f"vocos ({chosen.relative_to(ws.root)}, default)"
        return _cached(f"vocoder:{device}", chosen, lambda: load_vocoder(chosen, device)), label
    if vocoder == GRIFFIN_LIM:
        return None, GRIFFIN_LIM
    source = vocoder_source(ws, vocoder)
    return _cached(f"vocoder:{device}", Path(source), lambda: load_vocoder(source, device)), f"vocos ({vocoder})"


def import_vocoder(ws: Workspace, files: list[str | Path], name: str) -> Path:
    """Copy supplied Vocos weights (config.yaml + pytorch_model.bin, or our model.safetensors + config.json)
    into workspace/vocoders/<name>/ after checking that they load; the uploads stay as they were."""
    import shutil

    from utils.vocoder import load_vocoder
    from utils.workspace import check_name

    wanted = {"config.yaml", "pytorch_model.bin", "model.safetensors", "config.json"}
    picked = {Path(f).name: Path(f) for f in files or [] if Path(f).name in wanted}
    if not ({"pytorch_model.bin"} <= picked.keys() or {"model.safetensors", "config.json"} <= picked.keys()):
        raise StudioError("Upload the Vocos files together: config.yaml + pytorch_model.bin (as published), "
                          "or model.safetensors + config.json (from this app). Got: "
                          + (", ".join(Path(f).name for f in files or []) or "nothing") + ".")
    target = ws.root / "vocoders" / check_name(name, "vocoder name")
    if target.exists():
        raise StudioError(f"A vocoder called {name} exists already; pick another name.")
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for fname, path in picked.items():
            shutil.copy2(path, tmp / fname)
        try:
            load_vocoder(tmp)  # refuses what would not load, with its message
        except StudioError as exc:  # said of the files uploaded, not of their copies in a hidden folder
            raise StudioError(str(exc).replace(f"{tmp}/", "the uploaded ").replace(str(tmp), "the upload")) from None
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
