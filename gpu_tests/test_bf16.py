"""bf16 that pays (issue 42): under CUDA bf16 autocast the three models' activations stay bf16, checked on a real GPU.

CUDA autocast returns layer_norm, group_norm, pow, exp, sum, softmax, norm, the losses, ... in fp32 (its "fp32" op
lists); the models cast back after their norms and keep masks and embeddings in the compute dtype, so no module's
output is fp32 beyond the few that are on purpose, and, besides the fp32 norms' own copies and attention's
logsumexp, the backward holds only the losses' tensors in fp32. The CPU tests play CUDA's rule with
tests/cuda_autocast.py (tests/test_model.py, test_f5_model.py, test_mms_model.py); these check it without the
emulation. Random weights, small sizes: a few seconds.
"""
from __future__ import annotations

import functools

import torch

from tests.cuda_autocast import output_dtypes, saved_fp32

BF16 = functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16)


def fp32_outputs(dtypes: dict) -> set[str]:
    return {name for name, dtype in dtypes.items() if dtype == torch.float32}


def test_matcha_activations_stay_bf16_padded_or_not():
    from models.matcha import MatchaConfig, MatchaTTS

    torch.manual_seed(0)
    tokens = torch.randint(1, 80, (4, 60), device="cuda")
    mels, speakers = torch.randn(4, 100, 240, device="cuda"), torch.tensor([0, 1, 0, 1], device="cuda")
    for token_lens, mel_lens in ((torch.tensor([60, 41, 60, 23]), torch.tensor([240, 170, 236, 96])),
                                 (torch.full((4,), 60), torch.full((4,), 240))):
        model = MatchaTTS(MatchaConfig.preset_config("small", n_symbols=80, n_speakers=2)).cuda()
        dtypes, _ = output_dtypes(model)
        with BF16():
            losses = model(tokens, token_lens, mels, mel_lens, speakers)
        assert fp32_outputs(dtypes) == {"encoder.emb", "spk_emb", "decoder.estimator"}, token_lens
        assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
        if int(mel_lens.min()) == mels.shape[-1]:  # the masked GroupNorm computes its statistics in fp32 by hand
            assert {shape for _, shape in saved_fp32(losses["loss"])} == {(4, 100, 240)}, saved_fp32(losses["loss"])
        losses["loss"].backward()


def test_f5_activations_stay_bf16():
    from models.f5 import F5Config, F5TTS

    torch.manual_seed(0)
    model = F5TTS(F5Config(dim=256, depth=4, heads=4, dim_head=64, ff_mult=2, text_dim=128, conv_layers=2,
                           text_num_embeds=100, mel_dim=100)).cuda()
    for p in model.parameters():  # weights in the zero-initialised modulation too: every path carries something
        torch.nn.init.normal_(p, std=0.05)
    dtypes, _ = output_dtypes(model)
    text = torch.randint(0, 100, (4, 40), device="cuda")
    text[2:, 30:] = -1
    with BF16():
        out = model(torch.randn(4, 200, 100, device="cuda"), text, torch.tensor([200, 180, 150, 120], device="cuda"))
    assert fp32_outputs(dtypes) == {"transformer.text_embed.text_embed", "transformer.rotary_embed"}
    assert out["pred"].dtype == torch.bfloat16 and out["loss"].dtype == torch.float32
    assert {shape for _, shape in saved_fp32(out["loss"])} == {(4, 200, 100)}, saved_fp32(out["loss"])
    out["loss"].backward()


def test_mms_generator_activations_stay_bf16():
    from transformers import VitsConfig, VitsModel

    from models.alignment import sequence_mask
    from models.vits_training import training_forward
    from tests.mms_fixtures import TINY

    torch.manual_seed(0)
    vits = VitsModel(VitsConfig(**TINY)).cuda().train()
    dtypes, _ = output_dtypes(vits)
    ids, spec = torch.randint(1, TINY["vocab_size"], (2, 21), device="cuda"), torch.rand(2, 513, 93, device="cuda")
    out = training_forward(vits, ids, sequence_mask(torch.tensor([21, 15])).cuda(), spec,
                           sequence_mask(torch.tensor([93, 62])).cuda(), segment=32, amp=BF16)
    fp32 = {n for n in fp32_outputs(dtypes) if not n.startswith("duration_predictor") and ".parametrizations." not in n}
    assert fp32 == {"posterior_encoder", "flow", "flow.flows.0"}, fp32  # the latents, fp32 on purpose
    assert {"text_encoder.encoder.layers.0", "text_encoder.encoder.layers.0.final_layer_norm", "decoder",
            "posterior_encoder.wavenet", "flow.flows.0.wavenet"} <= set(dtypes)
    assert out.wave.dtype == torch.float32 and torch.isfinite(out.wave).all() and torch.isfinite(out.kl + out.duration)
    (out.wave.abs().mean() + out.kl + out.duration).backward()
