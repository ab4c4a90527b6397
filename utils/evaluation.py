"""Speech quality numbers: mel-cepstral distortion (MCD) against a reference recording.

`mcd` is the project's one definition (shared/notes/environment.md), kept fixed so every number in
bench/ and in training curves compares with the calibrations:

    resample both to 22.05 kHz -> trim the edges quieter than 35 dB below the peak ->
    WORLD harvest F0 + CheapTrick envelope (5 ms frames) -> SPTK sp2mc, order 24, alpha 0.455 ->
    drop c0 -> exact DTW on Euclidean distance of c1..c24 ->
    mean over the path of (10 / ln 10) * sqrt(2) * distance     [dB]

Calibrations on espeak-ng Amharic: same sentence at another rate ~2.1 dB, Griffin-Lim copy synthesis
from the full-band mel ~4.4 dB, an unrelated sentence ~12 dB (bench/mcd_calibration.py).

`logmel_mcd` is a fast proxy on the model's own log-mel features (DCT of the log-mel, notes 4.3);
its values run higher than `mcd` and are only comparable with themselves.
"""
from __future__ import annotations

import hashlib
import math
import sys
import types
from collections import OrderedDict

import numpy as np

from utils.audio import resample
from utils.events import StudioError

MCD_SAMPLE_RATE = 22_050
TRIM_DB = 35.0
FRAME_PERIOD_MS = 5.0
MCEP_ORDER = 24
MCEP_ALPHA = 0.455
DB_FACTOR = 10.0 / math.log(10.0) * math.sqrt(2.0)  # 6.1419: dB per unit of cepstral distance


def _allow_pkg_resources() -> None:
    # pyworld 0.3.5 and pysptk 1.0.1 import pkg_resources only for their own version string and
    # example audio; setuptools >= 81 no longer ships that module. A stand-in with those two
    # functions lets both import on such machines (nothing else uses it).
    if "pkg_resources" in sys.modules:
        return
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        from importlib import metadata

        stub = types.ModuleType("pkg_resources")
        stub.get_distribution = lambda name: types.SimpleNamespace(version=metadata.version(name))
        stub.resource_filename = lambda package, name: name
        sys.modules["pkg_resources"] = stub


def _pyworld():
    _allow_pkg_resources()
    import pyworld

    return pyworld


def _pysptk():
    _allow_pkg_resources()
    import pysptk

    return pysptk


def trim_edges(wave: np.ndarray, top_db: float = TRIM_DB) -> np.ndarray:
    """Cut leading and trailing samples more than `top_db` below the peak amplitude."""
    peak = float(np.max(np.abs(wave))) if wave.size else 0.0
    if peak <= 0.0:
        raise StudioError("MCD needs speech: one of the clips is silent.")
    loud = np.flatnonzero(np.abs(wave) >= peak * 10.0 ** (-top_db / 20.0))
    return wave[loud[0]: loud[-1] + 1]


def mel_cepstrum(wave: np.ndarray, sr: int) -> np.ndarray:
    """WORLD envelope -> mel-cepstrum c1..c24 per 5 ms frame, [frames, 24] float64."""
    pyworld = _pyworld()
    x = resample(np.asarray(wave, dtype=np.float32), sr, MCD_SAMPLE_RATE)
    x = trim_edges(x).astype(np.float64)
    f0, t = pyworld.harvest(x, MCD_SAMPLE_RATE, frame_period=FRAME_PERIOD_MS)
    sp = pyworld.cheaptrick(x, f0, t, MCD_SAMPLE_RATE)             # power envelope [frames, fft/2+1]
    mc = _pysptk().sp2mc(sp, order=MCEP_ORDER, alpha=MCEP_ALPHA)   # [frames, 25]
    return np.ascontiguousarray(mc[:, 1:])                          # c0 (gain) excluded


# Reference clips are scored again at every evaluation: keep their cepstra (keyed by content).
_CACHE: OrderedDict[str, np.ndarray] = OrderedDict()
_CACHE_SIZE = 64


def _cached_mel_cepstrum(wave: np.ndarray, sr: int) -> np.ndarray:
    arr = np.ascontiguousarray(wave, dtype=np.float32)
    key = hashlib.sha1(arr.tobytes()).hexdigest() + f":{sr}"
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    mc = mel_cepstrum(arr, sr)
    _CACHE[key] = mc
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return mc


