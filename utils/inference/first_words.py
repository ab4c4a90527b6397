"""The first sound of a stream comes from the first words of its first sentence, not from the whole sentence.

Before, the first audio waited for the whole first sentence: its flow decoder's steps over every frame, then the
vocoder over every frame (profiled on a 2-core CPU: 98 % of the wait was the model's own work on that sentence,
the decoder ~70 % and Vocos ~30 %; bench/RESULTS.md). A model that can decode an utterance in windows
(MatchaTTS.synthesise_in_windows) speaks its first FIRST_FRAMES frames first, then the rest; the two pieces meet in
a crossfade of one hop, and together they are exactly as long as the sentence spoken in one piece.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

FIRST_FRAMES = 24   # ~0.26 s of speech: what the first sound waits for (the first window's own frames)
CONTEXT = 12        # frames each window decodes past its own edge: attention and the vocoder see across the seam


def first_words(model, to_wave: Callable, ids: list[int], speaker: int, steps: int, temperature: float,
                length_scale: float, generator, hop: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """(audio, None) for the first words, then (the rest of the audio, the sentence's whole log-mel [F, T]); a
    sentence too short to split comes as one (audio, mel). `to_wave(mel)`: the voice's vocoder."""
    windows = model.synthesise_in_windows(ids, speaker, steps, temperature, length_scale, generator,
                                          first=FIRST_FRAMES, context=CONTEXT)
    first = next(windows)
    wave = to_wave(first["mel"])
    if first["cut"] == first["frames"]:  # one window: the whole sentence
        yield wave, first["mel"].cpu().numpy()
        return
    cut = first["cut"] * hop
    yield wave[:cut - hop], None  # the last hop waits for the crossfade with the second window
    rest = next(windows)
    later = to_wave(rest["mel"])
    seam = (first["cut"] - rest["start"]) * hop  # where the cut falls in the second window's audio
    ramp = np.linspace(0.0, 1.0, hop, dtype=np.float32)
    joined = wave[cut - hop:cut] * (1 - ramp) + later[seam - hop:seam] * ramp
    mel = np.concatenate([first["mel"][:, :first["cut"]].cpu().numpy(),
                          rest["mel"][:, first["cut"] - rest["start"]:].cpu().numpy()], axis=1)
    yield np.concatenate([joined, later[seam:]]).astype(np.float32), mel
