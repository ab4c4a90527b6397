"""OmniVoice on CUDA (issue 45): a voice from a clip speaks in the card's half precision (bf16 where it has bf16,
fp16 on a T4, the package's own recommendation for inference), the same seed the same way, and the tiny random
base fine-tunes through the studio's engine in bf16 and in a T4's fp16 with its weights moving. The full-size
step (613 M parameters at the recipe's 8,192 audio tokens) is bench/omnivoice_step.py's, in gpu_suite.sh lane C.

    python -m pytest gpu_tests/test_omnivoice.py -q -s
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

from utils import hardware

CLIP_TEXT = "ሰላም ነው። ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።"


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


STEPS = 12


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tests.helpers import add_joined_clips, make_dataset
    from utils.omnivoice.tiny import write_tiny_base

    ws = make_dataset(tmp_path_factory.mktemp("omnivoice-train"), n_train=6, n_val=1, voices=("am",), max_chars=40)
    add_joined_clips(ws)  # a 3-20 s reference clip
    write_tiny_base(ws.root / "pretrained" / "tiny-omnivoice")
    return ws


@pytest.mark.parametrize("card", ["this card", "a T4"])
def test_the_tiny_base_fine_tunes_on_cuda_in_the_cards_precision_and_its_weights_move(corpus, card, request):
    """bf16 (+ SDPA) on a card with bf16, fp16 with the gradient scaler on a T4: the loop's own run, no fp32
    fallback, every logged loss finite, the checkpoint's weights away from the base's."""
    import json

    from utils.training import TrainConfig, prepare_run, run
    from utils.training.checkpoint import load_weights
    from utils.workspace import read_jsonl

    if card == "a T4":
        request.getfixturevalue("forced_t4")
    name = "omni-" + card.replace(" ", "-")
    cfg = TrainConfig(workspace=str(corpus.root), dataset="am", run=name, engine="omnivoice",
                      init="pretrained/tiny-omnivoice", max_steps=STEPS, log_every=1, eval_every=0,
                      checkpoint_every=0, evaluate=False, lr=1e-3, device="auto")
    result = run(prepare_run(cfg))
    run_dir = corpus.run_dir(name)
    log = (run_dir / "train.log").read_text()
    assert result["state"] == "finished" and result["step"] == STEPS, log[-3000:]
    resolved = json.loads((run_dir / "config.json").read_text())["resolved"]
    want = "fp16" if card == "a T4" or not hardware.query_gpus()[0].bf16 else "bf16"
    assert resolved["device"] == "cuda" and resolved["precision"] == want, resolved
    status = json.loads((run_dir / "status.json").read_text())
    assert not status.get("precision_note"), f"needed the fp32 fallback: {status['precision_note']}"
    losses = [r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    print(f"\n{card}: {want}, losses {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses and np.isfinite(losses).all()
    base = load_weights(corpus.root / "pretrained" / "tiny-omnivoice")
    after = load_weights(run_dir / "checkpoints" / f"step-{STEPS}")
    moved = [k for k in after if k in base and not torch.equal(base[k].float(), after[k].float().cpu())]
    assert len(moved) > len(after) // 2, f"only {len(moved)} of {len(after)} tensors moved"
