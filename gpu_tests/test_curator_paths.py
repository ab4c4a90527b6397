"""Every path a curator takes, on `cuda`: what one rare GPU run must catch of what reading missed (run first by
bench/gpu_suite.sh, phase `paths`, about 6 minutes on an H100).

A tiny F5 voice and a Matcha voice train, speak with seed 0 (the Inference tab's default), side by side as A/B
does, and export (Matcha also to ONNX) from their GPU checkpoints; the T4 path (no bf16: fp16 with its gradient
scaler, memory-efficient attention, no TF32) is forced on the big card for Matcha, F5 and the vocoder; the
transcript check runs its aligner on the GPU in a process of its own and leaves the app's process as it was;
music removal batches its chunks on the GPU; an MMS-TTS fine-tune (a tiny random VITS in Meta's layout) trains in the
card's precision and the T4's, speaks at 16 kHz and exports with voice.onnx.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from utils import hardware
from utils.training import TrainConfig, prepare_run, run
from utils.workspace import read_jsonl

TEXT = "ሰላም ነው። ዛሬ አየሩ ጥሩ ነው።"


def tiny(ws, name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="bench", run=name, preset="tiny", max_steps=6, lr=1e-3, warmup_steps=1,
                log_every=1, eval_every=3, checkpoint_every=3, mcd="logmel", eval_clips=1, sample_clips=1,
                ode_steps=2, compile="false", device="cuda")
    base.update(kw)
    return TrainConfig.from_dict(base)  # a family's own settings (mas, blanks...) by name too


@pytest.fixture(scope="module")
def voices(corpus) -> dict[str, str]:
    """A Matcha and a tiny random F5 run trained on the GPU (the engine name -> the run)."""
    out = {}
    for engine in ("matcha", "f5"):
        result = run(prepare_run(tiny(corpus, f"gpu-{engine}", engine=engine)))
        assert result["state"] == "finished", result
        out[engine] = f"gpu-{engine}"
    return out


def test_each_engines_voice_speaks_on_cuda_with_seed_0_and_again_the_same(corpus, voices):
    from utils import inference

    for engine, run_name in voices.items():
        wave, sr, info = inference.synthesize(corpus, run_name, TEXT, device="cuda", seed=0)
        again, _, _ = inference.synthesize(corpus, run_name, TEXT, device="cuda", seed=0)
        assert info["device"] == "cuda" and sr == 24000 and len(wave) > sr // 4 and np.isfinite(wave).all(), engine
        assert len(again) == len(wave) and np.abs(again - wave).max() < 1e-2 * max(1e-6, np.abs(wave).max()), engine


def test_ab_speaks_the_same_text_through_both_voices_on_cuda(corpus, voices):
    """What the A/B panel does: one text, one seed, two voices, one after the other on the same device."""
    from utils import inference

    heard = [inference.synthesize(corpus, voices[e], TEXT, device="cuda", seed=0, steps=4) for e in ("matcha", "f5")]
    assert all(np.isfinite(w).all() and len(w) > 0 for w, _, _ in heard)


def test_gpu_checkpoints_export_as_voices_and_matcha_to_onnx(corpus, voices):
    from utils.inference import Voice
    from utils.inference.export import export_voice
    from utils.inference.onnx_voice import OnnxVoice

    for engine, run_name in voices.items():
        folder = export_voice(corpus, run_name, f"exported-{engine}", vocoder="griffin-lim", onnx=engine == "matcha")
        wave, _, info = Voice.load(folder, device="cuda").synthesize(TEXT, seed=0)
        assert info["device"] == "cuda" and np.isfinite(wave).all() and len(wave) > 0
    onnx_wave, _ = OnnxVoice(corpus.voice_dir("exported-matcha")).synthesize(TEXT)
    assert np.isfinite(onnx_wave).all() and len(onnx_wave) > 0


@pytest.mark.parametrize("engine", ["matcha", "f5"])
def test_the_t4_path_trains_on_the_big_card(corpus, forced_t4, engine):
    """fp16 with the gradient scaler, memory-efficient attention, no TF32: what a free Colab gets (compile off, as it
    is not what differs on a T4 and would spend the lease)."""
    name = f"t4-{engine}"
    result = run(prepare_run(tiny(corpus, name, engine=engine, preset="small" if engine == "matcha" else "tiny",
                                  device="auto", max_steps=8, eval_every=8)))
    assert result["state"] == "finished", result
    resolved = json.loads((corpus.run_dir(name) / "config.json").read_text())["resolved"]
    assert resolved["precision"] == "fp16" and resolved["attention"] == "efficient" and resolved["tf32"] is False
    rows = [r for r in read_jsonl(corpus.run_dir(name) / "metrics.jsonl") if "loss" in r]
    assert rows and all(np.isfinite(r["loss"]) for r in rows) and rows[-1]["loss_scale"] > 0


def test_the_t4_path_trains_the_vocoder_in_fp32(corpus, forced_t4):
    from utils.vocoder.training import VocoderTrainConfig, prepare_vocoder_run, train_vocoder

    cfg = VocoderTrainConfig(dataset="bench", run="t4-voc", max_steps=4, batch_size=4, log_every=2, eval_every=4,
                             checkpoint_every=4, val_clips=1, mcd_clips=0, device="auto")
    prepare_vocoder_run(corpus, cfg)
    text = "\n".join(str(getattr(e, "message", e)) for e in train_vocoder(corpus, cfg))
    assert "no bf16 tensor cores" in text and "cuda" in text, text[-2000:]


def test_music_removal_batches_its_chunks_on_cuda_as_on_the_cpu(monkeypatch):
    """The same (random: the Spleeter weights do not travel to a borrowed GPU) networks on both devices."""
    from utils.separation import api, spleeter

    torch.manual_seed(0)
    states = [net.state_dict() for net in spleeter.build_networks("cpu")]
    monkeypatch.setattr(spleeter, "load_networks", lambda device: spleeter.build_networks(device, states))
    api.get_backend.cache_clear()  # a backend made with the random networks must not outlive this test
    monkeypatch.setattr(api, "get_backend", api.get_backend.__wrapped__)
    rng = np.random.default_rng(0)
    mixture = (0.1 * rng.standard_normal((2, 44_100 * 30))).astype(np.float32)
    gpu = api.separate_verbose(mixture, 44_100, backend="spleeter", gate=False, batch=4, device="cuda")
    cpu = api.separate_verbose(mixture, 44_100, backend="spleeter", gate=False, batch=1, device="cpu")
    assert gpu.speech.shape == mixture.shape and np.isfinite(gpu.speech).all()
    assert np.abs(gpu.speech - cpu.speech).max() < 1e-2 * np.abs(cpu.speech).max()


@pytest.fixture(scope="module")
def one_voice(tmp_path_factory):
    """The MMS engine adapts one speaker: a one-voice espeak-ng dataset and a tiny random base in MMS's layout."""
    from tests.helpers import make_dataset
    from tests.mms_fixtures import tiny_base

    ws = make_dataset(tmp_path_factory.mktemp("mms"), name="one", n_train=8, n_val=1, voices=("am",), max_chars=60)
    tiny_base(ws.root / "pretrained" / "tiny-mms")
    return ws


