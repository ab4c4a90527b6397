"""The training loop with a third, minimal model: what an adapter must give, and what the loop guarantees
for any model (the acoustic and vocoder suites test the same on the real models, in subprocesses too)."""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from utils.jobs import torchrun
from utils.training import checkpoint as ckpt
from utils.training.loop import TrainingLoop, LoopSettings, Phase, drain
from utils.training.faults import with_faults
from utils.training.optimization import Machine
from utils.workspace import atomic_write_json, read_json, read_jsonl

ROOT = Path(__file__).resolve().parent.parent
TRUE_W = torch.tensor([[2.0, -1.0, 0.5]])


class LineAdapter:
    """y = W x + b fitted to noisy samples of TRUE_W: small enough to check the loop's arithmetic exactly."""
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

    def state_dict(self):
        return {"drawn": self.drawn}

    def load_state_dict(self, state):
        self.drawn = state["drawn"]

    def upgrade_state(self, state, folder):
        return state


class NanLossOnRankOne(LineAdapter):
    """Rank 1's loss at step 1 is NaN in a term that carries no gradient: its gradients stay finite, so only the
    loss says that this rank's step went wrong."""

    def losses(self, batch, phase, step):
        losses = super().losses(batch, phase, step)
        if step == 1 and self.ctx.dist.rank == 1:
            losses["loss"] = losses["loss"] + float("nan") * losses["loss"].detach()
        return losses


def train(adapter) -> dict:
    return drain(TrainingLoop(adapter, echo=False).run())


def stop_during(adapter, step: int, stop: threading.Event):
    """`adapter`, whose run is asked to stop while step `step` runs (honoured before the next one)."""
    original = adapter.losses

    def stopping(batch, phase, at):
        if at == step:
            stop.set()
        return original(batch, phase, at)

    adapter.losses = stopping
    return adapter


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
    evaluations = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "error" in m]
    assert [m["weights"] for m in evaluations] and state["winner"] == evaluations[-1]["weights"]
    # the checkpoint's model is whichever of the averaged and the raw weights the evaluation found better
    held = state["ema"][0] if state["winner"] == "ema" else state["modules"]["model"]["weight"]
    assert torch.equal(weights["weight"], held)
    status = read_json(tmp_path / "run" / "status.json")
    assert result["best_checkpoint"].endswith("step-8") and status["kind"] == "line"
    assert isinstance(status["eval_s"], float) and status["eval_s"] >= 0  # an evaluation's seconds (a few ms here,
    # 0.0 once rounded), for a resume's ETA before it times one of its own


def test_the_log_says_what_each_number_measures_with_its_unit(tmp_path):
    """The Training tab's log read "loss 6.1 dur 1.4 prior 1.6 cfm 3.1 lr 1.55e-03 gnorm 19.61 12.8 samples/s wait 1%"
    and "mcd_ema": names a curator cannot read. Each number now comes with its words (the curves' names, the metric's
    own in brackets) and its unit."""
    from utils.training.words import said

    train(LineAdapter(tmp_path / "run", eval_every=4))
    log = (tmp_path / "run" / "train.log").read_text()
    step = next(line for line in log.splitlines() if " step 4/8: " in line)
    assert "errors (lower is better) total (loss) " in step and "learning rate (lr) 2.00e-01" in step
    assert "size of the update (grad_norm) " in step and " clips a second; " in step
    # the time left ends the line once it is a second or more (the suite's load can make it so)
    assert re.search(r"% of the time waiting for data(; about \d+ s left)?$", step), step
    assert " gnorm " not in step and "samples/s" not in step
    assert "eval step 4: " in log and "(lower is better)" in log.split("eval step 4: ")[1].splitlines()[0]
    assert said("mcd_ema", 9.7412) == "smoothed model (mcd_ema) 9.74 dB"
    assert said("val_cer", 0.123) == "held-out: letters misheard in the synthesised speech (val_cer) 12%"
    assert said("weights", "ema") == "kept the smoothed model (weights ema)"
    assert said("val_cfm", 3.05) == "held-out: sound detail (val_cfm) 3.05"


