"""A loader worker that dies does not end a run: the loader restarts with fewer workers, says so once,
and hands out the batches an uninterrupted run would have had. Workers are really killed (SIGKILL, as the kernel
kills a worker for memory or a full /dev/shm), once, through a marker file under tmp_path."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import make_dataset
from utils.training import TrainConfig, prepare_run, run
from utils.training.batching import FrameBatchSampler
from utils.training.loader import ResilientLoader, worker_died, workers_that_fit
from utils.workspace import read_jsonl

torch.set_num_threads(1)
LINE = "a data loading helper process died"


def die_once(marker: Path) -> None:
    """SIGKILL this process if it is a loader worker and no worker has died yet (the marker file says one has)."""
    if torch.utils.data.get_worker_info() is None:
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


class Keys(torch.utils.data.Dataset):
    """Item = the sampler's key; the worker that fetches the item of batch `kill_at` dies (once)."""

    def __init__(self, marker: Path | None = None, kill_at: tuple = ()):
        self.marker, self.kill_at = marker, kill_at

    def __len__(self):
        return 30

    def __getitem__(self, key):
        if self.marker is not None and key[1:] == self.kill_at:
            die_once(self.marker)
        return key


def batches(marker: Path | None, workers: int, n: int, log) -> tuple[list, ResilientLoader]:
    sampler = FrameBatchSampler([20 + 7 * (i % 5) for i in range(30)], max_frames=100, seed=3)
    dataset = Keys(marker, kill_at=(1, 2))  # the third batch of the second pass
    make = lambda s, w: torch.utils.data.DataLoader(dataset, batch_sampler=s, num_workers=w, collate_fn=list,
                                                    prefetch_factor=2 if w else None)
    loader = ResilientLoader(make, sampler, workers, log)
    out = []
    for _ in range(n):
        out.append(next(loader))
        time.sleep(0.05)  # "a step": torch's SIGCHLD report of the death lands here, outside the loader
    loader.close()
    return out, loader


def test_a_killed_worker_restarts_the_loader_with_fewer_workers_at_the_same_batch(tmp_path):
    reference, _ = batches(None, 0, 40, print)
    lines = []
    got, loader = batches(tmp_path / "died", 2, 40, lines.append)
    assert (tmp_path / "died").exists(), "no worker was killed: the test proves nothing"
    assert got == reference  # the same batches, in the same order, through the death and after it
    assert loader.num_workers == 1 and loader.restarts == 1
    assert len(lines) == 1 and LINE in lines[0] and "restarting the loader with 1 worker" in lines[0], lines


def test_errors_of_the_dataset_itself_still_end_the_run():
    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise ValueError("bad clip")

    make = lambda s, w: torch.utils.data.DataLoader(Broken(), batch_sampler=s, num_workers=w, collate_fn=list)
    loader = ResilientLoader(make, [[0, 1], [2, 3]], 1, print)
    with pytest.raises(ValueError, match="bad clip"):
        next(loader)
    assert loader.restarts == 0
    assert worker_died(RuntimeError("DataLoader worker (pid(s) 12) exited unexpectedly"))
    assert worker_died(RuntimeError("DataLoader worker (pid 12) is killed by signal: Bus error. It is possible ..."))
    assert not worker_died(RuntimeError("CUDA out of memory"))


def test_the_training_loaders_workers_leave_ctrl_c_to_the_trainer():
    from types import SimpleNamespace

    from utils.mms.data import loader
    from utils.training.batching import make_loader
    from utils.training.loader import ignore_stop_signals

    m = SimpleNamespace(num_workers=2, persistent_workers=True, pin_memory=False, length_multiple=4)
    for made in (make_loader(Keys(), [[(0, 0, 0)]], m), loader(Keys(), [[(0, 0, 0)]], m)):
        assert made.num_workers == 2 and made.worker_init_fn is ignore_stop_signals
    assert make_loader(Keys(), [[(0, 0, 0)]], m, num_workers=0).num_workers == 0


