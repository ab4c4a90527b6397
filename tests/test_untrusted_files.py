"""Checkpoint files from elsewhere (an upload, a shared Drive folder) never run code when loaded: a
pickle that would is refused with a message naming the file, and its payload never runs."""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch

from tests.test_training import corpus, tiny_config  # noqa: F401  (module fixture)
from utils.events import StudioError
from utils.training import load_checkpoint, prepare_run, run
from utils.training.checkpoint import load_trainer_state, step_folders
from utils.vocoder import load_vocoder
from utils.workspace import read_json


class Payload:
    """Unpickling this creates `marker`: proof that code from the file ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_trainer_state_that_would_run_code_is_refused_with_a_clear_message(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"step": 3, "optimizer": Payload(marker)}, tmp_path / "trainer_state.pt")
    with pytest.raises(StudioError, match=r"trainer_state.pt was refused: .*could run code"):
        load_trainer_state(tmp_path)
    assert not marker.exists()


def test_resuming_from_a_tampered_checkpoint_fails_with_the_reason_and_runs_nothing(corpus, tmp_path):
    path = prepare_run(tiny_config(corpus, "tampered", max_steps=2, checkpoint_every=2))
    run(path)
    newest = step_folders(corpus.run_dir("tampered") / "checkpoints")[-1][1]
    marker = tmp_path / "ran"
    torch.save({"step": 2, "model": Payload(marker)}, newest / "trainer_state.pt")
    cfg = tiny_config(corpus, "tampered", max_steps=4, checkpoint_every=2)
    with pytest.raises(StudioError, match="refused"):
        run(prepare_run(cfg))
    status = read_json(corpus.run_dir("tampered") / "status.json")
    assert status["state"] == "failed" and "trainer_state.pt was refused" in status["message"]
    assert not marker.exists()


def test_a_checkpoint_to_fine_tune_whose_weights_are_a_pickle_is_refused(corpus, tmp_path):
    path = prepare_run(tiny_config(corpus, "donor", max_steps=1, checkpoint_every=1))
    run(path)
    upload = corpus.voices / "uploaded"  # a checkpoint someone copied into the workspace
    shutil.copytree(step_folders(corpus.run_dir("donor") / "checkpoints")[-1][1], upload)
    marker = tmp_path / "ran"
    (upload / "model.safetensors").write_bytes(pickle.dumps({"encoder.emb.weight": Payload(marker)}))
    with pytest.raises(StudioError, match="model.safetensors is not a valid safetensors file"):
        load_checkpoint(upload)
    with pytest.raises(StudioError, match="not a valid safetensors file"):
        run(prepare_run(tiny_config(corpus, "from-upload", max_steps=1, init=str(upload))))
    assert not marker.exists()


def test_a_vocoder_whose_weights_are_a_pickle_is_refused(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "config.json").write_text('{"kind": "vocos", "vocoder": {}}')
    (tmp_path / "model.safetensors").write_bytes(pickle.dumps({"w": Payload(marker)}))
    with pytest.raises(StudioError, match="not a valid safetensors file"):
        load_vocoder(tmp_path)
    assert not marker.exists()