@pytest.mark.parametrize("decay,winner", [(0.99, "raw"), (0.5, "ema")])
def test_the_averaged_and_the_raw_weights_are_both_scored_and_the_better_one_is_kept(tmp_path, decay, winner):
    """An average that lags (decay 0.99 over 8 steps is mostly the random start) loses to the raw weights; one that
    smooths the noisy last steps (a large step size on noisy data) wins. The checkpoint holds the winner."""
    class Noisy(LineAdapter):
        def lr_at(self, step):
            return 0.2 if decay > 0.9 else 0.9  # 0.9: the raw weights jump around the answer

    result = train(Noisy(tmp_path / "run", eval_every=8, ema_decay=decay, max_steps=8))
    row = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "error" in m][-1]
    assert row["weights"] == winner, row
    state = ckpt.load_trainer_state(Path(result["best_checkpoint"]))
    held = state["ema"][0] if winner == "ema" else state["modules"]["model"]["weight"]
    assert torch.equal(ckpt.load_weights(Path(result["best_checkpoint"]))["weight"], held)


def test_a_stopped_run_resumes_onto_the_same_curve(tmp_path):
    straight = losses_of(tmp_path / "straight")
    stop = threading.Event()
    first = train(stop_during(LineAdapter(tmp_path / "stopped", stop, checkpoint_every=100), 2, stop))
    assert first["state"] == "stopped" and first["step"] == 3
    second = train(LineAdapter(tmp_path / "stopped", checkpoint_every=100))
    assert second["state"] == "finished" and second["step"] == 8
    resumed = losses(tmp_path / "stopped")
    assert resumed == pytest.approx(straight, rel=1e-6)
    # the averaged weights too go on from where they were (the adapter builds a fresh model; only the checkpoint's
    # trainer state holds the average of the steps before the stop)
    ema = [ckpt.load_trainer_state(tmp_path / run / "checkpoints" / "step-8")["ema"] for run in ("straight", "stopped")]
    assert all(torch.allclose(a, b, rtol=1e-6, atol=0) for a, b in zip(*ema, strict=True)), ema


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


def test_a_resumed_run_keeps_its_out_of_memory_and_non_finite_counters(tmp_path):
    """Stopped after a NaN step, then resumed into another: two non-finite steps in a row, as in the run that never
    stopped; and the halved micro-batch waits as long before it grows back."""
    def faulty(adapter: LineAdapter):
        return with_faults(adapter, oom_above=3, nan_steps=[2, 3], measure=lambda batch: len(batch[0]))

    def line(run_dir: Path, stop: threading.Event | None = None) -> LineAdapter:
        return LineAdapter(run_dir, stop, max_bad_steps=2, checkpoint_every=100)

    straight = TrainingLoop(faulty(line(tmp_path / "straight")), echo=False)
    assert drain(straight.run())["state"] == "failed"  # at step 4: steps 2 and 3 were both non-finite
    stop = threading.Event()
    first = drain(TrainingLoop(faulty(stop_during(line(tmp_path / "stopped", stop), 2, stop)), echo=False).run())
    assert first["state"] == "stopped" and first["step"] == 3
    resumed = TrainingLoop(faulty(line(tmp_path / "stopped")), echo=False)
    result = drain(resumed.run())
    assert result["state"] == "failed" and result["step"] == 4 and "2 steps in a row" in result["message"]
    counters = ("step", "split", "good_steps", "grow_after", "bad_steps", "lr_scale")
    assert [getattr(resumed, c) for c in counters] == [getattr(straight, c) for c in counters]
    assert straight.split == 4 and straight.good_steps == 4  # the out-of-memory of step 0 was in the first half


class Plateau(LineAdapter):
    """A held-out score that never improves after the first evaluation: the run is overfitting from there."""

    def evaluate(self, step, folder):
        return {"error": 1.0}


