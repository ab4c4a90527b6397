"""models/f5*.py against the reference package f5-tts 1.1.22 (MIT), which tests/run.sh installs with
--no-deps for this file only: the backbone's outputs, the training loss under the same RNG state, the
sampler's mel for the same seed, the public checkpoint layouts, vocabulary growth and the v1 Base size.

The reference is imported piecemeal (backbones/dit.py, modules.py, utils.py, cfm.py) without running
f5_tts/model/__init__.py, which pulls in the trainer (accelerate, wandb, datasets, ...)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from models.f5 import F5TTS, PRESETS, F5Config
from models.f5_checkpoint import check_state_dict, public_state_dict, text_num_embeds
from tests.cuda_autocast import cuda_fp32_rule, output_dtypes, saved_fp32

torch.set_num_threads(1)

SMALL = dict(dim=64, depth=2, heads=2, dim_head=32, ff_mult=2, text_dim=32, conv_layers=2,
             text_num_embeds=50, mel_dim=100)
# The same small model with the options v1 Base leaves off, so their code paths are compared too.
OPTIONS = dict(SMALL, qk_norm="rms_norm", pe_attn_head=1, long_skip=True, attn_mask=True)


def _stub(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:  # absent, or built for another torch (tests/test_audio_features.py has such a case)
        return False


def _import_reference():
    """(dit, cfm) modules of the installed f5-tts. Fails, never skips, when it is not installed."""
    spec = importlib.util.find_spec("f5_tts")
    assert spec is not None and spec.submodule_search_locations, (
        "the reference package is missing: python -m pip install --no-deps f5-tts==1.1.22 (tests/run.sh does)")
    model_dir = Path(list(spec.submodule_search_locations)[0]) / "model"
    # Stand-ins for imports the DiT and CFM never call, each only when the real one cannot be imported:
    # modules.py imports torchaudio for its wave->mel extractor (MelSpec; we pass mels), and utils.py
    # imports rjieba and pypinyin for its Chinese tokenizer. We keep torchaudio out of the environment
    # on purpose (on Colab it is preinstalled and must not be replaced).
    stubs = {"torchaudio": {}, "rjieba": {}, "pypinyin": {"Style": None, "lazy_pinyin": None}}
    stubbed = [name for name in stubs if not _importable(name)]
    before = set(sys.modules)
    for name in stubbed:
        sys.modules[name] = _stub(name, **stubs[name])
    # A parent package with the right __path__ but an empty body stands in for f5_tts/model/__init__.py.
    sys.modules["f5_tts.model"] = _stub("f5_tts.model", __path__=[str(model_dir)])
    try:
        dit = importlib.import_module("f5_tts.model.backbones.dit")
        cfm = importlib.import_module("f5_tts.model.cfm")
    finally:  # leave no stand-in behind for other test files (some look for torchaudio)
        for name in set(sys.modules) - before:
            if name.split(".")[0] in ("f5_tts", *stubbed):
                del sys.modules[name]
    return dit, cfm


@pytest.fixture(scope="module")
def ref():
    return _import_reference()


def _pair(ref, arch: dict, seed: int = 0):
    """A reference CFM with random (not zero-initialised) weights, and our F5TTS holding the same ones."""
    torch.manual_seed(seed)
    backbone = ref[0].DiT(**{k: v for k, v in arch.items() if k not in ("long_skip", "attn_mask")},
                          long_skip_connection=arch.get("long_skip", False),
                          attn_mask_enabled=arch.get("attn_mask", False))
    theirs = ref[1].CFM(transformer=backbone)
    with torch.no_grad():
        for p in theirs.parameters():  # the reference zero-initialises adaLN and the output: make them matter
            p.add_(torch.randn_like(p) * 0.1)
    ours = F5TTS(F5Config(**arch))
    ours.load_state_dict(theirs.state_dict())  # strict: the names and shapes are the reference's
    return theirs, ours


def _inputs(b=2, length=40, n_text=25, seed=1):
    g = torch.Generator().manual_seed(seed)
    x, cond = torch.randn(b, length, 100, generator=g), torch.randn(b, length, 100, generator=g)
    text = torch.randint(0, 50, (b, n_text), generator=g)
    text[1, n_text - 6:] = -1  # the second utterance's transcript is shorter
    return x, cond, text, torch.rand(b, generator=g)


@pytest.mark.parametrize("arch", [SMALL, OPTIONS], ids=["v1-base-options", "all-options"])
def test_backbone_matches_the_reference(ref, arch):
    theirs, ours = _pair(ref, arch)
    theirs.eval(), ours.eval()
    x, cond, text, time = _inputs()
    lens = torch.tensor([40, 31])
    mask = torch.arange(40)[None, :] < lens[:, None]
    dit = ours.transformer
    cases = [(None, False, False), (mask, False, False), (mask, True, False), (mask, True, True), (None, True, True)]
    with torch.no_grad():
        for m, drop_audio, drop_text in cases:
            want = theirs.transformer(x=x, cond=cond, text=text, time=time, mask=m,
                                      drop_audio_cond=drop_audio, drop_text=drop_text)
            emb = dit.embed_text(text, 40, lens if m is not None else None, drop_text)
            got = dit(x, cond, emb, time, mask=m, drop_audio_cond=drop_audio)
            assert want.abs().max() > 0.1  # a real signal, not zeros
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        want = theirs.transformer(x=x, cond=cond, text=text, time=time[0], cfg_infer=True)
        got = dit.forward_cfg(x, cond, dit.embed_text(text, 40), dit.embed_text(text, 40, drop_text=True), time[0])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_training_loss_matches_the_reference_under_the_same_rng(ref, monkeypatch):
    """Same global RNG state -> same span, noise, time, drops and dropout -> same loss. The reference
    flips its two guidance-drop coins with Python's `random()`; ours use torch's RNG at the same point,
    so the reference's coin is pointed at torch for this comparison (everything else is untouched)."""
    monkeypatch.setattr(ref[1], "random", lambda: torch.rand(()).item())
    theirs, ours = _pair(ref, SMALL)
    theirs.train(), ours.train()  # dropout on: its draws must line up too
    mel, _, text, _ = _inputs(length=48)
    lens = torch.tensor([48, 37])
    drops = set()
    for seed in range(12):
        torch.manual_seed(seed)
        loss_ref, _, pred_ref = theirs(mel, text, lens=lens)
        torch.manual_seed(seed)
        out = ours(mel, text, lens)
        torch.testing.assert_close(out["pred"], pred_ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out["loss"], loss_ref, atol=1e-6, rtol=1e-5)
        drops.add((out["drop_audio"], out["drop_text"]))
        span = out["span"].sum(1)
        assert ((span >= (0.7 * lens).floor()) & (span <= lens)).all()  # 70-100 % of each utterance
        assert not out["span"][1, 37:].any()  # never on padding
    assert {(False, False), (True, False), (True, True)} <= drops  # all guidance branches were compared
    out["loss"].backward()
    assert ours.transformer.proj_out.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("steps,cfg", [(32, 2.0), (16, 2.0), (8, 0.0)])
