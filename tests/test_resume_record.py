"""What a resumed run keeps of its record: the best and last checkpoints and its step in status.json from its first
write (the run list and the Inference picker read them), a line in its log when its dataset changed since it last
trained, the padding its batches were grouped with, and the batch and learning rate its probe chose (also on another
number of GPUs, said in its log)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.helpers import make_dataset
from utils import hardware
from utils.datasets import load_manifest, update_rows
from utils.training import TrainConfig, prepare_run, run
from utils.training import checkpoint as ckpt
from utils.training import optimization as opt
from utils.training.ddp import Dist
from utils.training.runfiles import RunFiles
from utils.workspace import Workspace, read_json, read_jsonl

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
    # (step 2: the start's time before its first step, start_s; 3 and 4: the steps)
    assert {step for step, _ in rows_seen if step} == {2, 3, 4} and all(said == step for step, said in rows_seen if step)
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


def test_a_resumed_run_keeps_the_padding_its_batches_were_grouped_with(ws, monkeypatch):
    """A short trial pads clips to 4 frames; resumed with more steps, compile would come on and pad to 64, which
    regroups the epoch the run is in. The resume keeps the trial's 4."""
    run(prepare_run(tiny(ws, "padded", 2)))
    resolve = opt.resolve

    def as_if_compiling(*args, **kwargs):  # what resolve says when compile comes on, without compiling on the CPU
        m = resolve(*args, **kwargs)
        m.set("length_multiple", 64, "compile")
        return m

    monkeypatch.setattr(opt, "resolve", as_if_compiling)
    assert run(prepare_run(tiny(ws, "padded", 3)))["step"] == 3
    config = read_json(ws.run_dir("padded") / "config.json")
    assert config["resolved"]["length_multiple"] == 4, config["reasons"]["length_multiple"]
    assert config["reasons"]["length_multiple"].startswith("kept from the run being resumed")
    state = ckpt.load_trainer_state(ws.run_dir("padded") / "checkpoints" / "step-3")["adapter"]
    assert state["length_multiple"] == 4 and state["processes"] == 1 and state["lr"] == 2e-3


def test_a_run_resumed_with_compile_on_keeps_the_batches_it_trained_on(tmp_path, monkeypatch):
    """A run that trained eager on frame-filled batches, resumed with compile on (as "auto" may decide with more steps
    or a compile time measured since), goes on with the same batches: the data order, and so the loss curve, are
    those of a run never stopped; planned shapes would have regrouped the epoch it is in."""
    from utils.training import compiled

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": lambda graph, example_inputs: graph.forward})
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # put back after the test
    ws = make_dataset(tmp_path / "ws", n_train=6, n_val=1, max_chars=40)

    def losses(name: str) -> dict:
        return {r["step"]: r["loss"] for r in read_jsonl(ws.run_dir(name) / "metrics.jsonl") if "loss" in r}

    run(prepare_run(tiny(ws, "straight", 4)))
    run(prepare_run(tiny(ws, "stopped", 2)))
    resumed = TrainConfig.from_dict({**tiny(ws, "stopped", 4).to_dict(), "compile": "true"})
    assert run(prepare_run(resumed))["step"] == 4
    log = (ws.run_dir("stopped") / "train.log").read_text(encoding="utf-8")
    assert "resume: the batches stay the run's own (batches filled up to the frame budget)" in log
    assert "compiling 2 part(s)" in log  # compiled all the same
    straight, again = losses("straight"), losses("stopped")
    assert again[3] == pytest.approx(straight[3], rel=1e-5) and again[4] == pytest.approx(straight[4], rel=1e-5)


def four_l4() -> hardware.HardwareReport:
    report = hardware.HardwareReport(gpus=[hardware.GPUInfo(i, "NVIDIA L4", 22.5, "8.9", 58) for i in range(4)],
                                     cpu_count=16, ram_gb=128, disk_free_gb=500)
    report.recommended = hardware.recommend(report)
    return report


def base_run_on(tmp_path, processes: int, monkeypatch, said: list):
    """Matcha `base`'s adapter as a run on `processes` of four L4s sets it up, before any data or model."""
    from utils.matcha.adapter import MatchaAdapter

    monkeypatch.setenv("WORLD_SIZE", str(processes))
    adapter = MatchaAdapter(TrainConfig(workspace=str(tmp_path), run="l4", preset="base", max_steps=20_000), four_l4())
    adapter.ctx = SimpleNamespace(dist=Dist(0, 0, processes), device="cpu", log=said.append)
    adapter.items = adapter.val_items = []
    return adapter


def probed_on_four_l4s(tmp_path, monkeypatch) -> dict:
    """The trainer state of a run whose probe fitted 12,000 frames a GPU (with its headroom) on four L4s."""
    monkeypatch.setattr(hardware, "detect", four_l4)  # the four GPUs agreed on it (the loop's all-reduce)
    first = base_run_on(tmp_path, 4, monkeypatch, [])
    first.apply_probe(round(12_000 / 0.85), 800)
    assert (first.machine.max_frames_per_batch, first.machine.effective_batch) == (12_000, 48_000)
    first.pos = (3, 10)
    return {**first.state_dict(), "probed_lr": first.machine.lr}


def test_a_resumed_run_on_several_gpus_keeps_the_batch_and_learning_rate_its_probe_chose(tmp_path, monkeypatch):
    """4 L4s, 12,000 frames probed: the run trains at 2.19e-4 on 48,000 frames a step. Its resume skips the probe,
    and the first guess for the machine (16,000 frames a GPU: 64,000 a step, 2.53e-4) is not what it trained with."""
    state = probed_on_four_l4s(tmp_path, monkeypatch)
    resumed = base_run_on(tmp_path, 4, monkeypatch, said := [])
    assert resumed.machine.lr == pytest.approx(2.53e-4, rel=0.01)  # the guess a resume used to train with
    resumed.load_state_dict(state)
    m = resumed.machine
    assert m.lr == state["probed_lr"] == pytest.approx(2.19e-4, rel=0.01)
    assert (m.max_frames_per_batch, m.grad_accumulation, m.effective_batch) == (12_000, 1, 48_000)
    assert resumed.pos == (3, 10) and said == []


def test_a_run_resumed_on_fewer_gpus_keeps_its_step_and_says_what_changed(tmp_path, monkeypatch):
    """On 2 of the 4 GPUs: two micro-batches of 12,000 frames a GPU keep the 48,000 frames a step and the learning
    rate; each process's share of the epoch is twice as long, so its place in it is twice as far."""
    state = probed_on_four_l4s(tmp_path, monkeypatch)
    resumed = base_run_on(tmp_path, 2, monkeypatch, said := [])
    resumed.load_state_dict(state)
    m = resumed.machine
    assert (m.max_frames_per_batch, m.grad_accumulation, m.effective_batch) == (12_000, 2, 48_000)
    assert m.lr == state["probed_lr"] and resumed.pos == (3, 20)
    line = "\n".join(said)
    assert "this run trained on 4 process(es) and goes on with 2" in line, said
    assert "reads on from batch 20 of its share of epoch 3 (it was batch 10 of 4 shares)" in line
    assert "12000 frames x 2 micro-batches x 2 processes = 48000 frames, the 48000 frames this run trained with" in line
