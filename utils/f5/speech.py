"""Speaking with an F5 voice: the voice's reference clip (its prompt) and transcript come first, the text to say
after; the model fills in the rest in the prompt's voice. The wrapper gives the studio's Voice (utils/inference)
the same calls a Matcha model gives it, so the Inference tab, A/B, batch synthesis, export and `synth --voice`
take F5 voices as they take Matcha ones.

    model, config = load_f5("workspace/runs/RUN/checkpoints/step-N")
    outs = model.synthesise_batch([ids], [0], n_steps=32, temperature=1.0, length_scale=1.0)
    outs[0]["mel"]  # [100, T] natural-log mel (floor 1e-5) -> Vocos
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from utils.events import StudioError
from utils.f5.text import F5Text
from utils.speaker import WrappedSpeaker


class F5Tokenizer:
    """The Voice's tokenizer calls, on an F5 text table."""

    def __init__(self, text: F5Text):
        self.text = text
        self.kind, self.symbols = text.kind, text.symbols
        self.index = {s: i for i, s in enumerate(text.symbols)}

    def units(self, sentence: str, user_dict: dict | None = None) -> list[str]:
        """The pronunciation dictionary counts: the phonemes shown are what is spoken."""
        return self.text.units(sentence, user_dict)

    def encode(self, sentence: str, user_dict: dict | None = None) -> list[int]:
        units = self.units(sentence, user_dict)
        return [self.index[u] for u in units if u in self.index]  # unknown: reported as skipped


class F5Speaker(WrappedSpeaker):
    """An F5 model with its prompt (log-mel [frames, n_mels] + the prompt transcript's ids). On a GPU it speaks under
    bf16 (fp16 where the card has no bf16) autocast: 337 M parameters in fp32 take seconds a sentence on a T4."""

    def __init__(self, model, prompt_mel: torch.Tensor, prompt_tokens: list[int], precision: str = "fp32"):
        self.model, self.prompt_mel, self.prompt_tokens = model, prompt_mel, list(prompt_tokens)
        self.precision = precision  # utils.hardware.inference_precision of the device it runs on

    def autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[self.precision]
        return torch.autocast(device_type=self.prompt_mel.device.type, dtype=dtype)

    def to(self, device):
        self.prompt_mel = self.prompt_mel.to(device)
        return super().to(device)

    @torch.no_grad()
    def synthesise_batch(self, token_lists: list[list[int]], speakers, n_steps: int, temperature: float,
                         length_scale: float, generator=None) -> list[dict]:
        """Each sentence after the prompt; its length from the prompt's speaking rate (frames per symbol) times
        `length_scale`. `temperature` has no F5 meaning (its noise is always unit), `speakers` neither: the
        prompt is the voice."""
        frames = self.prompt_mel.shape[0]
        rate = frames / max(1, len(self.prompt_tokens))
        # drawn on the generator's own device: the Voice makes its generator where the model runs (cuda on a GPU)
        seed = (int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())
                if generator is not None else None)
        outs = []
        for tokens in token_lists:
            text = torch.tensor([self.prompt_tokens + list(tokens)], device=self.prompt_mel.device)
            duration = frames + max(4, int(round(len(tokens) * rate * length_scale)))
            with self.autocast():
                mel = self.model.sample(self.prompt_mel[None], text, duration, steps=max(2, int(n_steps)), seed=seed)
            outs.append({"mel": mel[0, frames:].T.float()})  # [n_mels, T], as a Matcha model gives
        return outs


def load_f5(path: str | Path, device: str = "cpu", gpus: list | None = None) -> tuple[F5Speaker, dict]:
    """An F5 checkpoint or voice folder -> (F5Speaker in eval mode on `device`, config). `gpus`: utils.hardware's
    GPUInfo list that decides the GPU precision (queried when None; tests pass a T4's)."""
    from models.f5 import F5Config, F5TTS
    from utils.hardware import inference_precision
    from utils.f5.base import model_weights
    from utils.training.checkpoint import load_weights, read_config

    config = read_config(path)
    weights = load_weights(path)
    if "prompt.mel" not in weights or "prompt" not in config:
        raise StudioError(f"{path}: an F5 voice needs its reference clip (prompt.mel) and its transcript; this "
                          "folder has none. Export the voice again from its run.")
    model = F5TTS(F5Config.from_dict(config["model"]))
    model.load_state_dict(model_weights(weights))
    speaker = F5Speaker(model, weights["prompt.mel"].float(), config["prompt"]["tokens"],
                        inference_precision(device, gpus))
    return speaker.to(device).eval(), config