@pytest.mark.parametrize("card", ["this", "t4"])
def test_an_mms_fine_tune_trains_speaks_and_exports_on_cuda(one_voice, monkeypatch, card):
    """The third family's GAN on the GPU: the card's own precision (bf16 on an H100) and the T4's (fp16 with the
    gradient scaler on both optimizers); its voice speaks with seed 0 at 16 kHz, the same twice, and exports with
    voice.onnx."""
    from utils.inference import Voice
    from utils.inference.export import export_voice

    if card == "t4":
        real = hardware.query_gpus()
        monkeypatch.setattr(hardware, "query_gpus", lambda: [replace(g, name="Tesla T4 (forced)",
                                                                     compute_capability="7.5") for g in real])
    name = f"mms-{card}"
    # fp16's scaler starts at 65536 and halves once per overflowing step down to the tiny base's ~1024: six steps
    # skipped before the first update (the first GPU run had only six), so the T4 trains twelve
    steps = 12 if card == "t4" else 6
    cfg = TrainConfig(workspace=str(one_voice.root), dataset="one", run=name, engine="mms", init="pretrained/tiny-mms",
                      max_steps=steps, log_every=1, eval_every=steps // 2, checkpoint_every=steps // 2, eval_clips=1,
                      sample_clips=1, device="auto")
    result = run(prepare_run(cfg))
    assert result["state"] == "finished", result
    resolved = json.loads((one_voice.run_dir(name) / "config.json").read_text())["resolved"]
    assert resolved["device"] == "cuda" and resolved["precision"] == ("fp16" if card == "t4" else "bf16"), resolved
    rows = [r for r in read_jsonl(one_voice.run_dir(name) / "metrics.jsonl") if "loss_g" in r]
    assert len(rows) >= 6 and all(np.isfinite([r["loss_g"], r["loss_d"]]).all() for r in rows)
    assert any("mcd" in r for r in read_jsonl(one_voice.run_dir(name) / "metrics.jsonl"))
    from utils import inference

    (wave, sr, info), (again, _, _) = (inference.synthesize(one_voice, name, TEXT, device="cuda", seed=0)
                                       for _ in range(2))
    assert sr == 16_000 and info["device"] == "cuda" and np.isfinite(wave).all() and len(wave) > sr // 4
    assert len(again) == len(wave) and np.abs(again - wave).max() < 1e-2 * max(1e-6, np.abs(wave).max())
    folder = export_voice(one_voice, name, f"exported-{name}", onnx=True)  # "auto": no vocoder for this family
    assert (folder / "voice.onnx").exists() and "CC-BY-NC-4.0" in (folder / "LICENSE.txt").read_text()
    spoken, _, _ = Voice.load(folder, device="cuda").synthesize(TEXT, seed=0)
    assert np.isfinite(spoken).all() and len(spoken) > 0


# last: the longest (234 s on the first H100 run, and it passed); under bench/gpu_suite.sh all's deadline, what is cut
def test_the_transcript_check_aligns_on_cuda_in_a_process_of_its_own(corpus):
    from utils.events import run_to_end
    from utils.transcripts import scoring

    tf32 = torch.backends.cuda.matmul.allow_tf32
    result = run_to_end(scoring.check_transcripts(corpus, "bench", method="alignment", steps=40, device="cuda"))
    assert len(result["rows"]) >= 100
    status = json.loads((corpus.run_dir(scoring.check_run("bench")) / "status.json").read_text())
    assert status["state"] == "finished" and status["devices"] == "cuda:0"
    assert torch.backends.cuda.matmul.allow_tf32 == tf32  # the app's process switches nothing
    assert torch.cuda.memory_reserved() < 256 * 2**20  # and hands its cache back
