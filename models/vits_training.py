"""Training VITS (Kim et al. 2021) on transformers' VitsModel: the forward pass the library leaves out.

VitsModel holds every network VITS trains (text encoder = prior, posterior encoder, normalising flow, stochastic
duration predictor, HiFi-GAN decoder) but runs only inference. Training adds the posterior path:

    linear spectrogram -> posterior encoder -> z ~ q(z|x)           [B, C, T]
    z -> flow -> z_p, scored against the prior of every token       [B, N, T] log-likelihoods
    monotonic alignment search (no gradient) -> hard alignment      [B, N, T]
    durations = frames per token -> duration predictor's loss       (its negative log-likelihood a token)
    prior expanded by the alignment -> KL(q(z|x) || p(z|text))      (per frame)
    a random window of `segment` frames of z -> decoder -> waveform [B, segment * hop]

The waveform window goes to the mel and adversarial losses (utils/training/gan.py). Shapes: B clips, N tokens,
T spectrogram frames, C latent channels (flow_size), H hidden size.
"""
from __future__ import annotations

import contextlib
import importlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.alignment import maximum_path
from models.precision import activation_dtype


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
    search, the duration predictor's flows and the losses stay in fp32, and under fp16 also every network the KL
    term reaches (`kl_networks_in_fp32_under_fp16`)."""
    x_mask = id_mask.unsqueeze(1).float()                             # [B, 1, N]
    y_mask = spec_mask.unsqueeze(1).float()                           # [B, 1, T]
    with amp(), kl_networks_in_fp32_under_fp16(ids.device.type), activations_in_autocast_dtype(vits):
        dtype = activation_dtype(ids.device.type, x_mask.dtype)       # the masks in it keep bf16 activations bf16
        text = vits.text_encoder(input_ids=ids, padding_mask=x_mask.transpose(1, 2).to(dtype), attention_mask=id_mask)
        z, m_q, logs_q = vits.posterior_encoder(spec, y_mask.to(dtype))  # [B, C, T] each
        z_p = vits.flow(z, y_mask.to(dtype))                          # [B, C, T] towards the prior
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


def gated_tanh(input_a, input_b, num_channels):
    """transformers' fused_add_tanh_sigmoid_multiply (the WaveNet gate) as plain eager code: [B, 2H, T] -> [B, H, T]."""
    in_act = input_a + input_b
    return torch.tanh(in_act[:, :num_channels, :]) * torch.sigmoid(in_act[:, num_channels:, :])


@contextlib.contextmanager
def activations_in_autocast_dtype(vits):
    """While it is open, the text encoder's embedding returns autocast's dtype and its LayerNorms their input's, and
    the WaveNets' gate runs eagerly.

    transformers' VitsTextEncoder adds its attention and feed-forward outputs to the embedding's fp32 output, and
    CUDA autocast returns layer_norm in fp32 (CPU autocast in bf16): its residual stream would run, and be saved
    for the backward, in fp32 on a GPU. These hooks (on the library's own modules, which we do not edit) cast the
    embedding to the compute dtype and each norm's fp32 result back after it. Outside autocast they do nothing.
    Some releases of transformers (5.17, seen on an H100; not 5.24) make the gate a TorchScript function, which under
    CUDA autocast returns fp32 from bf16 inputs: the gated activations of every WaveNet layer of the posterior encoder
    and the flow would be fp32. Its eager equivalent, `gated_tanh`, stands in for it while the context is open."""
    library = importlib.import_module(type(vits.posterior_encoder.wavenet).__module__)
    scripted = getattr(library, "fused_add_tanh_sigmoid_multiply", None)
    if isinstance(scripted, torch.jit.ScriptFunction):
        library.fused_add_tanh_sigmoid_multiply = gated_tanh

    def to_compute_dtype(module, inputs, output):
        return output.to(activation_dtype(output.device.type, output.dtype))

    def to_input_dtype(module, inputs, output):
        return output.to(inputs[0].dtype)

    encoder = vits.text_encoder  # prepend: any other hook sees the output the model goes on with
    handles = [encoder.embed_tokens.register_forward_hook(to_compute_dtype, prepend=True)]
    handles += [m.register_forward_hook(to_input_dtype, prepend=True)
                for m in encoder.modules() if isinstance(m, torch.nn.LayerNorm)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        if isinstance(scripted, torch.jit.ScriptFunction):
            library.fused_add_tanh_sigmoid_multiply = scripted


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


@contextlib.contextmanager
def kl_networks_in_fp32_under_fp16(device_type: str):
    """Under fp16 autocast: autocast off (fp32) for the networks the KL term reaches, the text encoder (the prior),
    the posterior encoder and the flow; the decoder and the discriminators, most of a step's work, stay fp16. Under
    bf16 (fp32's range) or fp32 it does nothing.

    The KL's gradient, (z_p - m_p) exp(-2 logs_p) a frame, is far larger than the decoder's: on the tiny random base
    of tests/mms_fixtures.py the text encoder's weights get gradients of 830 and the posterior encoder's 313 where
    the decoder's get 29 (fp32). One loss scale serves them all, and fp16 weight gradients overflow above 65504: with
    the KL's networks in fp16 the scale had to fall to 128 and then 64 (a T4's scaler starts at 65536 and halves
    it at each skipped step: 10 of 30 steps skipped on espeak-ng clips, all 6 of a 6-step run), and a scale that low
    flushes the decoder's small gradients towards zero. A real-size random base (VitsConfig's sizes, KL ~7e5) gets
    gradients of 8e6 there: no loss scale of 1 or more fits. In fp32 their weight gradients cannot overflow, and the
    scale only has to fit the decoder's and the discriminators': 1024 on the tiny base (6 steps skipped, then none),
    2048 on the real-size one."""
    fp16 = torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) == torch.float16
    with torch.autocast(device_type, enabled=False) if fp16 else contextlib.nullcontext():
        yield


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
    """x [B, ..., L] -> the `size`-long window of each row at its start [B, ..., size] (zeros past the end): the
    real audio or mel under the decoder's windows (starts in samples or frames). One gather, read nowhere on the host:
    the starts live on the GPU, and reading them there (a max, a slice per row) stalled the step twice a batch."""
    rows, length = x.shape[0], x.shape[-1]
    flat = x.reshape(rows, -1, length)                                                   # [B, C, L]
    index = starts.to(x.device).long()[:, None] + torch.arange(size, device=x.device)[None]  # [B, size]
    inside = (index < length).to(x.dtype)[:, None, :]
    picked = torch.gather(flat, 2, index.clamp(max=length - 1)[:, None, :].expand(-1, flat.shape[1], -1))
    return (picked * inside).reshape(*x.shape[:-1], size)
