"""What a resumed run keeps of its record: the best and last checkpoints and its step in status.json from its first
write (the run list and the Inference picker read them), and a line in its log when its dataset changed since it last
trained."""
from __future__ import annotations

import pytest
import torch

from tests.helpers import make_dataset
from utils.datasets import load_manifest, update_rows
from utils.training import TrainConfig, prepare_run, run
from utils.training.runfiles import RunFiles
from utils.workspace import Workspace, read_json

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, max_chars=30)


def tiny(ws: Workspace, run_name: str, max_steps: int) -> TrainConfig:
    """A CPU run of a few seconds that evaluates (and so names a best checkpoint) only at its end."""
    return TrainConfig.from_dict(dict(
        workspace=str(ws.root), dataset="am", run=run_name, preset="tiny", max_steps=max_steps, lr=2e-3,
        warmup_steps=1, log_every=1, eval_every=0, checkpoint_every=100, keep_checkpoints=2, grad_accumulation=1,
        max_frames_per_batch=400, mcd="logmel", eval_clips=1, sample_clips=1, ode_steps=2, ema_decay=0.0))


def test_a_resumed_run_names_its_best_checkpoint_and_its_step_from_its_first_status_write(ws, monkeypatch):
    run(prepare_run(tiny(ws, "kept", 2)))
    run_dir = ws.run_dir("kept")
    before = read_json(run_dir / "status.json")
    assert before["best_checkpoint"].endswith("step-2") and before["best_mcd"] is not None
    written, status = [], RunFiles.status

    def spy(self, **fields):  # status.json as each of the resumed trainer's writes leaves it
        status(self, **fields)
        written.append(read_json(self.dir / "status.json"))

    rows_seen = []  # each metrics row with the step status.json said as it was written

    def metrics_spy(self, row):
        rows_seen.append((row["step"], read_json(self.dir / "status.json")["step"]))
        metrics(self, row)

    metrics = RunFiles.metrics
    monkeypatch.setattr(RunFiles, "status", spy)
    monkeypatch.setattr(RunFiles, "metrics", metrics_spy)
    result = run(prepare_run(tiny(ws, "kept", 4)))
    assert result["state"] == "finished" and result["step"] == 4
    first = written[0]
    # at the step it goes on from, not 0: the page said "is training · at step 0" of a run at step 2 after Resume
    assert first["state"] == "running" and first["step"] == 2
    # and never behind the metrics: the step above the runs, in the run list and in the summary is one number
    assert {step for step, _ in rows_seen if step} == {3, 4} and all(said == step for step, said in rows_seen if step)
    assert first["best_checkpoint"] == before["best_checkpoint"] and first["best_mcd"] == before["best_mcd"]
    assert first["last_checkpoint"].endswith("step-2")
    # until the resumed run's own evaluation (at its end), every write still names the best checkpoint
    assert all(s["best_checkpoint"] for s in written)
    assert "dataset changed" not in (run_dir / "train.log").read_text()


def test_a_resumed_run_says_that_its_dataset_changed(ws):
    run(prepare_run(tiny(ws, "changed", 2)))
    row = next(r for r in load_manifest(ws, "am") if r["split"] == "train")
    update_rows(ws, "am", [{**row, "excluded": True}])  # the curator excludes a row meanwhile
    result = run(prepare_run(tiny(ws, "changed", 3)))
    assert result["state"] == "finished" and result["step"] == 3
    log = (ws.run_dir("changed") / "train.log").read_text()
    assert "data: 4 training / 1 held-out clips" in log and "data: 3 training / 1 held-out clips" in log
    assert ("resume: the dataset changed since this run last trained: 4 -> 3 training clips, 1 -> 1 held-out "
            "(rows added, removed, excluded or included again since)") in log