def dtw(cost: np.ndarray) -> tuple[float, int]:
    """Exact DTW (steps (1,0), (0,1), (1,1), unit weights) on a cost matrix [N, M].

    Returns (total cost of the best path, number of cells on it). The recursion runs over
    anti-diagonals: every cell of diagonal k depends only on diagonals k-1 and k-2, so each step
    is one vectorised numpy operation (N + M steps instead of N * M).
    """
    n, m = cost.shape
    inf = np.inf
    # acc[k] and length[k] hold diagonal i + j = k indexed by i.
    acc_prev2 = acc_prev = None
    len_prev2 = len_prev = None
    for k in range(n + m - 1):
        i = np.arange(max(0, k - m + 1), min(n, k + 1))
        j = k - i
        c = cost[i, j]
        if k == 0:
            acc, length = c.copy(), np.ones(1)
        else:
            # candidates: from (i-1, j) and (i, j-1) on diagonal k-1, from (i-1, j-1) on k-2
            up = _take(acc_prev, i - 1)
            left = _take(acc_prev, i)
            diag = _take(acc_prev2, i - 1) if k >= 2 else np.full(len(i), inf)
            cand = np.stack([diag, up, left])                      # diagonal first wins ties
            choice = np.argmin(cand, axis=0)
            best = cand[choice, np.arange(len(i))]
            lens = np.stack([_take(len_prev2, i - 1) if k >= 2 else np.zeros(len(i)),
                             _take(len_prev, i - 1), _take(len_prev, i)])
            acc, length = best + c, lens[choice, np.arange(len(i))] + 1
        acc_prev2, acc_prev = acc_prev, _Diag(acc, i[0])
        len_prev2, len_prev = len_prev, _Diag(length, i[0])
    return float(acc_prev.values[-1]), int(len_prev.values[-1])


class _Diag:
    """One anti-diagonal's values, indexed by row i starting at `start`."""

    def __init__(self, values: np.ndarray, start: int):
        self.values, self.start = values, start


def _take(diag: "_Diag", rows: np.ndarray) -> np.ndarray:
    idx = rows - diag.start
    ok = (idx >= 0) & (idx < len(diag.values))
    out = np.full(len(rows), np.inf)
    out[ok] = diag.values[idx[ok]]
    return out


def _pairwise_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distance of every frame pair, from the differences themselves: the |a|^2 + |b|^2 - 2ab
    expansion loses ~1e-7 dB to cancellation, so identical spectra would not score exactly 0."""
    from scipy.spatial.distance import cdist

    return cdist(a, b)


def mcd_from_cepstra(ref: np.ndarray, test: np.ndarray) -> float:
    total, steps = dtw(_pairwise_distance(ref, test))
    return DB_FACTOR * total / steps


def mcd(ref_wave: np.ndarray, ref_sr: int, test_wave: np.ndarray, test_sr: int) -> float:
    """Mel-cepstral distortion in dB between a reference recording and a test rendering.

    Both are mono float arrays at any sample rate; lengths may differ (DTW aligns them).
    """
    ref = _cached_mel_cepstrum(ref_wave, ref_sr)
    test = mel_cepstrum(test_wave, test_sr)
    return mcd_from_cepstra(ref, test)


def logmel_mcd(ref_logmel, test_logmel, n_coeffs: int | None = None) -> float:
    """Fast MCD proxy in dB between two natural-log magnitude mels [n_mels, frames] (numpy or torch).

    Orthonormal DCT-II along the mel axis, c0 dropped, keeping k = 1..n_coeffs (all by default);
    per frame pair (20 / ln 10) * sqrt(sum dY_k^2 / M), aligned by exact DTW, mean over the path.
    """
    from scipy.fft import dct

    ref, test = (np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x, dtype=np.float64)
                 for x in (ref_logmel, test_logmel))
    if ref.ndim != 2 or test.ndim != 2 or ref.shape[0] != test.shape[0]:
        raise ValueError(f"expected two [n_mels, frames] arrays with equal n_mels, got {ref.shape} and {test.shape}")
    n_mels = ref.shape[0]
    k = n_mels - 1 if n_coeffs is None else n_coeffs
    a = dct(ref, type=2, norm="ortho", axis=0)[1:k + 1].T / math.sqrt(n_mels)   # [frames, k]
    b = dct(test, type=2, norm="ortho", axis=0)[1:k + 1].T / math.sqrt(n_mels)
    total, steps = dtw(_pairwise_distance(a, b))
    return 20.0 / math.log(10.0) * total / steps
