"""OmniVoice on CUDA (issue 45): a voice from a clip speaks in the card's half precision (bf16 where it has bf16,
fp16 on a T4, the package's own recommendation for inference), the same seed the same way, and the tiny random
base fine-tunes through the studio's engine in bf16 and in a T4's fp16 with its weights moving. The full-size
step (613 M parameters at the recipe's 8,192 audio tokens) is bench/omnivoice_step.py's, in gpu_suite.sh lane C.

    python -m pytest gpu_tests/test_omnivoice.py -q -s
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from utils import hardware

CLIP_TEXT = "ሰላም ነው። ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።"


@pytest.fixture
def forced_t4(monkeypatch):
    """This GPU reported as a T4 (compute 7.5, no bf16): the settings a T4 gets, run on the real card."""
    real = hardware.query_gpus()
    monkeypatch.setattr(hardware, "query_gpus", lambda: [replace(g, name="Tesla T4 (forced)", compute_capability="7.5")
                                                         for g in real])


@pytest.fixture(scope="module")
def clip_voice(tmp_path_factory):
    from tests.helpers import espeak_amharic
    from utils.omnivoice.speech import make_voice
    from utils.omnivoice.tiny import write_tiny_base
    from utils.workspace import Workspace

    root = tmp_path_factory.mktemp("omnivoice-gpu")
    ws = Workspace.open(root / "ws")
    base = write_tiny_base(ws.root / "pretrained" / "omnivoice")
    clip = espeak_amharic(CLIP_TEXT, root / "clip.wav")
    return ws, make_voice(ws, "clip", clip, CLIP_TEXT, base)


@pytest.mark.parametrize("card", ["this card", "a T4"])
def test_a_clip_voice_speaks_on_cuda_in_half_precision_the_same_way_twice(clip_voice, card, request):
    from utils.inference.speech import Voice

    if card == "a T4":
        request.getfixturevalue("forced_t4")
    voice = Voice.load(clip_voice[1], device="cuda")
    dtype = next(voice.model.parameters()).dtype
    want = torch.float16 if card == "a T4" or not hardware.query_gpus()[0].bf16 else torch.bfloat16
    assert dtype == want and next(voice.model.parameters()).is_cuda
    first, sr, info = voice.synthesize("ሰላም ነው። እንዴት ነህ?", steps=8, seed=3)
    again, _, _ = voice.synthesize("ሰላም ነው። እንዴት ነህ?", steps=8, seed=3)
    print(f"\n{card}: {dtype}, {len(first) / sr:.2f} s of speech, rtf {info['rtf']:.3f}")
    assert info["spoken"] == 2 and np.isfinite(first).all() and np.abs(first).max() > 0
    assert np.array_equal(first, again)
