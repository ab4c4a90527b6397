"""Speaking text with a trained voice, and exporting a checkpoint as a voice.

    from utils.inference import synthesize, export_voice
    wave, sr, info = synthesize(ws, "my-voice", "ሰላም ነው። እንዴት ነህ?")
    export_voice(ws, "runs/r1/checkpoints/step-2000", "my-voice", vocoder="runs/r1-vocoder/checkpoints/step-500")

Text -> normalizer + G2P/tokenizer stored in the checkpoint (`config["frontend"]["tokenizer"]`), with the
workspace's pronunciation dictionary -> acoustic model (`utils.training.load_checkpoint`,
`model.synthesise`) -> log-mel -> the voice's Vocos vocoder, or Griffin-Lim when it has none.
Long text is spoken sentence by sentence (split at ። ? ! ፧ ፨ and line breaks) and joined with a pause.

A voice is a folder `workspace/voices/<name>/` holding the acoustic checkpoint as it was
(`model.safetensors` + `config.json`, plus a "voice" section) and, when given, `vocoder/`
(`model.safetensors` + `config.json`, always our format): everything it needs, nothing outside.
"""
from __future__ import annotations

import re
import shutil
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_json, read_json

GRIFFIN_LIM = "griffin-lim"
DEFAULT_STEPS = 10              # Euler steps of the flow (Matcha CLI default)
DEFAULT_TEMPERATURE = 0.667     # scale of the starting noise (Matcha CLI default)
SENTENCE_PAUSE_S = 0.25         # silence between sentences of a long text
MAX_CHARS = 5000                # one request; longer text is refused with a message

SAMPLE_SENTENCES = [
    "ሰላም ነው። እንዴት ነህ?",
    "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።",
    "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።",
    "መጽሐፉን አንብቤ ጨረስኩት።",
    "በ፲፱፻፹፯ ዓ.ም የተወለደው ልጅ ዶ/ር ሆነ።",
]

# An Ethiopic full stop / question mark / paragraph mark, ?, !, a line break, or a "." that does not
# sit between digits (3.5) or inside an abbreviation (ዓ.ም: no space follows) ends a sentence.
_SENTENCE_END = re.compile(r"(?<=[።፧፨?!])\s*|\n+|(?<=\.)\s+")


# --------------------------------------------------------------------------- finding models
def _is_acoustic(folder: Path) -> bool:
    config = read_json(folder / "config.json", {}) or {}
    return (folder / "model.safetensors").exists() and "model" in config and "frontend" in config


def _is_vocoder(folder: Path) -> bool:
    config = read_json(folder / "config.json", {}) or {}
    return (folder / "model.safetensors").exists() and config.get("kind") == "vocos"


def _step_folders(ws: Workspace) -> list[Path]:
    found = []
    for run in sorted(ws.runs.iterdir()) if ws.runs.exists() else []:
        ck = run / "checkpoints"
        if ck.is_dir():
            steps = [p for p in ck.iterdir() if p.is_dir() and re.match(r"^step-\d+$", p.name)]
            found += sorted(steps, key=lambda p: int(p.name.split("-")[1]))
    return found


def list_voices(ws: Workspace) -> list[str]:
    return sorted(p.name for p in ws.voices.iterdir() if p.is_dir() and _is_acoustic(p)) if ws.voices.exists() else []


def list_acoustic_checkpoints(ws: Workspace) -> list[str]:
    """Acoustic-model checkpoints under runs/, relative to the workspace (vocoder runs left out)."""
    return [str(p.relative_to(ws.root)) for p in _step_folders(ws) if _is_acoustic(p)]


def list_vocoders(ws: Workspace) -> list[str]:
    """Vocoder checkpoints under runs/ (from `train-vocoder`), relative to the workspace."""
    return [str(p.relative_to(ws.root)) for p in _step_folders(ws) if _is_vocoder(p)]


def voice_choices(ws: Workspace) -> list[str]:
    """What the Inference tab offers: exported voices by name, then run checkpoints by path."""
    return list_voices(ws) + list_acoustic_checkpoints(ws)


def resolve_voice(ws: Workspace, voice_or_checkpoint: str) -> Path:
    """A voice name or a checkpoint folder (relative to the workspace, or absolute inside it)."""
    name = (voice_or_checkpoint or "").strip()
    if not name:
        raise StudioError("Pick a voice or a checkpoint first.")
    if "/" not in name and "\\" not in name and (ws.voices / name).is_dir():
        folder = ws.voice_dir(name)
    else:
        folder = ws.inside(name)
    if not folder.exists():
        raise StudioError(f"There is no voice or checkpoint called {name!r}. Voices: "
                          f"{', '.join(list_voices(ws)) or 'none yet'}.")
    if not _is_acoustic(folder):
        raise StudioError(f"{name} is not an acoustic-model checkpoint (model.safetensors + config.json with "
                          "model and frontend); a vocoder folder goes in the vocoder field instead.")
    return folder


