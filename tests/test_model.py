"""The acoustic model's parts: MAS, shapes, synthesis, table growth, and the code paths the
optimization switches select (inspected, not timed)."""
from __future__ import annotations

import torch

from models.alignment import maximum_path, maximum_path_torch, sequence_mask
from models.attention import Attention
from models.matcha import MatchaConfig, MatchaTTS
from tests.cuda_autocast import cuda_fp32_rule, output_dtypes, saved_fp32

torch.set_num_threads(1)


def tiny(n_symbols=40, n_speakers=3, **kw) -> MatchaTTS:
    torch.manual_seed(0)
    return MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=n_symbols, n_speakers=n_speakers, **kw))


def batch():
    tokens = torch.randint(1, 40, (2, 10))
    token_lens = torch.tensor([10, 7])
    mels = torch.randn(2, 100, 48)
    mel_lens = torch.tensor([48, 30])
    return tokens, token_lens, mels, mel_lens, torch.tensor([0, 2])


def test_torch_mas_finds_the_same_paths_as_the_cython_kernel():
    g = torch.Generator().manual_seed(1)
    for _ in range(30):
        n = torch.randint(1, 9, (3,), generator=g)
        t = n + torch.randint(0, 15, (3,), generator=g)
        log_p = torch.randn(3, int(n.max()), int(t.max()), generator=g)
        mask = (sequence_mask(n)[:, :, None] & sequence_mask(t)[:, None, :]).float()
        a, b = maximum_path(log_p, mask, "cython"), maximum_path_torch(log_p, mask)
        assert torch.equal(a, b)
        assert torch.equal(a.sum(1)[0, : int(t[0])], torch.ones(int(t[0])))  # every frame has exactly one token
        assert (a.sum(2)[0, : int(n[0])] >= 1).all()  # every token gets at least one frame


