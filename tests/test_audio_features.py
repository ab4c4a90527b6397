"""The mel features and Griffin-Lim are written with torch alone (no torchaudio: its builds pair with only
some torch builds). Each is checked here against librosa, the reference implementation of both."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import librosa
import numpy as np
import pytest
import torch

from utils.audio import FeatureConfig, log_mel, mel_filterbank
from utils.vocoder import phase_from_magnitude

CFG = FeatureConfig()


def noise(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    return (0.1 * np.random.default_rng(seed).standard_normal(int(seconds * CFG.sample_rate))).astype(np.float32)


@pytest.mark.parametrize("cfg", [CFG, FeatureConfig(sample_rate=22050, n_mels=80, f_min=30.0, f_max=8000.0)])
def test_filterbank_is_librosas_htk_filterbank_without_normalisation(cfg):
    ref = librosa.filters.mel(sr=cfg.sample_rate, n_fft=cfg.n_fft, n_mels=cfg.n_mels, fmin=cfg.f_min,
                              fmax=cfg.f_max or cfg.sample_rate / 2, htk=True, norm=None)
    fb = mel_filterbank(cfg)
    assert fb.shape == (cfg.n_fft // 2 + 1, cfg.n_mels) and fb.dtype == torch.float32
    np.testing.assert_allclose(fb.numpy(), ref.T, atol=1e-6)


def test_log_mel_is_librosas_magnitude_mel_of_a_centred_reflect_padded_stft():
    x = noise(1.3)
    ref = librosa.feature.melspectrogram(y=x, sr=CFG.sample_rate, n_fft=CFG.n_fft, hop_length=CFG.hop_length,
                                         win_length=CFG.win_length, center=True, pad_mode="reflect", power=1.0,
                                         n_mels=CFG.n_mels, htk=True, norm=None)
    mel = log_mel(x, CFG)
    assert mel.shape == (CFG.n_mels, CFG.frames(len(x)))
    np.testing.assert_allclose(mel.numpy(), np.log(np.maximum(ref, CFG.log_floor)), atol=1e-4)


def test_log_mel_of_a_batch_is_each_clip_alone():
    batch = np.stack([noise(1.0, 1), noise(1.0, 2)])
    together = log_mel(batch)
    assert together.shape[0] == 2
    for i in range(2):
        torch.testing.assert_close(together[i], log_mel(batch[i]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("n_iter", [1, 16])
def test_griffin_lim_iterations_are_librosas_fast_griffin_lim(n_iter):
    mag = np.abs(librosa.stft(noise(0.8).astype(np.float64), n_fft=CFG.n_fft, hop_length=CFG.hop_length))
    ours = phase_from_magnitude(torch.from_numpy(mag), CFG, n_iter).numpy()
    ref = librosa.griffinlim(mag, n_iter=n_iter, hop_length=CFG.hop_length, win_length=CFG.win_length,
                             n_fft=CFG.n_fft, momentum=0.99, init=None, pad_mode="reflect",
                             length=CFG.hop_length * (mag.shape[-1] - 1))
    np.testing.assert_allclose(ours, ref, atol=1e-9)


def test_a_torchaudio_built_for_another_torch_does_not_stop_the_studio(tmp_path):
    """What a fresh `pip install torch torchaudio` gave on 2026-11-23: a torchaudio that raises at import. With it
    first on the path, the app starts, every module loads and the features and Griffin-Lim still work."""
    broken = tmp_path / "site" / "torchaudio"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise RuntimeError("PyTorch and TorchAudio were compiled with different '
                                        'CUDA versions. PyTorch has CUDA version 13.2 whereas TorchAudio has 13.0.")')
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}"}
    code = ("import app, utils.training, utils.inference, utils.vocoder.training, utils.separation, utils.datasets, "
            "webui.app, numpy as np\n"
            "from utils.audio import log_mel\nfrom utils.vocoder import griffin_lim\n"
            "wave = griffin_lim(log_mel(np.random.default_rng(0).standard_normal(24000).astype('float32') * 0.1), "
            "n_iter=2)\nprint('speaks', len(wave))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "speaks" in done.stdout, done.stderr[-2000:]
    started = subprocess.run([sys.executable, "app.py", "g2p", "ሰላም", "--workspace", str(tmp_path / "ws")], cwd=root,
                             env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0 and "s ə l a m" in started.stdout, started.stderr[-2000:]


def test_f5s_higher_log_floor_is_read_from_the_prepared_cache_not_computed_again(tmp_path):
    """F5 floors its log-mels at 1e-5, the prepared cache at 1e-7; the first F5 run used to compute and cache every
    mel again in its main process. log(max(x, 1e-5)) = max(log(max(x, 1e-7)), log 1e-5): the cache serves both."""
    from tests.helpers import make_dataset
    from utils.audio import load_audio, resample
    from utils.datasets import load_manifest
    from utils.datasets.features import feature_frames, features, mel_numpy
    from utils.f5.adapter import F5_FEATURES

    ws = make_dataset(tmp_path, n_train=2, n_val=1, max_chars=30)
    ds = ws.dataset_dir("am")
    rows = load_manifest(ws, "am")
    for row in rows:  # the prepared cache, as preparation or a Matcha run leaves it
        features(ws, "am", row)
    caches = sorted(p.name for p in (ds / "features").iterdir())
    for row in rows:
        audio, sr = load_audio(ds / row["audio"])
        want = mel_numpy(resample(audio, sr, F5_FEATURES.sample_rate), F5_FEATURES)
        got = features(ws, "am", row, F5_FEATURES)
        assert got.shape == want.shape and got.min() >= np.log(1e-5) - 1e-6
        np.testing.assert_allclose(got, want, atol=2e-3 * np.abs(want).max())  # the cache's own precision
        assert feature_frames(ws, "am", row, F5_FEATURES) == want.shape[-1]
    assert sorted(p.name for p in (ds / "features").iterdir()) == caches  # no second cache of every mel
