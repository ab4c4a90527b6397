"""Music removal: separate speech from background music, gate clean clips, process datasets.

    from utils.separation import separate
    speech, residual = separate(audio, sr, backend="auto")

One module per idea: `api` (the call, backend choice), `spleeter`, `demucs`, `dsp` (backends),
`gate` (music detector), `chunking` (overlap-add, bounded memory), `dataset` (manifest rows,
accept/revert), `evaluation` (SI-SDR and synthetic mixtures for tests and bench/).
"""
from utils.separation.api import (BACKENDS, Choice, Separation, choose_backend, separate, separate_file,
                                  separate_verbose)
from utils.separation.gate import THRESHOLD, music_score

__all__ = ["BACKENDS", "Choice", "Separation", "THRESHOLD", "choose_backend", "music_score", "separate",
           "separate_file", "separate_verbose"]