def test_triton_mas_kernel_finds_the_same_paths_as_the_reference():
    """The GPU kernel's own code, run by Triton's interpreter on the CPU (no GPU here), on padded batches
    with ties; also through a model's forward pass."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import torch\n"
        "from models.alignment import mas_disagreement, maximum_path\n"
        "from models.matcha import MatchaConfig, MatchaTTS\n"
        "print('check:', repr(mas_disagreement('triton', 'cpu', trials=6)))\n"
        "torch.manual_seed(0)\n"
        "m = MatchaTTS(MatchaConfig.preset_config('tiny', n_symbols=40, n_speakers=1))\n"
        "args = (torch.randint(1, 40, (2, 10)), torch.tensor([10, 7]), torch.randn(2, 100, 48), torch.tensor([48, 30]))\n"
        "losses = {}\n"
        "for impl in ('cython', 'triton'):\n"
        "    m.mas_implementation = impl\n"
        "    torch.manual_seed(1)\n"
        "    losses[impl] = float(m(*args)['loss'])\n"
        "print('same loss:', losses['cython'] == losses['triton'])\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "check: ''" in out.stdout and "same loss: True" in out.stdout, out.stdout


def test_a_wrong_mas_kernel_is_caught_and_the_trainer_falls_back_to_cython(monkeypatch):
    import models.mas_triton
    from tests.test_training_optimizations import h100_report
    from utils.training import optimization as opt
    from utils.training.config import TrainConfig

    def off_by_one(log_p, mask):  # a kernel that lets every path start one frame late
        return torch.roll(maximum_path_torch(log_p.cpu(), mask.cpu()), 1, dims=2)

    monkeypatch.setattr(models.mas_triton, "maximum_path_triton", off_by_one)
    from models.alignment import mas_disagreement

    assert "differ" in mas_disagreement("triton", "cpu")
    m = opt.resolve(TrainConfig(preset="tiny"), h100_report())
    assert m.mas == "triton" and "Triton kernel" in m.reasons["mas"]
    m.values["device"] = "cpu"  # checked on this CPU, as the trainer checks on its GPU
    model = tiny()
    opt.apply_model_settings(model, m)
    assert m.mas == "cython" and "did not match" in m.reasons["mas"] and model.mas_implementation == "cython"


def test_a_mas_kernel_that_raises_is_reported_and_the_trainer_falls_back_instead_of_crashing(monkeypatch):
    import models.mas_triton
    from tests.test_training_optimizations import h100_report
    from utils.training import optimization as opt
    from utils.training.config import TrainConfig

    def too_old(log_p, mask):  # what Triton 3.1's interpreter raises for this kernel (torch 2.5 era)
        raise ValueError("arange's arguments must be of type tl.constexpr")

    monkeypatch.setattr(models.mas_triton, "maximum_path_triton", too_old)
    from models.alignment import mas_disagreement

    assert mas_disagreement("triton", "cpu") == "the kernel failed: ValueError: arange's arguments must be of type tl.constexpr"
    m = opt.resolve(TrainConfig(preset="tiny"), h100_report())
    m.values["device"] = "cpu"
    opt.apply_model_settings(model := tiny(), m)
    assert m.mas == "cython" and "the kernel failed" in m.reasons["mas"] and model.mas_implementation == "cython"


def test_forward_gives_finite_losses_and_gradients_everywhere_used():
    model = tiny()
    losses = model(*batch())
    assert set(losses) == {"dur", "prior", "cfm", "loss"} and all(torch.isfinite(v) for v in losses.values())
    losses["loss"].backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None]
    assert no_grad == []


def test_an_aligner_trains_the_text_encoder_alone_and_computes_nothing_of_the_decoder():
    """The transcript check's aligner (option parts=aligner) uses only the encoder's alignment: the decoder, ~9x the
    cost of the rest on a CPU, is neither run nor trained, and the losses that train the encoder are the same."""
    torch.manual_seed(1)
    args = batch()
    full = tiny()(*args)
    model = tiny()
    calls = []
    model.decoder.estimator.register_forward_pre_hook(lambda *a: calls.append(1))
    aligner = model(*args, decoder=False)
    assert set(aligner) == {"dur", "prior", "loss"} and not calls
    assert torch.equal(aligner["prior"], full["prior"]) and torch.equal(aligner["dur"], full["dur"])
    aligner["loss"].backward()
    assert all(p.grad is None for p in model.decoder.parameters())
    assert all(p.grad is not None for p in model.encoder.parameters()) and model.encoder.emb.weight.grad.abs().sum() > 0


def test_synthesise_returns_denormalised_mel_and_at_least_one_frame_per_token():
    model = tiny(mel_mean=-5.0, mel_std=2.0).eval()
    out = model.synthesise([3, 4, 5, 6], speaker=1, n_steps=2, length_scale=0.1)
    assert out["mel"].shape[:2] == (1, 100) and out["durations"].shape == (4,)
    assert (out["durations"] >= 1).all() and out["mel"].shape[-1] == int(out["durations"].sum())
    assert torch.allclose(out["mel"], out["mel_norm"] * 2.0 - 5.0)


def test_base_preset_is_about_18m_parameters():
    model = MatchaTTS(MatchaConfig.preset_config("base", n_symbols=180, n_speakers=1))
    assert 17e6 < sum(p.numel() for p in model.parameters()) < 20e6


def test_grow_tables_keeps_existing_rows():
    model = tiny(n_symbols=20, n_speakers=2)
    emb, spk = model.encoder.emb.weight.detach().clone(), model.spk_emb.weight.detach().clone()
    model.grow_tables(25, 3)
    assert model.encoder.emb.weight.shape[0] == 25 and model.spk_emb.weight.shape[0] == 3
    assert torch.equal(model.encoder.emb.weight[:20], emb) and torch.equal(model.spk_emb.weight[:2], spk)
    assert torch.allclose(model.spk_emb.weight[2], spk.mean(0))  # a new voice starts from the average


def _sdpa_kernels(model, backend: str) -> set[str]:
    model.set_attention_backend(backend)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(*batch())
    return {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key and e.key != "aten::scaled_dot_product_attention"}


def test_attention_backend_switch_selects_the_kernel_the_model_runs():
    model = tiny()
    assert all(m.backend == "auto" for m in model.modules() if isinstance(m, Attention))
    assert _sdpa_kernels(model, "math") == {"aten::_scaled_dot_product_attention_math"}
    assert _sdpa_kernels(model, "flash") == {"aten::_scaled_dot_product_flash_attention_for_cpu"}


def test_grad_checkpointing_recomputes_each_block_in_backward():
    model = tiny()
    calls = {"n": 0}
    model.encoder.layers[0].register_forward_pre_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    model(*batch())["loss"].backward()
    plain = calls["n"]
    calls["n"] = 0
    model.set_grad_checkpointing(True)
    model(*batch())["loss"].backward()
    assert plain == 1 and calls["n"] == 2  # forward once, again during backward


def test_unpadded_batches_run_attention_without_a_mask():
    """FlashAttention takes no mask: an unpadded batch must reach SDPA with attn_mask=None."""
    model = tiny()
    seen = []
    orig = torch.nn.functional.scaled_dot_product_attention

    def spy(*a, **kw):
        seen.append(kw.get("attn_mask") is None)
        return orig(*a, **kw)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        tokens, _, mels, _, spk = batch()
        model(tokens, torch.tensor([10, 10]), mels, torch.tensor([48, 48]), spk)
        assert seen and all(seen)
        seen.clear()
        model(*batch())
        assert not any(seen)
    finally:
        torch.nn.functional.scaled_dot_product_attention = orig


def test_blanks_are_interspersed_between_symbols_and_at_both_ends():
    from models.matcha import fold_blank_durations, intersperse_blanks

    tokens = torch.tensor([[5, 6, 7], [8, 9, 0]])  # the second row is padded
    assert intersperse_blanks(tokens).tolist() == [[0, 5, 0, 6, 0, 7, 0], [0, 8, 0, 9, 0, 0, 0]]
    assert fold_blank_durations(torch.tensor([1, 2, 3, 4, 5, 6, 7])).tolist() == [1 + 2 + 3, 4 + 5, 6 + 7]


def test_a_model_with_blanks_aligns_2n_plus_1_tokens_and_reports_frames_per_symbol():
    model = tiny(add_blank=True)
    seen = {}
    model.duration.register_forward_hook(lambda m, i, o: seen.update(n=o.shape[-1]))
    losses = model(*batch())
    assert seen["n"] == 2 * 10 + 1 and all(torch.isfinite(v) for v in losses.values())
    losses["loss"].backward()
    out = model.eval().synthesise([3, 4, 5, 6], speaker=1, n_steps=2, length_scale=0.1)
    assert seen["n"] == 9 and out["durations"].shape == (4,)
    assert out["mel"].shape[-1] == int(out["durations"].sum()) and (out["durations"] >= 2).all()


def test_a_checkpoint_config_from_before_blanks_loads_without_them():
    saved = tiny().cfg.to_dict()
    del saved["add_blank"]  # what checkpoints written before the setting hold
    assert MatchaConfig.from_dict(saved).add_blank is False
    assert MatchaConfig.from_dict({**saved, "add_blank": True}).add_blank is True


def test_bf16_autocast_keeps_activations_bf16_through_masks_norms_and_the_speaker_vector():
    """A float32 mask (or norm output, or speaker vector) times a bf16 activation promotes it to float32: twice
    the memory that mixed precision is meant to save. Only the embeddings and the decoder's final sum (with
    the float32 noisy mel) stay float32; losses are computed in float32."""
    model = tiny()
    dtypes = {}
    for name, module in model.named_modules():
        if name and name.count(".") <= 3:
            module.register_forward_hook(lambda m, i, o, name=name: dtypes.setdefault(
                name, (o[0] if isinstance(o, tuple) else o).dtype) and None)  # None: the output stays
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model(*batch())
    fp32 = {name for name, dtype in dtypes.items() if dtype == torch.float32}
    assert fp32 == {"encoder.emb", "spk_emb", "decoder.estimator"}, fp32
    assert {"encoder.prenet", "encoder.layers.0", "encoder.layers.1.norm2", "encoder", "duration"} <= set(dtypes)
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())


def test_under_cuda_autocasts_fp32_rule_every_module_output_and_saved_activation_stays_bf16():
    """CUDA autocast returns layer_norm, group_norm, pow, exp, sum, softmax, ... in fp32 where CPU autocast returns
    bf16 (tests/cuda_autocast.py plays its rule here; gpu_tests/test_bf16.py checks it on a GPU). The norms cast
    their result back and SnakeBeta computes in x's dtype, so at every depth, in padded and unpadded batches (the
    masked and the plain GroupNorm), only the embeddings and the decoder's final sum with the fp32 noisy mel are
    fp32; and besides the fp32 norms' own copies, the backward holds in fp32 only the losses' tensors."""
    tokens, _, mels, _, speakers = batch()
    for token_lens, mel_lens in ((torch.tensor([10, 7]), torch.tensor([48, 30])),
                                 (torch.tensor([10, 10]), torch.tensor([48, 48]))):
        model = tiny()
        dtypes, _ = output_dtypes(model)
        with torch.autocast("cpu", dtype=torch.bfloat16), cuda_fp32_rule():
            losses = model(tokens, token_lens, mels, mel_lens, speakers)
        assert {n for n, d in dtypes.items() if d == torch.float32} == {"encoder.emb", "spk_emb", "decoder.estimator"}
        assert len(dtypes) > 100 and all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
        if int(mel_lens.min()) == mels.shape[-1]:  # the masked GroupNorm computes its statistics in fp32 by hand
            assert {shape for _, shape in saved_fp32(losses["loss"])} == {(2, 100, 48)}  # the losses' mel-sized

