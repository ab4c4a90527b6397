"""fp16 that trains (issue 42): the MMS engine's GAN on this GPU forced to act as a T4 (fp16 autocast and the
gradient scaler from 65536, conftest.py's `forced_t4`), long enough for the scaler to find its scale
and for fp16 steps to move the weights. The tiny random base of tests/mms_fixtures.py: its KL's networks run fp32
(models/vits_training.py), so the scale only has to fit the decoder's and discriminators' gradients.

    python -m pytest gpu_tests/test_fp16.py -q -s     # -s: the loss scale at each step
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from utils.training import TrainConfig, prepare_run, run
from utils.training.checkpoint import load_trainer_state, load_weights
from utils.workspace import read_jsonl

STEPS = 30


@pytest.fixture(scope="module")
def one_voice(tmp_path_factory):
    from tests.helpers import make_dataset
    from tests.mms_fixtures import tiny_base

    ws = make_dataset(tmp_path_factory.mktemp("mms-fp16"), name="one", n_train=8, n_val=1, voices=("am",),
                      max_chars=60)
    tiny_base(ws.root / "pretrained" / "tiny-mms")
    return ws


def test_an_mms_fine_tune_in_fp16_updates_its_weights_after_the_scale_calibrates(one_voice, forced_t4):
    name = "mms-fp16"
    cfg = TrainConfig(workspace=str(one_voice.root), dataset="one", run=name, engine="mms", init="pretrained/tiny-mms",
                      max_steps=STEPS, log_every=1, checkpoint_every=0, evaluate=False, device="auto")
    result = run(prepare_run(cfg))
    run_dir = one_voice.run_dir(name)
    log = (run_dir / "train.log").read_text()
    assert result["state"] == "finished" and result["step"] == STEPS, log[-3000:]
    resolved = json.loads((run_dir / "config.json").read_text())["resolved"]
    assert resolved["device"] == "cuda" and resolved["precision"] == "fp16", resolved

    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss_scale" in r]
    print("\nstep: loss scale (* = skipped): " + " ".join(
        f"{r['step']}:{r['loss_scale']:g}{'' if 'loss_g' in r else '*'}" for r in rows))
    status = json.loads((run_dir / "status.json").read_text())
    assert not status.get("precision_note"), f"fp16 needed the fp32 fallback: {status['precision_note']}"
    state = load_trainer_state(run_dir / "checkpoints" / f"step-{STEPS}")
    assert state["precision_fallback"] is None and state["scaler"]["scale"] > 1.0

    trained = [r for r in rows if "loss_g" in r]  # a row without losses: its step was skipped
    assert len(rows) == STEPS and len(trained) >= STEPS // 2, [(r["step"], r["loss_scale"]) for r in rows]
    assert trained[-1]["step"] == STEPS and all(r["loss_scale"] > 1.0 for r in trained)
    assert all(np.isfinite([r["loss_g"], r["loss_d"], r["grad_norm_generator"]]).all() for r in trained)

    base, after = load_weights(one_voice.root / "pretrained" / "tiny-mms"), load_weights(run_dir / "checkpoints" /
                                                                                          f"step-{STEPS}")
    for part in ("text_encoder.", "posterior_encoder.", "flow.", "decoder."):
        names = [k for k in after if k.startswith(part) and k in base]
        assert names and any(not torch.equal(base[k].float(), after[k].float()) for k in names), part
