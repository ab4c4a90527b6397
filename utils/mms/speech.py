"""Speaking with an MMS voice: transformers' own VitsModel.forward makes the waveform (text encoder, stochastic
durations, flow, HiFi-GAN decoder) at 16 kHz, so a fine-tuned voice speaks exactly as transformers would speak its
weights (tests/test_mms_model.py checks sample for sample). The wrapper gives the studio's Voice (utils/inference)
the calls a Matcha model gives it; its outputs carry the waveform itself ("wave"), which no vocoder touches, and a
log-mel of it for the spectrogram picture.

    model, config = load_mms("workspace/runs/RUN/checkpoints/step-N")
    outs = model.synthesise_batch([ids], [0], n_steps=1, temperature=0.667, length_scale=1.0)
    outs[0]["wave"]  # [samples] at 16 kHz
"""
from __future__ import annotations

from pathlib import Path

import torch

from models.vits_call import vits_settings
from utils.speaker import WrappedSpeaker


@torch.no_grad()
def speak_ids(vits, id_lists: list[list[int]], seed: int | None = None, noise_scale: float | None = None,
              length_scale: float = 1.0) -> list[torch.Tensor]:
    """Token ids (blanks included) -> one waveform [samples] each, padded in one batch through VitsModel.forward.
    `seed`: the noise of the prior and of the durations, drawn from torch's generator seeded with it (forked, so
    the caller's random stream is untouched); `noise_scale`: the prior's (None: the model config's, 0.667)."""
    device = next(vits.parameters()).device
    ids = torch.zeros(len(id_lists), max(len(x) for x in id_lists), dtype=torch.long)
    for i, x in enumerate(id_lists):
        ids[i, : len(x)] = torch.tensor(x)
    mask = (torch.arange(ids.shape[1])[None] < torch.tensor([len(x) for x in id_lists])[:, None]).long()
    devices = [device.index or 0] if device.type == "cuda" else []
    noise = None if noise_scale is None else float(noise_scale)
    with vits_settings(vits, noise_scale=noise, speaking_rate=1.0 / length_scale), \
            torch.random.fork_rng(devices=devices, enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(int(seed))
        out = vits(input_ids=ids.to(device), attention_mask=mask.to(device))
    return [wave[: int(n)].float() for wave, n in zip(out.waveform, out.sequence_lengths)]


class MmsSpeaker(WrappedSpeaker):
    """A VitsModel with the Voice's calls. `temperature` is the prior's noise scale (VITS's noise_scale, 0.667 by
    default as Matcha's temperature); there are no sampler steps (one pass makes the sound)."""

    def __init__(self, vits):
        self.model = self.vits = vits

    def synthesise_batch(self, token_lists: list[list[int]], speakers, n_steps: int, temperature: float,
                         length_scale: float, generator=None) -> list[dict]:
        from utils.mms.data import FEATURES
        from utils.mms.features import log_mel, spectrogram

        seed = (int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())
                if generator is not None else None)
        waves = speak_ids(self.vits, token_lists, seed, temperature, length_scale)
        return [{"wave": w.cpu().numpy(), "mel": log_mel(spectrogram(w, FEATURES), FEATURES)} for w in waves]


def load_mms(path: str | Path, device: str = "cpu") -> tuple[MmsSpeaker, dict]:
    """An MMS checkpoint or voice folder -> (MmsSpeaker in eval mode on `device`, config)."""
    from utils.mms.base import build_generator
    from utils.training.checkpoint import read_config

    config = read_config(path)
    vits = build_generator({"finetune": True, "model": config["model"], "weights": Path(path) / "model.safetensors"})
    return MmsSpeaker(vits).to(device).eval(), config
