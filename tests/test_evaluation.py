"""MCD: the project's definition reproduces its calibrations, and the fast log-mel proxy."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import espeak_amharic, sentences
from utils.audio import load_audio, log_mel, resample
from utils.evaluation import dtw, logmel_mcd, mcd
from utils.events import StudioError
from utils.vocoder import griffin_lim


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    d = tmp_path_factory.mktemp("mcd")
    text = sentences(3)[2]
    # 24 kHz like the app's dataset clips and model output: espeak's native 22.05 kHz keeps energy up
    # to its Nyquist that any resampled copy loses, which alone adds ~4.7 dB at the top of the band.
    same, sr = load_audio(espeak_amharic(text, d / "same.wav"), 24000)
    slow, _ = load_audio(espeak_amharic(text, d / "slow.wav", rate=120), 24000)
    other, _ = load_audio(espeak_amharic(sentences(11)[10], d / "other.wav"), 24000)
    return same, slow, other, sr


def brute_force_dtw(cost):
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0
    steps = np.zeros((n + 1, m + 1))
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            prev = [(acc[i - 1, j - 1], steps[i - 1, j - 1]), (acc[i - 1, j], steps[i - 1, j]), (acc[i, j - 1], steps[i, j - 1])]
            best = min(prev, key=lambda p: p[0])
            acc[i, j], steps[i, j] = best[0] + cost[i - 1, j - 1], best[1] + 1
    return acc[n, m], steps[n, m]


def test_dtw_finds_the_same_optimum_as_brute_force():
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (1, 6), (6, 1), (7, 9), (23, 11), (30, 30)]:
        cost = rng.random(shape)
        total, steps = dtw(cost)
        ref_total, _ = brute_force_dtw(cost)
        assert total == pytest.approx(ref_total, rel=1e-12)
        assert max(shape) <= steps <= sum(shape) - 1


def test_calibration_same_sentence_at_another_rate_is_about_2_db(speech):
    same, slow, _, sr = speech
    assert 1.6 < mcd(same, sr, slow, sr) < 2.9  # environment.md: 2.1 dB


def test_calibration_unrelated_sentence_is_about_12_db(speech):
    same, _, other, sr = speech
    assert 9.0 < mcd(same, sr, other, sr) < 15.0  # environment.md: ~12 dB


def test_calibration_griffin_lim_copy_synthesis_sits_between(speech):
    same, slow, other, sr = speech
    copy = griffin_lim(log_mel(same), n_iter=32)
    value = mcd(same, sr, copy, sr)
    assert 2.5 < value < 6.5  # environment.md: 4.4 dB (its Griffin-Lim settings are not recorded)
    assert mcd(same, sr, slow, sr) < value < mcd(same, sr, other, sr)


def test_identical_audio_scores_zero_and_gain_and_silence_do_not_count(speech):
    same, _, _, sr = speech
    assert mcd(same, sr, same, sr) == pytest.approx(0.0, abs=1e-5)
    assert mcd(same, sr, 0.3 * same, sr) < 0.5  # c0, the gain, is excluded (WORLD floors silent frames)
    padded = np.concatenate([np.zeros(sr // 2, np.float32), same, np.zeros(sr, np.float32)])
    assert mcd(same, sr, padded, sr) < 0.3  # edges below -35 dB are trimmed


def test_sample_rate_of_the_inputs_does_not_matter(speech):
    same, _, _, sr = speech
    assert mcd(same, sr, resample(same, sr, 48000), 48000) < 0.3


def test_silent_clip_is_a_clear_error(speech):
    same, _, _, sr = speech
    with pytest.raises(StudioError, match="silent"):
        mcd(same, sr, np.zeros(sr, np.float32), sr)


def test_logmel_mcd_is_the_rms_db_difference_after_removing_each_frames_gain():
    rng = np.random.default_rng(1)
    a = rng.normal(-5, 2, size=(100, 1))
    b = a + rng.normal(0, 0.3, size=(100, 1))
    delta = 20 / math.log(10) * (b - a)[:, 0]  # natural-log magnitude -> dB
    expected = math.sqrt(np.mean((delta - delta.mean()) ** 2))
    assert logmel_mcd(a, b) == pytest.approx(expected, rel=1e-9)
    assert logmel_mcd(a, a + 3.0) == pytest.approx(0.0, abs=1e-9)


def test_logmel_mcd_orders_the_calibration_pairs_like_mcd(speech):
    same, slow, other, sr = speech
    m = [log_mel(x).numpy() for x in (same, slow, other)]
    assert logmel_mcd(m[0], m[0]) == pytest.approx(0.0, abs=1e-5)
    assert logmel_mcd(m[0], m[1]) < logmel_mcd(m[0], m[2])