def speakers(ws: Workspace, voice_or_checkpoint: str) -> list[str]:
    config = read_json(resolve_voice(ws, voice_or_checkpoint) / "config.json", {}) or {}
    return list(config.get("speakers") or [])


# --------------------------------------------------------------------------- loaded models
_MODELS: OrderedDict[tuple, object] = OrderedDict()  # a few loaded models, keyed by folder + mtime
_MODELS_KEPT = 4


def _cached(kind: str, folder: Path, load):
    weights = folder / "model.safetensors" if folder.is_dir() else folder
    key = (kind, str(folder), weights.stat().st_mtime_ns if weights.exists() else 0)
    if key not in _MODELS:
        _MODELS[key] = load()
        while len(_MODELS) > _MODELS_KEPT:
            _MODELS.popitem(last=False)
    _MODELS.move_to_end(key)
    return _MODELS[key]


def _device() -> str:
    try:
        from utils.hardware import device

        return device()
    except Exception:  # hardware detection must never block speaking
        return "cpu"


def _load_acoustic(folder: Path, device: str):
    from utils.training import load_checkpoint

    return _cached(f"acoustic:{device}", folder, lambda: load_checkpoint(folder, device=device))


def _load_vocoder(ws: Workspace, voice_folder: Path, vocoder: str | None, device: str):
    """(model or None for Griffin-Lim, label). None = the voice's own vocoder if it has one."""
    from utils.vocoder import load_vocoder

    if vocoder is None or vocoder in ("", "auto"):
        own = voice_folder / "vocoder"
        if _is_vocoder(own):
            return _cached(f"vocoder:{device}", own, lambda: load_vocoder(own, device)), "vocos (voice)"
        return None, GRIFFIN_LIM
    if vocoder == GRIFFIN_LIM:
        return None, GRIFFIN_LIM
    source = vocoder_source(ws, vocoder)
    return _cached(f"vocoder:{device}", Path(source), lambda: load_vocoder(source, device)), f"vocos ({vocoder})"


def vocoder_source(ws: Workspace, vocoder: str) -> Path | str:
    """A vocoder folder/file in the workspace (paths outside it are refused), else a hub id as given."""
    path = Path(vocoder)
    if path.is_absolute() or (ws.root / path).exists():
        return ws.inside(path)
    return vocoder


# ---------------------------------------------------------------------------------- speaking
def split_sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_END.split(text or "")]
    return [p for p in parts if p and re.search(r"\w", p)]


