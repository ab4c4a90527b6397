"""The training batches from a DataLoader that outlives its helper processes.

A loader worker can die under a run: killed for memory, a crash in an audio library, a bus error when /dev/shm
fills, or a stop signal sent to the whole process group (`timeout`, as bench/gpu_suite.sh limits each step: the
trainer stops gracefully after its step, its workers just die). torch then raises RuntimeError("DataLoader worker
(pid(s) ...) exited unexpectedly"), and that used to end the run (issue 42). `ResilientLoader` owns the loader's
iterator and counts the batches it has handed out; when a worker dies it says so once in the run's log, builds the
loader again with half the workers (down to 0: loading in the training process) over the same batch sampler, skips
the batches already delivered and goes on: the batches that follow are the ones an uninterrupted run would have had.

torch also reports a dead worker from its SIGCHLD handler, which raises wherever the training process is, in the
middle of a step's forward pass as often as not. While a ResilientLoader runs, that report is held back; the
loader's own check raises the same death at the next batch (within MP_STATUS_CHECK_INTERVAL, 5 s), where it is
handled. A graceful stop needs no next batch: the step's were taken at its start.

Each batch a worker makes reaches the trainer in shared memory (/dev/shm; docker gives a container 64 MB), where it
stays until the trainer takes it: workers x prefetch_factor batches at a time. When they do not fit, torch 2.x fails
in the worker's sending thread ("unable to allocate shared memory(shm) ... No space left on device"), the batch is
lost and the trainer waits for it forever (older versions: a bus error). `workers_that_fit` prevents it: it keeps
the batches in flight within half of what /dev/shm has free.
"""
from __future__ import annotations

import itertools
import os
import signal
import threading
from typing import Callable, Iterable

import torch

SHM = "/dev/shm"
SHM_SHARE = 0.5  # of /dev/shm's free space, for the batches in flight of all the processes on this machine

_held_back: list[BaseException] = []  # worker deaths torch's SIGCHLD handler reported while a step ran
_guarded = False


def ignore_stop_signals(worker_id: int = 0) -> None:
    """A loader worker's start (worker_init_fn): Ctrl+C in a terminal interrupts the whole process group, and a stop
    is the trainer's to make (it finishes its step, saves and exits), so the workers ignore SIGINT. Not SIGTERM:
    multiprocessing ends its daemonic children with it when the trainer exits, and then waits for them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_died(exc: BaseException) -> bool:
    """Whether `exc` is torch's report of a loader worker that died (not an error raised by the dataset's code,
    which torch re-raises as the error's own type)."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and "DataLoader worker" in text and (
        "exited unexpectedly" in text or "killed by signal" in text)


