"""The MMS engine under fp16 (a T4's precision: autocast and the gradient scaler), on the CPU, whose fp16 autocast
runs the same forward: the networks the KL term reaches run fp32 (models/vits_training.py,
kl_networks_in_fp32_under_fp16), so that a loss scale the decoder's gradients fit is one every gradient fits."""
from __future__ import annotations

import functools
import math
import types

import pytest
import torch

from tests.mms_fixtures import TINY_DISCRIMINATOR, tiny_base

KL_NETWORKS = ("text_encoder", "posterior_encoder", "flow")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_base(tmp_path_factory.mktemp("mms") / "base")


def speech_like_batch(vocab: int) -> dict:
    """Two clips of a harmonic buzz (a voice's spectrum, not noise's) and random letters, as the data loader gives."""
    from utils.mms.data import FEATURES, collate
    from utils.mms.features import spectrogram

    g, items = torch.Generator().manual_seed(0), []
    for n, frames in ((20, 60), (25, 70)):
        t = torch.arange(frames * FEATURES.hop_length) / FEATURES.sample_rate
        f0 = 120 + 40 * torch.rand(1, generator=g, device=g.device)
        wave = 0.3 * sum(torch.sin(2 * math.pi * f0 * k * t) / k for k in range(1, 8))
        wave = wave + 0.01 * torch.randn(len(t), generator=g, device=g.device)
        items.append({"ids": torch.randint(0, vocab, (n,), generator=g, device=g.device), "wave": wave,
                      "spec": spectrogram(wave, FEATURES), "pos": (0, 0)})
    return collate(items)


def generator_gradients(base, scale: float) -> tuple[dict, dict]:
    """The loop's MMS step under CPU fp16 autocast, up to the generator's backward of its loss times `scale` (what
    GradScaler does): ({part: every gradient finite}, {module: its output's dtype})."""
    from models.vits_discriminator import VitsDiscriminator
    from utils.mms.adapter import MmsAdapter
    from utils.mms.base import build_generator, describe_base

    torch.manual_seed(0)
    gen = build_generator(describe_base(base)).train()
    adapter = object.__new__(MmsAdapter)  # its step's methods only: no workspace, no data loader
    adapter.__dict__.update(gen=gen, disc=VitsDiscriminator(**TINY_DISCRIMINATOR).train(), cached=None,
                            machine=types.SimpleNamespace(mas="cython"),
                            ctx=types.SimpleNamespace(device="cpu", autocast=functools.partial(
                                torch.autocast, "cpu", dtype=torch.float16)))
    dtypes = {}

    def note_dtype(name, module, inputs, out):
        dtypes[name] = (out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)).dtype

    for name in (*KL_NETWORKS, "decoder"):
        getattr(gen, name).register_forward_hook(functools.partial(note_dtype, name))
    batch = speech_like_batch(gen.config.vocab_size)
    adapter.losses(batch, "discriminator", 0)  # runs and keeps the generator's forward, as in a step
    losses = adapter.losses(batch, "generator", 0)
    assert torch.isfinite(losses["loss"])
    (losses["loss"] * scale).backward()
    finite = {name: all(torch.isfinite(p.grad).all() for p in getattr(gen, name).parameters() if p.grad is not None)
              for name in (*KL_NETWORKS, "decoder", "duration_predictor")}
    return finite, dtypes


def test_under_fp16_the_networks_the_kl_reaches_run_fp32_and_a_scale_the_decoder_fits_fits_every_gradient(base):
    """The KL's gradients on the tiny random base are ~30x the decoder's: with those networks in fp16 they overflowed
    (weight gradients above 65504) at every loss scale above 128, so a T4's scaler, halving from 65536, skipped
    every step of a short run. In fp32 they fit at the scaler's 65536, and at 2048 the decoder's fit too."""
    finite, dtypes = generator_gradients(base, 2048.0)
    assert all(finite.values()), finite
    assert {n: dtypes[n] for n in KL_NETWORKS} == dict.fromkeys(KL_NETWORKS, torch.float32)
    assert dtypes["decoder"] == torch.float16  # not the whole model: the decoder (most of the work) stays fp16
    finite, _ = generator_gradients(base, 65536.0)
    assert all(finite[n] for n in KL_NETWORKS), finite  # only the decoder's may overflow there: the scale calibrates