def test_workers_are_limited_to_the_batches_shared_memory_holds():
    mb = 2**20
    assert workers_that_fit(8, 2, 6 * mb, 64 * mb) == 2  # docker's default /dev/shm: 8 x 2 x 6 MB would not fit
    assert workers_that_fit(8, 2, 6 * mb, 24 * 2**30) == 8
    assert workers_that_fit(8, 2, 6 * mb, 64 * mb, processes=4) == 0
    assert workers_that_fit(8, 2, 6 * mb, None) == 8  # nothing to read: as asked


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, voices=("am",), max_chars=30)


def tiny(ws, **kw) -> dict:
    """A tiny Matcha run with 2 loader workers."""
    return dict(workspace=str(ws.root), dataset="am", preset="tiny", max_steps=8, lr=2e-3, warmup_steps=1,
                log_every=1, eval_every=0, checkpoint_every=0, grad_accumulation=1, max_frames_per_batch=300,
                mcd="logmel", eval_clips=1, sample_clips=1, ode_steps=2, ema_decay=0.9, num_workers=2, probe="false",
                evaluate=False) | kw


def test_a_training_run_outlives_a_killed_loader_worker(corpus, tmp_path, monkeypatch):
    """The real trainer (Matcha tiny, 2 loader workers): a worker killed mid-run costs one log line, not the run,
    and the run's losses are those of a run whose workers all lived."""
    from utils.training.data import MelDataset

    ws, cfg = corpus, tiny(corpus)
    assert run(prepare_run(TrainConfig(run="lived", **cfg)))["state"] == "finished"

    marker, item = tmp_path / "died", MelDataset.__getitem__

    def getitem(self, key):
        if isinstance(key, tuple) and key[1:] == (1, 1):  # a training batch of the second pass
            die_once(marker)
        return item(self, key)

    monkeypatch.setattr(MelDataset, "__getitem__", getitem)
    assert run(prepare_run(TrainConfig(run="died", **cfg)))["state"] == "finished"
    assert marker.exists(), "no worker was killed: the test proves nothing"
    log = ws.run_dir("died").joinpath("train.log").read_text(encoding="utf-8")
    assert log.count(LINE) == 1 and "restarting the loader with 1 worker" in log, log
    curve = {name: [(r["step"], r["epoch"], r["loss"]) for r in read_jsonl(ws.run_dir(name) / "metrics.jsonl")
                    if "loss" in r] for name in ("lived", "died")}
    assert len(curve["died"]) == 8 and curve["died"] == curve["lived"]


def test_a_run_in_the_callers_process_leaves_no_loader_worker_behind(corpus):
    """Persistent workers lived on after run() returned, until the caller dropped the adapter: eight a run on a GPU
    machine, in the app's or a test's process (the first H100 suite's pytest took 10-20 s to exit after its tests)."""
    import multiprocessing

    assert not multiprocessing.active_children()
    result = run(prepare_run(TrainConfig(run="no-leftovers", **tiny(corpus, max_steps=3, persistent_workers="true"))))
    assert result["state"] == "finished"
    assert not multiprocessing.active_children()


def test_a_stop_sent_to_the_whole_process_group_still_stops_the_run_gracefully(corpus):
    """`timeout` (bench/gpu_suite.sh's step limit) and a terminal's Ctrl+C signal the process group: the workers die
    of it while the trainer finishes its step. That ended the run with "DataLoader worker ... exited unexpectedly" or
    "... killed by signal: Terminated" (issue 42); now it stops as a SIGTERM to the trainer alone does."""
    from tests.test_training_process import start_trainer, wait_for
    from utils.workspace import read_json

    run_dir = corpus.run_dir("group")
    proc = start_trainer(prepare_run(TrainConfig(run="group", **tiny(corpus, max_steps=10_000))))
    wait_for(lambda: (read_json(run_dir / "status.json", {}) or {}).get("step", 0) >= 3, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, Path(proc.output_path).read_text(errors="replace")[-3000:]
    status = read_json(run_dir / "status.json")
    assert status["state"] == "stopped" and "a stop signal" in status["message"], status