def test_sampler_matches_the_reference_for_the_same_seed(ref, steps, cfg):
    theirs, ours = _pair(ref, SMALL)
    ours.train()  # sample() must switch dropout off by itself, and restore the mode
    g = torch.Generator().manual_seed(3)
    cond_mel, text = torch.randn(1, 20, 100, generator=g), torch.randint(0, 50, (1, 30), generator=g)
    want, _ = theirs.sample(cond_mel, text, 45, steps=steps, cfg_strength=cfg, sway_sampling_coef=-1.0, seed=7)
    torch.manual_seed(123)
    got = ours.sample(cond_mel, text, 45, steps=steps, cfg_strength=cfg, sway_sampling_coef=-1.0, seed=7)
    assert ours.training
    assert got.shape == (1, 45, 100)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert torch.equal(got[:, :20], cond_mel)  # the reference part is the reference clip
    short, _ = theirs.sample(cond_mel, text, 10, steps=4, cfg_strength=cfg, seed=7)  # too short: raised to 31
    assert ours.sample(cond_mel, text, 10, steps=4, cfg_strength=cfg, seed=7).shape == short.shape == (1, 31, 100)


def _public_files(tmp_path: Path, state: dict) -> tuple[Path, Path]:
    """The two layouts SWivid/F5-TTS publishes: flat EMA safetensors, and the trainer's .pt dict."""
    ema = {"ema_model." + k: v.clone() for k, v in state.items()}
    bookkeeping = {"initted": torch.tensor(True), "step": torch.tensor(1250000)}
    st = tmp_path / "model_1250000.safetensors"
    save_file({**ema, **bookkeeping}, str(st))
    pt = tmp_path / "model_1250000.pt"
    online = {k: torch.zeros_like(v) for k, v in state.items()}  # differs from EMA: EMA must win
    legacy = {"ema_model.mel_spec.mel_stft.mel_scale.fb": torch.zeros(513, 100)}  # pre-305e3ea files
    torch.save({"ema_model_state_dict": {**ema, **bookkeeping, **legacy}, "model_state_dict": online,
                "optimizer_state_dict": {"state": {}, "param_groups": []}, "step": 1250000}, pt)
    return st, pt


def test_public_checkpoint_layouts_load_into_the_model(ref, tmp_path):
    theirs, _ = _pair(ref, SMALL)
    st, pt = _public_files(tmp_path, theirs.state_dict())  # written from the reference's own names
    for path in (st, pt):
        model = F5TTS(F5Config(**SMALL))
        state = public_state_dict(path, expect=model)
        model.load_state_dict(state)  # strict
        for k, v in theirs.state_dict().items():
            assert torch.equal(model.state_dict()[k], v), k
        assert text_num_embeds(state) == 50


