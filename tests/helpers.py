"""Real test audio: Amharic speech from espeak-ng and generated signals."""
from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf

from utils.audio import MODEL_SAMPLE_RATE, load_audio, save_audio
from utils.workspace import Workspace, write_jsonl

FIXTURES = Path(__file__).parent / "fixtures"


def espeak_amharic(text: str, path: Path, voice: str = "am", rate: int = 160) -> Path:
    """Speak Amharic with espeak-ng into a 22.05 kHz mono WAV (voices: am, am+f2, am+m3, ...)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is missing: install the Debian package espeak-ng (the README's test command does).")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([exe, "-v", voice, "-s", str(rate), "-w", str(path), text], check=True, capture_output=True)
    return path


def sentences(n: int | None = None) -> list[str]:
    """Amharic sentences from the project's fixture copy of UD_Amharic-ATT (CC BY-SA 4.0)."""
    lines = [l.strip() for l in (FIXTURES / "amharic_sentences.txt").read_text(encoding="utf-8").splitlines() if l.strip()]
    return lines[:n] if n else lines


def tone(seconds: float, sr: int = 24000, freq: float = 220.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write_wav(path: Path, audio: np.ndarray, sr: int) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), audio, sr)
    return path


def make_dataset(root: Path, name: str = "am", n_train: int = 4, n_val: int = 1, voices=("am",),
                 first: int = 0, max_chars: int = 40) -> Workspace:
    """A dataset folder per the manifest contract, spoken by espeak-ng (short sentences, 24 kHz)."""
    ws = Workspace.open(root)
    ds = ws.dataset_dir(name)
    texts = [s for s in sentences() if len(s) <= max_chars][first: first + n_train + n_val]
    rows = []
    for i, text in enumerate(texts):
        voice = voices[i % len(voices)]
        rid = f"{name}-{i:03d}"
        tmp = espeak_amharic(text, ds / "raw" / f"{rid}.wav", voice=voice, rate=190)
        audio, sr = load_audio(tmp, sample_rate=MODEL_SAMPLE_RATE)
        save_audio(ds / "audio" / f"{rid}.wav", audio, MODEL_SAMPLE_RATE)
        rows.append({"id": rid, "audio": f"audio/{rid}.wav", "text": text, "normalized": text, "phonemes": None,
                     "duration": len(audio) / MODEL_SAMPLE_RATE, "speaker": voice.replace("+", "_"),
                     "split": "train" if i < n_train else "val", "flags": [], "excluded": False,
                     "source": f"raw/{rid}.wav", "sha1": "", "music": None})
    write_jsonl(ds / "manifest.jsonl", rows)
    return ws


@contextmanager
def serve_tab(module, ws: Workspace, label: str = "Tab"):
    """One tab's Blocks served on a free local port; yields a gradio_client to call its api_names."""
    import gradio as gr
    from gradio_client import Client

    from webui.context import AppContext

    with gr.Blocks() as demo:
        with gr.Tab(label):
            module.build(AppContext(workspace=ws))
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        yield Client(demo.local_url, verbose=False)
    finally:
        demo.close()
