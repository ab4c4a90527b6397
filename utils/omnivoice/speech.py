"""Speaking with OmniVoice: the package's own `generate` (masked iterative decoding of 8 codebooks, then the codec),
in the voice of a reference clip and its transcript (never without the transcript: the package would ask Whisper,
which does not know Amharic). The wrapper gives the studio's Voice (utils/inference) the calls a Matcha model gives
it, so the Inference tab, A/B, batch synthesis, export and `synth --voice` take OmniVoice voices; the Voice splits
long text at Ethiopic punctuation and streams it sentence by sentence.

A voice folder (made from a clip with no training by `make_voice`, or exported from a fine-tune):
    config.json    {"engine": "omnivoice", "model": {"base": FOLDER, "weights": "base" | "own"},
                    "prompt": {"text": ..., "audio": "prompt.wav"}, "features": {"sample_rate": 24000}, ...}
    prompt.wav     the reference clip, 24 kHz mono
    model.safetensors   a fine-tune's weights (weights "own"); the base's tokenizer and codec speak them

<|denoise|> (about.DENOISE): the package's generate puts this mark before the style tokens whenever a reference clip
is given; its recipe trains it only on references it made noisy, and its fine-tuning recipe (ours too) never shows it
the mark. Decided: speak with it, as the package's own recipe does, for clip voices, fine-tunes and a run's
evaluations alike (one place, DENOISE). On the tiny random base the mark changes what is spoken (a test checks it
reaches the model); what it does to quality can only be heard on the released base: a curator's reference clip is
often a phone recording, and the mark asks for clean speech from it.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from utils.events import StudioError
from utils.speaker import WrappedSpeaker
from utils.omnivoice.about import (DENOISE, GOOD_PROMPT_SECONDS, HUB_ID, LANGUAGE, LICENCE, PROMPT_SECONDS,
                                   SAMPLE_RATE, SHORT_LICENCE)

PROMPT_AUDIO = "prompt.wav"
DEFAULT_STEPS = 32            # the package's num_step
_ETHIOPIC_MARKS = {".": "።", ",": "፣", ";": "፤", ":": "፥"}
SENTENCE_ENDS = set("።፧፨?!.…;:,፣፤፥\"'”’)]")  # a transcript ending in one of these gets no other


class OmniVoiceText:
    """The Voice's tokenizer calls for a model that reads text as written: ids are the normalized sentence's code
    points (numbers and abbreviations spelled out by the studio's normalizer, Ethiopic punctuation kept), turned
    back into text for the package's own byte-level tokenizer."""
    kind = "text"
    symbols: list = []

    def units(self, sentence: str, user_dict: dict | None = None) -> list[str]:
        from utils.text import normalize
        from utils.text.ethiopic import is_ethiopic

        text = normalize(sentence).text
        if any(is_ethiopic(c) for c in text):
            text = re.sub(r"[.,;:]", lambda m: _ETHIOPIC_MARKS[m.group()], text)
        return list(text)

    def encode(self, sentence: str, user_dict: dict | None = None) -> list[int]:
        return [ord(c) for c in self.units(sentence, user_dict)] if sentence.strip() else []

    def unknown(self, units: list[str]) -> set:
        return set()  # byte-level: every character reaches the model

    @staticmethod
    def shown(units: list[str]) -> str:
        return "".join(units)


def reference_text(text: str) -> str:
    """A reference clip's transcript read as the voice reads every text (OmniVoiceText: the studio's normaliser,
    Ethiopic punctuation), as the fine-tune reads its clips, ending in a sentence mark: the package's add_punctuation
    knows no "።" and would write an ASCII period after it."""
    said = "".join(OmniVoiceText().units(text)).strip()
    if not said or said[-1] in SENTENCE_ENDS:
        return said
    from utils.text.ethiopic import is_ethiopic

    return said + ("።" if any(is_ethiopic(c) for c in said) else ".")


def clone_prompt(model, wave: np.ndarray, text: str):
    """The package's VoiceClonePrompt of a 24 kHz reference clip, at the level the fine-tune's clips were encoded at
    (tokens.level), and its transcript (reference_text), for speech and for a run's evaluations alike."""
    import torch

    from utils.omnivoice.tokens import level

    prompt = model.create_voice_clone_prompt(ref_audio=(torch.from_numpy(level(wave)), SAMPLE_RATE), ref_text=text)
    prompt.ref_text = reference_text(text)  # over the package's add_punctuation
    return prompt


class OmniVoiceSpeaker(WrappedSpeaker):
    """An omnivoice.OmniVoice with its voice clone prompt (the reference clip's codec tokens and transcript). Steps
    are the package's decoding steps; `temperature` has no meaning here (the package's defaults are kept)."""

    def __init__(self, model, prompt, device: str = "cpu"):
        self.model, self.prompt, self.device = model, prompt, device

    def to(self, device):
        self.device = str(device)
        return super().to(device)

    def synthesise_batch(self, token_lists: list[list[int]], speakers, n_steps: int, temperature: float,
                         length_scale: float, generator=None) -> list[dict]:
        import torch

        from utils.audio import log_mel

        seed = (int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())
                if generator is not None else None)
        texts = ["".join(map(chr, ids)) for ids in token_lists]
        waves = [np.asarray(w, np.float32) for w in self._generate(texts, n_steps, length_scale, seed)]
        if not all(np.isfinite(w).all() for w in waves) and (half := self._half_dtype()):
            print(f"warning: OmniVoice made unusable sound (NaN or Inf) in {half} on this GPU: it speaks in fp32 from "
                  "now on (slower, twice the memory)", flush=True)
            self.model.float()  # once: later sentences speak in fp32 straight away
            waves = [np.asarray(w, np.float32) for w in self._generate(texts, n_steps, length_scale, seed)]
        return [{"wave": w, "mel": log_mel(w)} for w in waves]

    def _generate(self, texts: list[str], n_steps: int, length_scale: float, seed: int | None) -> list:
        """The package's generate, with `seed` fixing its sampling (the same sound again for the same seed)."""
        import torch

        devices = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            return self.model.generate(text=texts, language=[LANGUAGE] * len(texts),
                                       voice_clone_prompt=[self.prompt] * len(texts), num_step=max(1, int(n_steps)),
                                       speed=1.0 / max(0.1, float(length_scale)), denoise=DENOISE)

    def _half_dtype(self) -> str:
        """"fp16" or "bf16" when the model speaks in half precision (a GPU's, utils.hardware.inference_precision),
        else ""."""
        import torch

        dtypes = {p.dtype for p in self.model.parameters()}
        return "fp16" if torch.float16 in dtypes else "bf16" if torch.bfloat16 in dtypes else ""


