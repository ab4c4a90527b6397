"""The training engine with a third, minimal model: what an adapter must give, and what the engine guarantees
for any model (the acoustic and vocoder suites test the same on the real models, in subprocesses too)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from utils.training import checkpoint as ckpt
from utils.training.engine import Engine, LoopSettings, Phase, drain
from utils.training.faults import with_faults
from utils.training.optimization import Machine
from utils.workspace import read_json, read_jsonl

TRUE_W = torch.tensor([[2.0, -1.0, 0.5]])


class LineAdapter:
    """y = W x + b fitted to noisy samples of TRUE_W: small enough to check the engine's arithmetic exactly."""
    kind, unit, inference = "line", "sample", "model"
    oom_advice = "use fewer samples."

    def __init__(self, run_dir: Path, stop: threading.Event | None = None, **settings):
        self.run_dir, self.stop_event = run_dir, stop
        self.machine = Machine()
        for name, value in dict(device="cpu", precision="fp32", tf32=False, cudnn_benchmark=False,
                                grad_accumulation=2, probe=False, compile=False).items():
            self.machine.set(name, value, "the test's choice")
        self.settings = LoopSettings(**{"max_steps": 8, "seed": 3, "log_every": 1, "checkpoint_every": 4,
                                        "ema_decay": 0.5, **settings})
        self.drawn = 0

    def build(self, ctx):
        self.ctx = ctx
        self.model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.2)
        self.modules, self.optimizers = {"model": self.model}, {"model": optimizer}
        self.phases = [Phase("model", optimizer, list(self.model.parameters()), clip=10.0)]

    def start_data(self, step):
        pass

    def next_batch(self):
        g = torch.Generator().manual_seed(1000 + self.drawn)
        self.drawn += 1
        x = torch.randn(8, 3, generator=g)
        return x, x @ TRUE_W.T + 0.01 * torch.randn(8, 1, generator=g)

    def size(self, batch):
        return len(batch[0])

    def split(self, batch, parts):
        return list(zip(torch.tensor_split(batch[0], parts), torch.tensor_split(batch[1], parts)))

    def counts(self, batch):
        return {"samples": len(batch[0])}

    def progress(self):
        return {}

    def lr_at(self, step):
        return 0.2

    def losses(self, batch, phase, step):
        x, y = batch
        return {"loss": ((self.model(x) - y) ** 2).mean()}

    def evaluate(self, step, folder):
        return {"error": float((self.model.weight.detach() - TRUE_W).abs().sum())}

    def score(self, metrics):
        return metrics["error"]

    def describe(self):
        return ["a line"]

    def write_run_config(self):
        pass

    def checkpoint_config(self, step):
        return {"kind": "line", "step": step}

    def save_pause_s(self, step):
        return 0.0

    def state_dict(self):
        return {"drawn": self.drawn}

    def load_state_dict(self, state):
        self.drawn = state["drawn"]

    def upgrade_state(self, state, folder):
        return state


def train(adapter) -> dict:
    return drain(Engine(adapter, echo=False).run())


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r}


def test_a_new_model_trains_evaluates_and_checkpoints_through_an_adapter(tmp_path):
    result = train(LineAdapter(tmp_path / "run", eval_every=4))
    assert result["state"] == "finished" and result["step"] == 8
    curve = losses(tmp_path / "run")
    assert sorted(curve) == list(range(1, 9)) and curve[8] < curve[1] / 2
    folder = tmp_path / "run" / "checkpoints" / "step-8"
    assert {p.name for p in folder.iterdir()} == {"model.safetensors", "config.json", "trainer_state.pt"}
    state = ckpt.load_trainer_state(folder)
    assert state["format"] == 2 and state["adapter"] == {"drawn": 16}  # 8 steps x 2 accumulated batches
    weights = ckpt.load_weights(folder)
    assert torch.equal(weights["weight"], state["ema"][0])  # the checkpoint's model is the averaged weights
    assert result["best_checkpoint"].endswith("step-8") and read_json(tmp_path / "run" / "status.json")["kind"] == "line"


def test_a_stopped_run_resumes_onto_the_same_curve(tmp_path):
    straight = losses_of(tmp_path / "straight")
    stop = threading.Event()
    adapter = LineAdapter(tmp_path / "stopped", stop, checkpoint_every=100)
    original = adapter.losses

    def stop_after_three(batch, phase, step):
        if step == 2:
            stop.set()  # honoured before the next step: three steps run
        return original(batch, phase, step)

    adapter.losses = stop_after_three
    first = train(adapter)
    assert first["state"] == "stopped" and first["step"] == 3
    second = train(LineAdapter(tmp_path / "stopped", checkpoint_every=100))
    assert second["state"] == "finished" and second["step"] == 8
    resumed = losses(tmp_path / "stopped")
    assert resumed == pytest.approx(straight, rel=1e-6)


def losses_of(run_dir: Path) -> dict[int, float]:
    train(LineAdapter(run_dir))
    return losses(run_dir)


def test_an_out_of_memory_changes_how_a_step_is_computed_not_what_it_computes(tmp_path):
    """Micro-batches of at most 3 samples (8 per batch -> halved twice): the same averaged gradient, so the same
    weights as the run that never ran out of memory, and no step lost."""
    plain = LineAdapter(tmp_path / "plain")
    train(plain)
    faulty = with_faults(LineAdapter(tmp_path / "oom"), oom_above=3, measure=lambda batch: len(batch[0]))
    result = train(faulty)
    log = (tmp_path / "oom" / "train.log").read_text()
    assert "out of memory at step 0: micro-batch halved (each batch now in 2 parts)" in log
    assert "each batch now in 4 parts" in log and result["step"] == 8
    assert torch.allclose(faulty.model.weight, plain.model.weight, atol=1e-5)
    with pytest.raises(Exception, match="out of memory even with one sample per micro-batch at step 0; use fewer"):
        train(with_faults(LineAdapter(tmp_path / "never"), oom_above=-1, measure=lambda batch: len(batch[0])))
    assert read_json(tmp_path / "never" / "status.json")["state"] == "failed"


def test_a_non_finite_step_leaves_the_weights_and_halves_the_learning_rate(tmp_path):
    adapter = with_faults(LineAdapter(tmp_path / "nan", max_steps=3), nan_steps=[1])
    weights = []
    original = adapter.inner.lr_at
    adapter.inner.lr_at = lambda step: (weights.append(adapter.model.weight.detach().clone()), original(step))[1]
    result = train(adapter)
    assert result["state"] == "finished"
    assert torch.equal(weights[1], weights[2])  # the update of step 1 was skipped
    assert not torch.equal(weights[0], weights[1])
    assert "step 1: non-finite loss/gradients, step skipped, learning rate halved (x0.5)" in (
        tmp_path / "nan" / "train.log").read_text()
    failing = train(with_faults(LineAdapter(tmp_path / "fails", max_bad_steps=2), nan_steps=[2, 3, 4]))
    assert failing["state"] == "failed" and failing["step"] == 4 and "2 steps in a row" in failing["message"]