def shared_memory_free(path: str = SHM) -> int | None:
    """Bytes free in /dev/shm, or None where there is none to read (not Linux)."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def workers_that_fit(workers: int, prefetch_factor: int, batch_bytes: int, free: int | None,
                     processes: int = 1) -> int:
    """At most `workers` such that every process's batches in flight (workers x prefetch_factor, each in shared
    memory) fit in SHM_SHARE of `free`; 0 only when not even one worker's would fit."""
    if workers <= 0 or free is None or batch_bytes <= 0:
        return max(workers, 0)
    per_worker = max(prefetch_factor, 1) * batch_bytes * max(processes, 1)
    return min(workers, int(free * SHM_SHARE // per_worker))


class ResilientLoader:
    """Iterates `make(batch_sampler, num_workers)` (a DataLoader with that sampler and that many workers); when a
    worker dies, rebuilds it with half the workers over `batch_sampler` less the batches already delivered.

    `batch_sampler` must yield the same batches each time it is iterated (FrameBatchSampler does: its order
    follows from its seed and start). `log(message)` goes to the run's log. Given `batch_bytes` (the largest
    batch's tensors), the workers are first limited to those whose batches in flight fit in /dev/shm."""

    def __init__(self, make: Callable[[Iterable, int], Iterable], batch_sampler: Iterable, num_workers: int,
                 log: Callable[[str], None] = print, batch_bytes: int = 0, prefetch_factor: int = 2):
        self.make, self.sampler, self.log = make, batch_sampler, log
        self.num_workers = self._fit(int(num_workers), batch_bytes, prefetch_factor)
        self.delivered = 0  # batches handed to the trainer since this loader started
        self.restarts = 0
        self._start()

    def _fit(self, workers: int, batch_bytes: int, prefetch_factor: int) -> int:
        free, processes = shared_memory_free(), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        fit = workers_that_fit(workers, prefetch_factor, batch_bytes, free, processes)
        if fit < workers:
            self.log(f"data: {fit} loader worker{_s(fit)} instead of {workers}: each keeps up to {prefetch_factor} "
                     f"batches of ~{batch_bytes / 2**20:.1f} MB in shared memory until the trainer takes them, and "
                     f"{SHM} has {free / 2**20:.0f} MB free{f' for {processes} processes' if processes > 1 else ''} "
                     f"(more would overflow it: a lost batch the loader waits for forever, or a bus error)")
        return fit

    def _start(self) -> None:
        sampler = self.sampler if not self.delivered else _Skip(self.sampler, self.delivered)
        self.loader = self.make(sampler, self.num_workers)
        with torch.random.fork_rng(devices=[]):  # a new iterator draws its workers' seed from torch's generator:
            self.iterator = iter(self.loader)     # a restart would change the noise of the step that asked for data
        if self.num_workers:
            _hold_back_worker_deaths()  # after iter(): torch sets its SIGCHLD handler there, once a process

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            try:
                batch = next(self.iterator)
            except RuntimeError as exc:
                if not worker_died(exc) or self.num_workers == 0:
                    raise
                self._restart(exc)
                continue
            self.delivered += 1
            return batch

    def _restart(self, exc: RuntimeError) -> None:
        why = next((str(e) for e in (*_held_back, exc.__cause__) if e is not None and worker_died(e)), str(exc))
        _held_back.clear()
        self.close()
        self.num_workers //= 2
        self.restarts += 1
        hint = (" (the workers' batches fill /dev/shm: give the machine more shared memory, e.g. docker run "
                "--shm-size=2g, or lower num_workers)" if "Bus error" in why or "shared memory" in why else
                " (a stop signal sent to the whole process group, as `timeout` sends it)" if "Terminated" in why
                else "")
        first = why.strip().split(". ")[0].rstrip(".")
        self.log(f"data: a data loading helper process died ({first}){hint}: restarting the loader with "
                 f"{self.num_workers} worker{_s(self.num_workers)} at batch {self.delivered} of this session")
        self._start()

    def close(self) -> None:
        """Stop the workers now (they also stop when the loader is dropped)."""
        shutdown = getattr(self.iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self.iterator = self.loader = None


def _s(n: int) -> str:
    return "" if n == 1 else "s"


class _Skip:
    """A batch sampler without its first `n` batches."""

    def __init__(self, inner: Iterable, n: int):
        self.inner, self.n = inner, n

    def __iter__(self):
        return itertools.islice(iter(self.inner), self.n, None)


def _hold_back_worker_deaths() -> None:
    """Wrap torch's SIGCHLD handler (installed by the first multi-worker iterator of the main thread) so that a
    worker's death is kept for the loader rather than raised in the middle of a step; other errors pass."""
    global _guarded
    if _guarded or threading.current_thread() is not threading.main_thread():
        return  # outside the main thread torch sets no handler: its loader's own check is the only report
    torch_handler = signal.getsignal(signal.SIGCHLD)
    if not callable(torch_handler):
        return

    def handler(signum, frame):
        try:
            torch_handler(signum, frame)
        except RuntimeError as exc:
            if not worker_died(exc):
                raise
            _held_back[:] = _held_back[-3:] + [exc]

    signal.signal(signal.SIGCHLD, handler)
    _guarded = True