def synthesize(ws: Workspace, voice_or_checkpoint: str, text: str, speaker: str | None = None,
               steps: int = DEFAULT_STEPS, temperature: float = DEFAULT_TEMPERATURE, length_scale: float = 1.0,
               vocoder: str | None = None, seed: int | None = 0) -> tuple[np.ndarray, int, dict]:
    """Amharic text -> (float32 waveform, sample rate, info).

    voice_or_checkpoint: an exported voice's name or a checkpoint folder in the workspace.
    speaker: a speaker name of that checkpoint (default: its first).
    steps / temperature / length_scale: flow steps, noise scale, duration scale (>1 slower).
    vocoder: None = the voice's own, else Griffin-Lim; "griffin-lim"; or a vocoder folder / hub id.
    seed: fixes the starting noise so the same request sounds the same (None: random).
    """
    import torch

    from utils.text import load_user_dict, normalize
    from utils.text.tokenizers import Tokenizer
    from utils.vocoder import griffin_lim, vocode

    if not (text or "").strip():
        raise StudioError("Type some Amharic text to speak.")
    if len(text) > MAX_CHARS:
        raise StudioError(f"The text is {len(text)} characters; speak at most {MAX_CHARS} at a time.")
    if not 1 <= int(steps) <= 100:
        raise StudioError("Steps must be between 1 and 100.")
    if not 0.1 <= float(length_scale) <= 5:
        raise StudioError("The speed must be between 0.2x and 10x (length scale 0.1-5).")
    start = time.perf_counter()
    folder = resolve_voice(ws, voice_or_checkpoint)
    device = _device()
    model, config = _load_acoustic(folder, device)
    voc, voc_label = _load_vocoder(ws, folder, vocoder, device)
    frontend = config.get("frontend") or {}
    tokenizer = Tokenizer.from_dict(frontend.get("tokenizer", frontend))
    names = list(config.get("speakers") or [])
    if speaker in (None, "") or not names:
        spk = 0
    elif speaker in names:
        spk = names.index(speaker)
    else:
        raise StudioError(f"Speaker {speaker!r} is not in this voice; it has {', '.join(names)}.")
    from utils.audio import FeatureConfig

    features = FeatureConfig.from_dict(config.get("features") or {})
    user_dict = load_user_dict(ws)
    loaded = time.perf_counter()  # RTF counts synthesis only; loading (first call) is reported apart
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(int(seed))

    pieces, warnings, n_tokens, n_frames = [], [], 0, 0
    pause = np.zeros(int(SENTENCE_PAUSE_S * features.sample_rate), np.float32)
    sentences = split_sentences(text)
    for sentence in sentences:
        warnings += normalize(sentence).warnings
        ids = tokenizer.encode(sentence, user_dict)
        if not ids:
            warnings.append(f"nothing speakable in {sentence[:40]!r} (no symbol this voice knows); skipped")
            continue
        out = model.synthesise(ids, speaker=spk, n_steps=int(steps), temperature=float(temperature),
                               length_scale=float(length_scale), generator=generator)
        mel = out["mel"][0].float()                                       # [n_mels, T]
        wave = vocode(voc, mel) if voc is not None else griffin_lim(mel.cpu(), features)
        pieces += [wave.astype(np.float32), pause]
        n_tokens, n_frames = n_tokens + len(ids), n_frames + mel.shape[-1]
    if not pieces:
        raise StudioError("Nothing in the text could be spoken by this voice: "
                          + ("; ".join(warnings[:3]) or "it holds no words."))
    wave = np.concatenate(pieces[:-1])
    peak = float(np.abs(wave).max())
    if peak > 0.99:  # Griffin-Lim or an undertrained model can overshoot: scale rather than clip
        wave = wave * (0.99 / peak)
    seconds = time.perf_counter() - loaded
    duration = len(wave) / features.sample_rate
    info = {"duration_s": duration, "seconds": seconds, "rtf": seconds / max(duration, 1e-9),
            "load_s": loaded - start,
            "sample_rate": features.sample_rate, "vocoder": voc_label, "voice": voice_or_checkpoint,
            "speaker": names[spk] if names else None, "sentences": len(sentences), "tokens": n_tokens,
            "frames": n_frames, "steps": int(steps), "temperature": float(temperature),
            "length_scale": float(length_scale), "device": device, "warnings": warnings}
    return wave.astype(np.float32), features.sample_rate, info


def describe(info: dict) -> str:
    """One readable paragraph for the UI and the CLI."""
    text = (f"{info['duration_s']:.2f} s of audio in {info['seconds']:.2f} s (RTF {info['rtf']:.3f}, "
            f"{info['device']}; loading {info['load_s']:.2f} s); {info['sentences']} sentence(s), {info['tokens']} symbols, "
            f"vocoder: {info['vocoder']}" + (f", speaker {info['speaker']}" if info.get("speaker") else ""))
    if info.get("warnings"):
        text += "\n\n" + "\n".join(f"- {w}" for w in info["warnings"][:10])
    return text


# ---------------------------------------------------------------------------------- exporting
def export_voice(ws: Workspace, run_checkpoint: str, voice_name: str, vocoder: str | None = None,
                 overwrite: bool = False) -> Path:
    """Copy an acoustic checkpoint (and a vocoder, stored in our safetensors format) into voices/<name>/."""
    from utils.vocoder import load_vocoder, save_vocoder

    source = ws.inside(run_checkpoint)
    if not _is_acoustic(source):
        raise StudioError(f"{run_checkpoint} is not an acoustic-model checkpoint folder.")
    target = ws.voice_dir(voice_name)
    if target.exists() and not overwrite:
        raise StudioError(f"A voice called {voice_name} exists already; pick another name or overwrite it.")
    tmp = target.with_name(f".{target.name}.tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shutil.copy2(source / "model.safetensors", tmp / "model.safetensors")
        config = read_json(source / "config.json")
        vocoder_label = None
        if vocoder and vocoder not in ("auto", GRIFFIN_LIM):
            voc = load_vocoder(vocoder_source(ws, vocoder))
            save_vocoder(voc, tmp / "vocoder", source=str(vocoder))
            vocoder_label = str(vocoder)
        config["voice"] = {"name": voice_name, "source": str(source.relative_to(ws.root)),
                           "vocoder": "vocoder" if vocoder_label else None, "vocoder_source": vocoder_label,
                           "exported": time.strftime("%Y-%m-%d %H:%M:%S")}
        atomic_write_json(tmp / "config.json", config)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
