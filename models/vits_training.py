"""Training VITS (Kim et al. 2021) on transformers' VitsModel: the forward pass the library leaves out.

VitsModel holds every network VITS trains (text encoder = prior, posterior encoder, normalising flow, stochastic
duration predictor, HiFi-GAN decoder) but runs only inference. Training adds the posterior path:

    linear spectrogram -> posterior encoder -> z ~ q(z|x)           [B, C, T]
    z -> flow -> z_p, scored against the prior of every token       [B, N, T] log-likelihoods
    monotonic alignment search (no gradient) -> hard alignment      [B, N, T]
    durations = frames per token -> duration predictor's loss       (its negative log-likelihood a token)
    prior expanded by the alignment -> KL(q(z|x) || p(z|text))      (per frame)
    a random window of `segment` frames of z -> decoder -> waveform [B, segment * hop]

The waveform window goes to the mel and adversarial losses (utils/mms/losses.py). Shapes: B clips, N tokens,
T spectrogram frames, C latent channels (flow_size), H hidden size.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.alignment import maximum_path


@dataclass
class TrainingForward:
    wave: torch.Tensor      # [B, segment * hop] the decoder's waveform of each clip's window (fp32)
    starts: torch.Tensor    # [B] the window's first spectrogram frame
    kl: torch.Tensor        # KL divergence a frame (VITS's L_kl)
    duration: torch.Tensor  # the duration predictor's loss a token (VITS's L_dur)


def training_forward(vits, ids: torch.Tensor, id_mask: torch.Tensor, spec: torch.Tensor, spec_mask: torch.Tensor,
                     segment: int, mas: str = "auto", amp=contextlib.nullcontext) -> TrainingForward:
    """ids [B, N] (blanks included), id_mask [B, N] and spec_mask [B, T] (1 on real positions), spec [B, bins, T]
    (linear magnitudes). `amp()`: the mixed-precision context for the convolutional networks; the alignment
    search, the duration predictor's flows and the losses stay in fp32."""
    x_mask = id_mask.unsqueeze(1).float()                             # [B, 1, N]
    y_mask = spec_mask.unsqueeze(1).float()                           # [B, 1, T]
    with amp():
        text = vits.text_encoder(input_ids=ids, padding_mask=x_mask.transpose(1, 2), attention_mask=id_mask)
        z, m_q, logs_q = vits.posterior_encoder(spec, y_mask)        # [B, C, T] each
        z_p = vits.flow(z, y_mask)                                    # [B, C, T] towards the prior
    hidden = text.last_hidden_state.transpose(1, 2).float()          # [B, H, N]
    m_p = text.prior_means.transpose(1, 2).float()                    # [B, C, N]
    logs_p = text.prior_log_variances.transpose(1, 2).float()         # [B, C, N] (log standard deviations)
    z, m_q, logs_q, z_p = z.float(), m_q.float(), logs_q.float(), z_p.float()

    with torch.no_grad():
        attn = maximum_path(prior_log_likelihood(z_p, m_p, logs_p), x_mask.transpose(1, 2) * y_mask, mas)  # [B,N,T]
    durations = attn.sum(2).unsqueeze(1)                              # [B, 1, N] frames a token
    duration = duration_loss(vits, hidden, x_mask, durations).sum() / x_mask.sum()

    m_p, logs_p = m_p @ attn, logs_p @ attn                           # [B, C, T] the prior of each frame
    kl = kl_divergence(z_p, logs_q, m_p, logs_p, y_mask)

    z_window, starts = random_windows(z, spec_mask.sum(1), segment)  # [B, C, segment]
    with amp():
        wave = vits.decoder(z_window).squeeze(1)                      # [B, segment * hop]
    return TrainingForward(wave.float(), starts, kl, duration)


def prior_log_likelihood(z_p: torch.Tensor, m_p: torch.Tensor, logs_p: torch.Tensor) -> torch.Tensor:
    """log N(z_p[:, :, t]; m_p[:, :, n], exp(logs_p[:, :, n])) summed over channels -> [B, N, T], as four matmuls
    (the expansion of the Gaussian's exponent) rather than a [B, C, N, T] tensor."""
    inv_var = torch.exp(-2 * logs_p)                                                   # [B, C, N]
    const = torch.sum(-0.5 * math.log(2 * math.pi) - logs_p, 1).unsqueeze(2)          # [B, N, 1]
    quad = (-0.5 * inv_var).transpose(1, 2) @ (z_p ** 2)                               # [B, N, T]
    cross = (m_p * inv_var).transpose(1, 2) @ z_p                                      # [B, N, T]
    mean_sq = torch.sum(-0.5 * m_p ** 2 * inv_var, 1).unsqueeze(2)                    # [B, N, 1]
    return const + quad + cross + mean_sq


def duration_loss(vits, hidden: torch.Tensor, x_mask: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
    """[B]: the stochastic duration predictor's negative log-likelihood bound of the durations (the MMS checkpoints'
    predictor), or the deterministic one's squared error of log durations. Always fp32: the rational-quadratic
    spline flows are sensitive to rounding."""
    with torch.autocast(hidden.device.type, enabled=False):
        if vits.config.use_stochastic_duration_prediction:
            return vits.duration_predictor(hidden, x_mask, durations=durations)
        predicted = vits.duration_predictor(hidden, x_mask)                            # [B, 1, N] log durations
        target = torch.log(durations + 1e-6) * x_mask
        return torch.sum((predicted - target) ** 2, [1, 2])


def kl_divergence(z_p, logs_q, m_p, logs_p, y_mask) -> torch.Tensor:
    """KL(q || p) at the posterior's sample z_p, summed over channels, averaged over frames (VITS eq. 4)."""
    kl = logs_p - logs_q - 0.5 + 0.5 * (z_p - m_p) ** 2 * torch.exp(-2.0 * logs_p)
    return torch.sum(kl * y_mask) / torch.sum(y_mask)


def random_windows(z: torch.Tensor, lengths: torch.Tensor, segment: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A window of `segment` frames of each clip at a random start within its length (clips shorter than a window
    start at 0, padded with zeros): ([B, C, segment], starts [B])."""
    if z.shape[-1] < segment:
        z = F.pad(z, (0, segment - z.shape[-1]))
    room = (lengths - segment + 1).clamp(min=1)                       # [B] possible starts
    starts = (torch.rand(len(lengths), device=z.device) * room).long()
    index = starts[:, None] + torch.arange(segment, device=z.device)[None]            # [B, segment]
    return torch.gather(z, 2, index[:, None, :].expand(-1, z.shape[1], -1)), starts


def windows(x: torch.Tensor, starts: torch.Tensor, size: int) -> torch.Tensor:
    """x [B, ..., L] -> the `size`-long window of each row at its start [B, ..., size] (zero-padded past the end):
    the real audio or mel under the decoder's windows (starts in samples or frames)."""
    if x.shape[-1] < int(starts.max()) + size:
        x = F.pad(x, (0, int(starts.max()) + size - x.shape[-1]))
    return torch.stack([row[..., int(s): int(s) + size] for row, s in zip(x, starts)])