def test_a_resumed_run_keeps_counting_evaluations_without_improvement(tmp_path):
    """Patience 3: the straight run stops at step 4 (no better score at 2, 3, 4). Stopped at step 2 and resumed, the
    count goes on from 1, so it stops at step 4 too; counted again from 0 it trained to step 5."""
    def plateau(run_dir: Path, stop: threading.Event | None = None) -> Plateau:
        return Plateau(run_dir, stop, eval_every=1, patience=3, on_overfit="stop", checkpoint_every=100, ema_decay=0.0)

    straight = train(plateau(tmp_path / "straight"))
    assert straight["step"] == 4 and "finished early at step 4" in straight["message"]
    stop = threading.Event()
    assert train(stop_during(plateau(tmp_path / "stopped", stop), 1, stop))["step"] == 2
    resumed = train(plateau(tmp_path / "stopped"))
    assert resumed["step"] == 4 and "finished early at step 4" in resumed["message"], resumed


class ResumePointOnly(LineAdapter):
    """Writes the step its rank resumes from, then ends the run (what follows is not under test)."""

    def start_data(self, step):
        (self.run_dir / f"start-{self.ctx.dist.rank}").write_text(str(step))
        raise SystemExit(0)


def test_every_process_resumes_from_the_checkpoint_that_rank_0_recovered(tmp_path):
    """A save of step 4 cut short left step 4 complete under its `.old-PID` name: rank 0 puts it back (slowly here)
    while the other rank must not pick step 2 meanwhile; they wait for it, so both go on from step 4."""
    first = train(LineAdapter(tmp_path / "run", max_steps=4, checkpoint_every=2, keep_checkpoints=3))
    assert first["state"] == "finished"
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "step-4").rename(checkpoints / ".step-4.old-123")
    script = tmp_path / "resume_two.py"
    script.write_text("import sys, time\nfrom pathlib import Path\nfrom utils.training import checkpoint as ckpt\n"
                      "from tests.test_training_loop import ResumePointOnly, train\n"
                      "recover = ckpt.recover\nckpt.recover = lambda folder: (time.sleep(3), recover(folder))[1]\n"
                      "train(ResumePointOnly(Path(sys.argv[1])))\n")
    cmd = torchrun(2, str(script), str(tmp_path / "run"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert [(tmp_path / "run" / f"start-{rank}").read_text() for rank in (0, 1)] == ["4", "4"]


def test_a_non_finite_loss_on_one_of_two_processes_skips_the_step_on_both(tmp_path):
    """Rank 1's loss is NaN with finite gradients: the ranks agree on the loss as on the gradients, so both skip
    the update and their weights stay identical (a rank that stepped alone would fail the check at the save)."""
    script = tmp_path / "train_two.py"
    script.write_text("import sys\nfrom pathlib import Path\nfrom tests.test_training_loop import NanLossOnRankOne, train\n"
                      "result = train(NanLossOnRankOne(Path(sys.argv[1]), max_steps=4, checkpoint_every=2))\n"
                      "sys.exit(0 if result['state'] == 'finished' else 1)\n")
    cmd = torchrun(2, str(script), str(tmp_path / "run"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (tmp_path / "run" / "train.log").read_text()  # rank 0's, whose own loss was finite
    assert "step 1: non-finite loss/gradients, step skipped, learning rate halved (x0.5)" in log
    assert "weights identical on all 2 processes at step 2" in log and "at step 4" in log


class Overflow(torch.autograd.Function):
    """The identity, whose gradient is infinite: a finite loss whose fp16 gradients overflow."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


class Fp16Line(LineAdapter):
    """The line in fp16 as a T4 runs it (autocast, the gradient scaler from 65536); at the steps `overflows(step)`
    says, its fp16 gradients overflow (in fp32 they fit)."""

    def __init__(self, run_dir: Path, overflows=lambda step: False, **settings):
        super().__init__(run_dir, **{"checkpoint_every": 100, **settings})
        self.machine.set("precision", "fp16", "the test's choice")
        self.overflows = overflows

    def losses(self, batch, phase, step):
        x, y = batch
        with self.ctx.autocast():
            prediction = self.model(x)
        if self.machine.precision == "fp16" and self.overflows(step):
            prediction = Overflow.apply(prediction)
        return {"loss": ((prediction.float() - y) ** 2).mean()}


@pytest.mark.parametrize("overflows, why", [(lambda step: step % 2 == 1, "4 of the last 8 steps had non-finite"),
                                            (lambda step: True, "even with the loss scale below 1")])
def test_fp16_that_does_not_train_goes_on_in_fp32_though_its_failures_are_never_many_in_a_row(tmp_path, overflows,
                                                                                              why):
    """Overflows at every other step reset the count of failures in a row (max_bad_steps) at each good step while
    half the steps do nothing; overflows at every step are the scaler's calibration while the scale is 1 or more.
    Either way fp16 is not training: the run goes on in fp32 (said once, kept in its checkpoints) and finishes."""
    trainer = TrainingLoop(Fp16Line(tmp_path / "run", overflows, max_steps=24, max_bad_steps=3), echo=False)
    result = drain(trainer.run())
    assert result["state"] == "finished" and result["step"] == 24
    log = (tmp_path / "run" / "train.log").read_text()
    assert log.count("continuing in fp32 from the last good weights") == 1 and why in log, log[-3000:]
    fallback = ckpt.load_trainer_state(tmp_path / "run" / "checkpoints" / "step-24")["precision_fallback"]
    assert fallback["from"] == "fp16" and why in fallback["why"] and fallback["step"] < 24
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    assert rows[-1]["step"] == 24 and rows[-1]["loss_scale"] == 1.0 and rows[-1]["loss"] < rows[0]["loss"]


def test_fp16_calibrating_its_loss_scale_is_not_a_failure(tmp_path, monkeypatch):
    """A scale far too high (2^30) skips the first steps in a row until the gradients fit, then trains: no fp32."""
    from utils.training import optimization

    monkeypatch.setattr(optimization, "grad_scaler", lambda m: torch.amp.GradScaler("cpu", init_scale=2.0 ** 30))
    result = train(Fp16Line(tmp_path / "run", max_steps=30, max_bad_steps=3))
    assert result["state"] == "finished" and result["step"] == 30
    log = (tmp_path / "run" / "train.log").read_text()
    assert log.count("gradients overflowed, step skipped") > 8 and "fp32" not in log, log[-3000:]
    state = ckpt.load_trainer_state(tmp_path / "run" / "checkpoints" / "step-30")
    assert state["precision_fallback"] is None and 1.0 <= state["scaler"]["scale"] < 2.0 ** 30
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    assert rows[-1]["step"] == 30 and rows[-1]["loss_scale"] == state["scaler"]["scale"] and rows[-1]["loss"] < 0.1


def test_a_resumed_fp16_run_keeps_its_window_of_skipped_steps(tmp_path):
    """Gradients that overflow at every odd step: fp16 is not training, and the straight run goes on in fp32 once
    half of the last 8 steps were skipped. Stopped at step 5 and resumed, the window of skipped steps goes on (a
    window begun anew at the resume took the first skips for the scale's calibration and fell back later)."""
    def odd(run_dir: Path, stop: threading.Event | None = None) -> Fp16Line:
        line = Fp16Line(run_dir, lambda step: step % 2 == 1, max_steps=24, max_bad_steps=3)
        line.stop_event = stop
        return line

    def fallback(run_dir: Path) -> dict:
        return ckpt.load_trainer_state(run_dir / "checkpoints" / "step-24")["precision_fallback"]

    assert train(odd(tmp_path / "straight"))["state"] == "finished"
    stop = threading.Event()
    assert train(stop_during(odd(tmp_path / "stopped", stop), 4, stop))["step"] == 5
    assert ckpt.load_trainer_state(tmp_path / "stopped" / "checkpoints" / "step-5")["precision_fallback"] is None
    assert train(odd(tmp_path / "stopped"))["state"] == "finished"
    assert fallback(tmp_path / "stopped") == fallback(tmp_path / "straight")


def _average_in_buckets(rank: int, init: str, out: str) -> None:
    """One of two gloo processes: its own gradients and loss, averaged in buckets of 64 bytes."""
    import torch.distributed as torch_dist

    from utils.training import ddp

    torch_dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        ddp.BUCKET_BYTES = 64  # 16 fp32 numbers: the tensors below (and the loss) take 3 buckets, the 30 alone
        g = torch.Generator().manual_seed(rank)
        params = [torch.nn.Parameter(torch.zeros(*shape)) for shape in ((3, 4), (30,), (2,), (5,), (1,))]
        for p in params[:-1]:
            p.grad = torch.randn(p.shape, generator=g, device=g.device)  # the last has none: zeros on both ranks
        loss = ddp.average_gradients(params, ddp.Dist(rank, 0, 2), torch.tensor(1.0 + rank))
        torch.save({"grads": [p.grad for p in params], "loss": loss}, f"{out}/{rank}.pt")
    finally:
        torch_dist.destroy_process_group()


def test_gradients_are_averaged_over_ranks_in_bounded_buckets(tmp_path):
    """A flat copy of every gradient at once (a second gradient's worth of memory, outside the out-of-memory retry)
    could end a big model's multi-GPU run; buckets bound it. Two real gloo processes: each ends with the mean."""
    import torch.multiprocessing as mp

    from utils.training.ddp import buckets

    assert [len(b) for b in buckets([torch.zeros(3, 4), torch.zeros(30), torch.zeros(2), torch.zeros(5),
                                     torch.zeros(1)], 64)] == [1, 1, 3]
    mp.spawn(_average_in_buckets, args=(f"file://{tmp_path}/store", str(tmp_path)), nprocs=2, join=True)
    shapes = ((3, 4), (30,), (2,), (5,))
    drawn = []
    for rank in (0, 1):  # what each rank drew, in its order
        g = torch.Generator().manual_seed(rank)
        drawn.append([torch.randn(shape, generator=g, device=g.device) for shape in shapes])
    want = [(a + b) / 2 for a, b in zip(*drawn)] + [torch.zeros(1)]
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert float(got["loss"]) == 1.5
        for grad, expected in zip(got["grads"], want, strict=True):
            torch.testing.assert_close(grad, expected)


def test_a_save_on_a_tight_disk_never_holds_two_trainer_states(tmp_path, monkeypatch):
    """F5 wrote its new 5.4 GB trainer state before the previous one was pruned: a free 15 GB Drive filled around
    step 500-1000. With too little free space for both, the previous state goes first, and the log says what was
    kept; with room for both it stays until the new one is written (a save cut short then still resumes)."""
    states_at_save = []
    real_save = ckpt.save_checkpoint

    class Large(LineAdapter):
        state_newest_only = True

        def save_checkpoint(self, folder, weights, config, trainer_state):
            states_at_save.append(len(list(folder.parent.glob("step-*/trainer_state.pt"))))
            return real_save(folder, weights, config, trainer_state)

    free = {"bytes": 10**12}
    monkeypatch.setattr(ckpt.shutil, "disk_usage", lambda path: SimpleNamespace(free=free["bytes"]))
    roomy = train(Large(tmp_path / "roomy", checkpoint_every=2, keep_checkpoints=3))
    assert roomy["state"] == "finished" and states_at_save[0] == 0 and set(states_at_save[1:]) == {1}
    free["bytes"] = 100  # less than a checkpoint
    states_at_save.clear()
    assert train(Large(tmp_path / "tight", checkpoint_every=2, keep_checkpoints=3))["state"] == "finished"
    assert len(states_at_save) >= 4 and set(states_at_save) == {0}
    log = (tmp_path / "tight" / "train.log").read_text()
    assert log.count("trainer state was removed before writing it") == len(states_at_save) - 1
    assert "step-2's trainer state" in log
    assert ckpt.latest_resumable(tmp_path / "tight" / "checkpoints").name == "step-8"


def test_the_speed_after_an_evaluation_leaves_the_evaluation_out(tmp_path):
    """samples/s of the stretch after an evaluation counted the evaluation's time too (0.45 samples/s at a CPU
    run's step 65, after a 34 s evaluation at step 60, beside about 2 elsewhere)."""

    class SlowToEvaluate(LineAdapter):
        def evaluate(self, step, folder):
            time.sleep(0.5)
            return super().evaluate(step, folder)

    train(SlowToEvaluate(tmp_path / "run", max_steps=4, log_every=2, eval_every=2, checkpoint_every=0))
    rows = {r["step"]: r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "samples_per_s" in r}
    # steps 3-4 trained 32 samples; with the 0.5 s evaluation at step 2 in their window they would read under 64/s
    assert rows[4]["samples_per_s"] > 128, rows[4]


def test_a_fine_tunes_eta_counts_the_evaluations_ahead_from_its_scored_start(tmp_path):
    """A fine-tune scores its base before step 1: that evaluation's time stands for those ahead until one is
    timed (before, a fresh run's ETA left every evaluation out until its first, minutes on a CPU)."""
    class SlowStart(LineAdapter):
        def evaluate(self, step, folder):
            time.sleep(1.2 if step == 0 else 0)
            return super().evaluate(step, folder)

    run = tmp_path / "run"
    train(SlowStart(run, max_steps=3, eval_every=0, eval_at_start=True, checkpoint_every=0, ema_decay=0.0))
    step_2 = next(line for line in (run / "train.log").read_text().splitlines() if "step 2/3:" in line)
    assert re.search(r"; about \d+ s left$", step_2), step_2  # one step and the evaluation at the end: >= 1.2 s
    assert read_json(run / "status.json")["eval_s"] >= 0  # kept for a resume (the end's evaluation, timed, wins)


def test_a_fresh_runs_eta_counts_the_evaluations_ahead_as_the_datasets_earlier_runs_took_them(tmp_path):
    """A run from zero evaluates first at its first scheduled step: until then its ETA left every evaluation out (154 s
    said at step 100 of a CPU run with 223 s left). An earlier run of the dataset here that timed its evaluations
    stands for them; a run of another dataset does not."""
    from utils.workspace import append_jsonl, atomic_write_json

    ws = tmp_path / "ws"
    earlier = ws / "runs" / "earlier"
    atomic_write_json(earlier / "config.json", {"train": {"engine": "matcha", "dataset": "am"},
                                                "resolved": {"device": "cpu"}})
    for step, seconds in ((50, 30.0), (100, 20.0), (150, 20.0)):  # the first loads the vocoder: left out
        append_jsonl(earlier / "metrics.jsonl", {"step": step, "eval_s": seconds})

    def said_at_step_2(dataset: str) -> str:
        run = ws / "runs" / f"fresh-{dataset}"
        atomic_write_json(run / "config.json", {"train": {"workspace": str(ws), "engine": "matcha",
                                                          "dataset": dataset}})
        train(LineAdapter(run, max_steps=4, eval_every=2, checkpoint_every=0, ema_decay=0.0))
        return next(line for line in (run / "train.log").read_text().splitlines() if "step 2/4:" in line)

    assert said_at_step_2("am").endswith("; about 20 s left")  # the evaluation at step 4 (step 2's is not yet timed)
    assert "left" not in said_at_step_2("other")  # none timed for it: the steps' milliseconds, not said


def test_the_eta_counts_the_steps_and_evaluations_left_never_compilation():
    """`eta = steps left x mean of the last 50 step times` made a 20,000-step run say 794 h after a 143 s first step
    (compilation), and left evaluations out. Steps that built a graph are not the run's pace; evaluations are."""
    from utils.training.eta import Eta

    eta = Eta(LoopSettings(max_steps=100, eval_every=40, early_evals=(10,)))
    eta.step(143.0, compiled=True)
    assert eta.seconds(1) is None  # no pace known yet: no ETA rather than a wrong one
    eta.step(0.5, compiled=False)
    eta.step(0.7, compiled=False)
    assert eta.seconds(3) == round(97 * 0.6, 1)
    eta.step(60.0, compiled=True)  # a later shape's graph: still not the pace
    eta.evaluation(30.0)  # the early one, at step 10
    assert eta.evaluations_left(10) == 3  # at 40, 80 and the end
    assert eta.seconds(10) == round(90 * 0.6 + 3 * 30.0, 1)
    assert Eta(LoopSettings(max_steps=80, eval_every=40)).evaluations_left(10) == 2  # the end is the one at 80

    budget = Eta(LoopSettings(max_steps=1000), deadline=100.0)  # a time budget that ends the run at t = 100 s
    budget.step(1.0, compiled=True)
    budget.step(1.0, compiled=False)
    assert budget.seconds(10, now=40.0) == 60.0  # the budget's 60 s left, not the 990 steps' 990 s
    budget.evaluation(5.0)
    assert budget.seconds(10, now=40.0) == 65.0 and budget.seconds(10, now=150.0) == 5.0  # and the end's evaluation
    assert budget.seconds(990, now=40.0) == 15.0  # the steps end it first

    # the first step of a start (loaders starting, caches filling; compiled or not) is not the pace: a 2-core CPU's
    # said 1,490 s for a run that ended 189 s later; a resume counts the evaluations its earlier starts timed
    resumed = Eta(LoopSettings(max_steps=100, eval_every=50), evaluation_s=12.0)
    resumed.step(9.0, compiled=False)
    assert resumed.seconds(1) is None
    resumed.step(0.5, compiled=False)
    assert resumed.seconds(2) == round(98 * 0.5 + 2 * 12.0, 1)
    resumed.evaluation(8.0)  # one timed in this start wins
    assert resumed.seconds(50) == round(50 * 0.5 + 8.0, 1) and resumed.evaluation_seconds() == 8.0

    fresh = Eta(LoopSettings(max_steps=100, eval_every=50))  # a fine-tune: its base scored (averaged and raw: x2)
    fresh.scored_start(3.0, times=2)
    fresh.step(9.0, compiled=False)
    fresh.step(0.5, compiled=False)
    assert fresh.seconds(2) == round(98 * 0.5 + 2 * 6.0, 1)


class SlowLine(LineAdapter):
    """Steps of ~0.1 s (two micro-batches of 50 ms): a time budget of seconds ends the run after some."""

    def losses(self, batch, phase, step):
        time.sleep(0.05)
        return super().losses(batch, phase, step)


def test_a_time_budget_ends_the_run_as_finished_evaluated_and_saved_and_resume_trains_on(tmp_path):
    """max_minutes: a curator on Colab sets a budget under the session's time left, so the voice is evaluated and
    saved before the machine is taken back (a session that simply ends loses everything since the last checkpoint);
    the run is finished but not done, and Resume trains on."""
    run = tmp_path / "run"
    result = train(SlowLine(run, max_steps=10_000, eval_every=0, checkpoint_every=0, max_seconds=3.0))
    step = result["step"]
    assert result["state"] == "finished" and 2 <= step < 100, result
    assert result["message"] == (f"finished at step {step} of 10000: its time budget of 0.05 min is spent (resume it "
                                 "to train on)")
    assert "time limit: training ends by " in (run / "train.log").read_text()  # said at the start, with its hour
    # each step line says the time left (the command line's only ETA was status.json's eta_s): the budget's here
    assert re.search(r" step 2/10000: .*waiting for data; about \d s left\n", (run / "train.log").read_text())
    status = read_json(run / "status.json")
    assert status["ended_by"] == "time budget" and status["state"] == "finished" and status["step"] == step
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl") if "error" in m] == [step]  # evaluated at its end
    assert result["last_checkpoint"].endswith(f"step-{step}") and result["best_checkpoint"].endswith(f"step-{step}")

    again = train(SlowLine(run, max_steps=step + 3, eval_every=0, checkpoint_every=0))
    assert again["state"] == "finished" and again["step"] == step + 3
    assert sorted(losses(run)) == list(range(1, step + 4))  # went on from its checkpoint, no step done twice
    assert read_json(run / "status.json")["ended_by"] is None  # this start trained every step


class NewShapes(LineAdapter):
    """Its model compiled (a slow stand-in backend: FIRST_GRAPH_S for the first graph, as a real first compilation
    takes longest, then GRAPH_S a graph) and each batch a size of its own, so that every step would build a graph, as
    a real run's first steps meet the buckets of its shape plan one after another."""
    FIRST_GRAPH_S, GRAPH_S = 2.5, 1.0

    def __init__(self, run_dir: Path, **settings):
        super().__init__(run_dir, **settings)
        self.machine.set("compile", True, "the test's choice")

    def compile_targets(self):
        return [self.model]

    def next_batch(self):
        x, y = super().next_batch()
        grow = torch.randn(2 * self.drawn, 3)  # two micro-batches of 4 + drawn rows: a new shape each step
        return torch.cat([x, grow]), torch.cat([y, grow @ TRUE_W.T])


def test_near_its_time_limit_a_run_builds_no_new_graph_and_ends_on_time(tmp_path, monkeypatch):
    """A graph takes minutes to build on a GPU machine's CPU: one started just before the time limit ended the run
    minutes late (the GPU suite's time-to-quality lane was killed before its last evaluation). Once less time is
    left than a graph of this run took, a shape not compiled yet runs eager: the steps go on, the graphs stop."""

    from utils.training import compiled

    built = []

    def slow(graph, example_inputs):  # the first graph 3 s, the others 1 s
        time.sleep(1.0 if built else 3.0)
        built.append(time.time())
        return graph.forward

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": slow})
    torch._dynamo.reset()
    run = tmp_path / "run"
    result = train(NewShapes(run, max_steps=10_000, eval_every=0, checkpoint_every=0, ema_decay=0.0,
                             max_seconds=5.3))  # step 1 builds 2 graphs (its 2 micro-batches' shapes) in 4 s and
    # more, 2 s a graph by the watch's measure: at most 1.3 s are left, always less. (With 2.5 s + 1 s graphs and 6 s,
    # then 5.5 s, the time left and a graph's time were equal to a few tenths, and whether step 2 compiled hung on
    # them: it failed on a quiet machine and under the suite's load.)
    assert result["state"] == "finished" and "its time budget" in result["message"], result
    log = (run / "train.log").read_text()
    assert "a batch shape not compiled yet runs uncompiled" in log, log
    assert 1 <= len(built) < result["step"], (len(built), result["step"])  # later steps' new shapes ran eager
    assert all(r["loss"] < 100 for r in read_jsonl(run / "metrics.jsonl") if "loss" in r)


class Worsening(LineAdapter):
    """A fine-tune that moves away from its base: each evaluation scores worse than the last, step 0 the best."""

    def evaluate(self, step, folder):
        return {"error": float(step)}


def test_a_fine_tune_worse_than_its_base_is_named_after_a_stop_and_resume_too(tmp_path):
    """The base's score at step 0 is what later evaluations are compared with; a resumed run compared with nothing
    (its step 0 was in the first part), so a fine-tune made worse went unnamed once it was stopped and resumed."""
    def worsening(stop: threading.Event | None = None) -> Worsening:
        return Worsening(tmp_path / "run", stop, eval_at_start=True, eval_every=2, checkpoint_every=2, ema_decay=0.0)

    stop = threading.Event()
    status = tmp_path / "run" / "status.json"
    assert train(stop_during(worsening(stop), 1, stop))["step"] == 2
    assert "at step 2 is worse than the base's own 0.00" in read_json(status)["start_note"]
    atomic_write_json(status, {**read_json(status), "start_note": None})  # said again after the resume, not left over
    assert train(worsening())["step"] == 8
    assert "at step 8 is worse than the base's own 0.00" in (read_json(status).get("start_note") or "")
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "error" in r] == [0, 2, 4, 6, 8]