def test_mismatched_checkpoints_are_refused_naming_key_and_shapes(tmp_path):
    model = F5TTS(PRESETS["tiny"])
    state = model.state_dict()
    key = "transformer.text_embed.text_embed.weight"
    wrong = dict(state, **{key: torch.zeros(300, 32)})
    st, _ = _public_files(tmp_path, wrong)
    with pytest.raises(ValueError, match=r"text_embed\.text_embed\.weight: file \[300, 32\], model \[257, 32\]"):
        public_state_dict(st, expect=model)
    gone = "transformer.transformer_blocks.3.ff.ff.2.bias"
    (tmp_path / "b").mkdir()
    _, pt = _public_files(tmp_path / "b", {k: v for k, v in state.items() if k != gone})
    with pytest.raises(ValueError, match=r"1 missing key\(s\): " + gone.replace(".", r"\.")):
        public_state_dict(pt, expect=model)
    with pytest.raises(ValueError, match=r"1 unexpected key\(s\): transformer\.extra"):
        check_state_dict({**state, "transformer.extra": torch.zeros(1)}, state)
    with pytest.raises(ValueError, match="no such checkpoint"):
        public_state_dict(tmp_path / "absent.safetensors")


def test_growing_the_text_embedding_keeps_old_rows_and_trains_new_ids():
    torch.manual_seed(0)
    model = F5TTS(PRESETS["tiny"])
    old = model.transformer.text_embed.text_embed.weight.detach().clone()  # [257, 32]
    model.grow_text_embedding(300)
    table = model.transformer.text_embed.text_embed.weight
    assert table.shape == (301, 32) and model.cfg.text_num_embeds == 300
    assert torch.equal(table[:257], old)
    torch.testing.assert_close(table[257:], old[1:].mean(0).expand(44, 32))
    init = torch.randn(20, 32)
    model.grow_text_embedding(320, init=init)
    assert torch.equal(model.transformer.text_embed.text_embed.weight[:301], table.detach())
    assert torch.equal(model.transformer.text_embed.text_embed.weight[301:], init)
    text = torch.tensor([[5, 299, 310, 319, -1]])
    out = model(torch.randn(1, 30, 100), text)
    out["loss"].backward()
    grad = model.transformer.text_embed.text_embed.weight.grad
    assert torch.isfinite(out["loss"]) and (grad is None or grad.shape == (321, 32))
    with pytest.raises(ValueError, match="cannot shrink"):
        model.grow_text_embedding(100)


@pytest.mark.parametrize("arch", [SMALL, OPTIONS], ids=["v1_base_layout", "options"])
def test_under_cuda_autocasts_fp32_rule_every_module_output_and_saved_activation_stays_bf16(arch):
    """CUDA autocast returns layer_norm and torch.norm in fp32 where CPU autocast returns bf16 (tests/cuda_autocast.py
    plays its rule here; gpu_tests/test_bf16.py checks it on a GPU). The adaLN norms cast back before their
    modulation, GRN applies its fp32 statistics in x's dtype and the text embedding enters its ConvNeXt blocks in
    the compute dtype, so only the embedding lookup and the rotary angles are fp32; and besides the fp32 norms' own
    copies, the backward holds in fp32 only the loss's tensors (the rms_norm option upcasts inside PyTorch)."""
    torch.manual_seed(0)
    model = F5TTS(F5Config(**arch))
    for p in model.parameters():  # weights in the zero-initialised modulation too: every path carries something
        torch.nn.init.normal_(p, std=0.1)
    dtypes, _ = output_dtypes(model)
    text = torch.randint(0, 50, (2, 12))
    text[1, 8:] = -1
    with torch.autocast("cpu", dtype=torch.bfloat16), cuda_fp32_rule():
        out = model(torch.randn(2, 40, 100), text, torch.tensor([40, 31]))
    assert {n for n, d in dtypes.items() if d == torch.float32} == {"transformer.text_embed.text_embed",
                                                                    "transformer.rotary_embed"}
    assert len(dtypes) > 50 and out["pred"].dtype == torch.bfloat16 and out["loss"].dtype == torch.float32
    if arch is SMALL:
        assert {shape for _, shape in saved_fp32(out["loss"])} == {(2, 40, 100)}  # mse_loss's fp32 copies


def test_v1_base_preset_has_the_public_size_and_key_layout(ref):
    with torch.device("meta"):
        ours = F5TTS(PRESETS["v1_base"])
        theirs = ref[1].CFM(transformer=ref[0].DiT(dim=1024, depth=22, heads=16, ff_mult=2, text_dim=512,
                                                   text_mask_padding=True, conv_layers=4, text_num_embeds=2545,
                                                   mel_dim=100))  # configs/F5TTS_v1_Base.yaml + vocab.txt
    assert sum(p.numel() for p in ours.parameters()) == 337_096_804
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert len(shapes) == 364  # the published model_1250000.safetensors holds 364 ema_model.* tensors
    assert F5Config.from_dict(PRESETS["v1_base"].to_dict()) == PRESETS["v1_base"]
    with pytest.raises(ValueError, match="unknown F5Config keys: dimm"):
        F5Config.from_dict({"dimm": 3})