def read_prompt(path: Path, text: str) -> tuple[np.ndarray, float]:
    """A reference clip at 24 kHz mono and its length, refused (with what to do) when it is too short, too long or
    silent, or has no transcript."""
    from utils.audio import load_audio

    if not (text or "").strip():
        raise StudioError(f"{Path(path).name}: give the clip's transcript too (exactly what is said in it). OmniVoice "
                          "copies a voice from the clip and its words; without them it would guess them with an "
                          "English recognizer.")
    wave, _ = load_audio(path, SAMPLE_RATE)
    seconds = len(wave) / SAMPLE_RATE
    low, high = PROMPT_SECONDS
    if not low <= seconds <= high:
        raise StudioError(f"{Path(path).name} is {seconds:.1f} s long: a reference clip of {GOOD_PROMPT_SECONDS[0]:g}-"
                          f"{GOOD_PROMPT_SECONDS[1]:g} s works best ({low:g}-{high:g} s are taken). Pick another clip "
                          "or cut this one.")
    if float(np.sqrt(np.mean(wave**2))) < 1e-4:
        raise StudioError(f"{Path(path).name} is silent: pick a clip where the speaker talks.")
    return wave, seconds


def voice_prompt(model, folder: Path, config: dict):
    """The package's VoiceClonePrompt of a voice folder's clip and transcript."""
    wave, _ = read_prompt(folder / config["prompt"].get("audio", PROMPT_AUDIO), config["prompt"]["text"])
    return clone_prompt(model, wave, config["prompt"]["text"])


def load_omnivoice(folder: str | Path, device: str = "cpu", gpus: list | None = None):
    """An OmniVoice voice or checkpoint folder -> (OmniVoiceSpeaker in eval mode on `device`, config)."""
    from utils.hardware import inference_precision
    from utils.omnivoice.base import base_of, load_package_model
    from utils.training.checkpoint import load_weights, read_config

    folder = Path(folder)
    config = read_config(folder)
    if "prompt" not in config:
        raise StudioError(f"{folder}: an OmniVoice voice needs its reference clip and transcript; this folder has "
                          "none. Make the voice again on the Inference tab (or export it from its run).")
    own = config["model"].get("weights") == "own"
    model = load_package_model(base_of(folder, config), device, inference_precision(device, gpus),
                               weights=load_weights(folder) if own else None)
    return OmniVoiceSpeaker(model, voice_prompt(model, folder, config), device).eval(), config


def voice_config(base: Path, prompt_text: str, weights: str = "base", source: str = "",
                 root: Path | None = None) -> dict:
    """config.json of a voice or checkpoint; `root`: its workspace, which the base is named relative to."""
    from utils.omnivoice.base import stored_base

    return {"engine": "omnivoice", "kind": "acoustic", "features": {"sample_rate": SAMPLE_RATE},
            "model": {**stored_base(base, root), "hub_id": HUB_ID, "weights": weights},
            "prompt": {"text": reference_text(prompt_text), "typed": prompt_text.strip(), "audio": PROMPT_AUDIO,
                       "source": source},
            "licence": LICENCE, "short_licence": SHORT_LICENCE}


def make_voice(ws, name: str, clip: str | Path, text: str, base: Path, source: str = "") -> Path:
    """A reusable voice from a reference clip and its transcript, with no training: voices/NAME/ holds the clip
    (24 kHz), the transcript, the base it speaks with and both licences. The clip given is only read."""
    from utils.audio import save_audio
    from utils.hub import install_folder
    from utils.workspace import atomic_write_json

    target = ws.voice_dir(name)
    if target.exists():
        raise StudioError(f"A voice called {name} exists already; pick another name.")
    wave, _ = read_prompt(Path(clip), text)

    def fill(tmp: Path) -> None:
        save_audio(tmp / PROMPT_AUDIO, wave, SAMPLE_RATE)
        atomic_write_json(tmp / "config.json", voice_config(base, text, source=source or Path(clip).name,
                                                                root=ws.root))
        (tmp / "LICENSE.txt").write_text(f"This voice speaks with OmniVoice.\n{LICENCE}\n")

    return install_folder(target, fill, lambda p: (p / "config.json").is_file())
