"""Export-friendly forward passes for ONNX: every length computed with tensor ops, no Python ints.

`AcousticGraph`: tokens [1, N] -> mel [1, n_mels, T] with a fixed number of Euler steps unrolled
(the ONNX graph cannot take the step count as input without a Loop). `VocoderGraph`: mel -> the
complex spectrum as magnitude and phase; the inverse STFT runs outside (torch.istft has no ONNX op).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from models.decoder import LENGTH_MULTIPLE
from models.matcha import intersperse_blanks
from models.vits_call import vits_settings


class AcousticGraph(nn.Module):
    def __init__(self, model, n_steps: int):
        super().__init__()
        self.model, self.n_steps = model, n_steps

    def forward(self, tokens, speaker, temperature, length_scale):
        """tokens [1, N] int64, speaker [1] int64, temperature [1], length_scale [1] float
        -> (mel [1, n_mels, T] natural-log, mel_length [1] int64: the frames to keep)."""
        m = self.model
        if m.cfg.add_blank:
            tokens = intersperse_blanks(tokens)                                             # [1, 2N + 1]
        mask = torch.ones_like(tokens, dtype=torch.float32)[:, None]                      # [1, 1, N]
        spk = m.spk_emb(speaker) if m.spk_emb is not None else None
        mu, hidden = m.encoder(tokens, mask, spk, None)
        logw = m.duration(hidden, mask)
        dur = torch.clamp(torch.ceil(torch.exp(logw) * length_scale), min=1)[:, 0]        # [1, N] float
        cum = torch.cumsum(dur, 1)
        t_y = cum[:, -1:]                                                                   # [1, 1]
        t_pad = torch.ceil(t_y / LENGTH_MULTIPLE) * LENGTH_MULTIPLE
        frames = torch.arange(t_pad[0, 0].long(), device=tokens.device).float()[None, None]  # [1, 1, T]
        path = ((frames < cum[:, :, None]) & (frames >= (cum - dur)[:, :, None])).float()   # [1, N, T]
        mu_y = torch.einsum("bfn,bnt->bft", mu, path)
        y_mask = (frames < t_y[:, :, None]).float()
        x = torch.randn_like(mu_y) * temperature
        dt = 1.0 / self.n_steps
        for i in range(self.n_steps):
            t = torch.full((1,), i * dt, device=tokens.device)
            x = x + dt * m.decoder.estimator(x, y_mask, mu_y, t, spk, True)
        mel = (x * y_mask) * m.cfg.mel_std + m.cfg.mel_mean
        return mel, t_y[:, 0].long()


class VocoderGraph(nn.Module):
    def __init__(self, vocoder):
        super().__init__()
        self.vocoder = vocoder

    def forward(self, mel):
        """mel [B, n_mels, T] -> (magnitude, phase) [B, n_fft/2+1, T]."""
        head = self.vocoder.head
        h = head.out(self.vocoder.backbone(mel).float()).transpose(1, 2)
        log_mag, phase = h.chunk(2, dim=1)
        return torch.exp(log_mag).clamp(max=head.max_magnitude), phase


class VitsGraph(nn.Module):
    """transformers' VitsModel.forward (an MMS voice) with its noise scales and speed as graph inputs: the model reads
    them from its attributes at call time, so they are set from the inputs there (tensors under the tracer)."""

    def __init__(self, vits):
        super().__init__()
        self.vits = vits

    def forward(self, tokens, noise_scale, noise_scale_duration, length_scale):
        """tokens [1, N] int64 (blanks included), noise scales [1], length_scale [1] float
        -> (waveform [1, samples] at the model's rate, its length [1] int64)."""
        with vits_settings(self.vits, noise_scale=noise_scale, noise_scale_duration=noise_scale_duration,
                           speaking_rate=1.0 / length_scale):
            out = self.vits(input_ids=tokens)
        return out.waveform, out.sequence_lengths
