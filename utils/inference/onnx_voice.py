"""Speaking with an exported voice's ONNX files (ONNX Runtime + NumPy; no PyTorch model code).

The text frontend (normalizer, G2P, symbol table from config.json) is this project's; the acoustic
model and the vocoder run in ONNX Runtime; the vocoder's inverse STFT runs in NumPy.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from utils import families
from utils.inference.speech import split_sentences
from utils.onnx_inputs import graph_inputs
from utils.voice_folders import voice_dictionary


def istft(magnitude: np.ndarray, phase: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """[F, T] magnitude and phase -> waveform: Hann-windowed overlap-add, centre-padded like torch.istft."""
    frames = np.fft.irfft(magnitude * np.exp(1j * phase), n=n_fft, axis=0)        # [n_fft, T]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)             # periodic Hann
    n = n_fft + hop * (frames.shape[1] - 1)
    out, norm = np.zeros(n), np.zeros(n)
    for t in range(frames.shape[1]):
        out[t * hop: t * hop + n_fft] += frames[:, t] * window
        norm[t * hop: t * hop + n_fft] += window ** 2
    half = n_fft // 2
    return (out / np.maximum(norm, 1e-11))[half: n - half].astype(np.float32)


class OnnxVoice:
    def __init__(self, folder: str | Path):
        import onnxruntime as ort

        self.folder = Path(folder)
        self.config = json.loads((self.folder / "config.json").read_text(encoding="utf-8"))
        self.tokenizer = families.of(self.config).tokenizer(self.config)  # its family's text frontend
        self.speakers = list(self.config.get("speakers") or [])
        self.user_dict = voice_dictionary(self.folder)  # the pronunciation dictionary it was trained and heard with
        self.features = self.config.get("features") or {}
        providers = ["CPUExecutionProvider"]
        voice = self.folder / "voice.onnx"  # a family whose model makes the waveform (MMS): one graph, ids -> audio
        self.voice = ort.InferenceSession(str(voice), providers=providers) if voice.exists() else None
        if self.voice is not None:
            return
        self.acoustic = ort.InferenceSession(str(self.folder / "acoustic.onnx"), providers=providers)
        vocoder = self.folder / "vocoder.onnx"
        self.vocoder = ort.InferenceSession(str(vocoder), providers=providers) if vocoder.exists() else None

    def synthesize(self, text: str, speaker: str | None = None, temperature: float = 0.667,
                   length_scale: float = 1.0, user_dict: dict | None = None) -> tuple[np.ndarray, int]:
        """Text -> (float32 waveform, sample rate); sentences joined with their pauses. `user_dict`: a pronunciation
        dictionary; None: the one the voice folder carries."""
        user_dict = self.user_dict if user_dict is None else user_dict
        sr = int(self.features.get("sample_rate", 24000))
        spk = np.array([self.speakers.index(speaker) if speaker else 0], np.int64)
        pieces = []
        for sentence in split_sentences(text):
            ids = self.tokenizer.encode(sentence.text, user_dict)
            if not ids:
                continue
            if self.voice is not None:
                wave, length = self.voice.run(None, graph_inputs(self.voice, {
                    "tokens": np.array([ids], np.int64), "noise_scale": np.array([temperature], np.float32),
                    "noise_scale_duration": np.array([self.config["model"].get("noise_scale_duration", 0.8)],
                                                     np.float32), "length_scale": np.array([length_scale], np.float32)}))
                pieces += [wave[0, : int(length[0])], np.zeros(int(sentence.pause_s * sr), np.float32)]
                continue
            mel, length = self.acoustic.run(None, graph_inputs(self.acoustic, {
                "tokens": np.array([ids], np.int64), "speaker": spk,
                "temperature": np.array([temperature], np.float32), "length_scale": np.array([length_scale], np.float32)}))
            mel = mel[0, :, : int(length[0])]
            pieces += [self.vocode(mel), np.zeros(int(sentence.pause_s * sr), np.float32)]
        if not pieces:
            raise ValueError("nothing speakable in the text (it needs Amharic words)")
        return np.concatenate(pieces[:-1]), sr

    def vocode(self, mel: np.ndarray) -> np.ndarray:
        if self.vocoder is None:
            import torch

            from utils.audio import FeatureConfig
            from utils.vocoder import griffin_lim

            return griffin_lim(torch.from_numpy(mel), FeatureConfig.from_dict(self.features))
        magnitude, phase = self.vocoder.run(None, {"mel": mel[None].astype(np.float32)})
        return istft(magnitude[0], phase[0], int(self.features.get("n_fft", 1024)), int(self.features.get("hop_length", 256)))
