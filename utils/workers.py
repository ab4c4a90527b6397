"""Worker processes for work over every clip (preparation, the music gate): how many, how they start, and a
bounded window of tasks in flight, so cancel is quick, memory stays flat and a crash names its clip."""
from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterator

from utils.events import StudioError

POOL_MIN_TASKS = 24  # fewer clips than this are done in this process: spawning workers costs more


def default_workers() -> int:
    """All cores, or $AMHARIC_TTS_WORKERS (to leave room for other work on a shared machine)."""
    env = os.environ.get("AMHARIC_TTS_WORKERS", "").strip()
    return max(1, int(env)) if env.isdigit() else max(1, os.cpu_count() or 1)


def init_worker() -> None:
    """One thread per worker: the pool is the parallelism (and 5 processes must not fight over cores)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """Workers started fresh, never forked: the parent may hold threads (Gradio, torch)."""
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=init_worker)


def run_tasks(fn: Callable[[dict], dict], tasks: list[dict], workers: int, cancelled: Callable[[], bool],
              pool: ProcessPoolExecutor | None, job: str = "preparation") -> Iterator[tuple[dict, dict]]:
    """(task, result) in completion order (in this process, in order, when `pool` is None); a bounded window of
    tasks is in flight. A task that crashes yields {"error": ...} naming its source; a worker that dies stops the
    job with a message naming the `job` and its clip."""
    def failed(task, exc):
        return {"id": task["id"], "error": f"{task['source']}: unexpected failure ({type(exc).__name__}: {exc})."}

    if pool is None:
        for task in tasks:
            if cancelled():
                return
            try:
                yield task, fn(task)
            except Exception as exc:
                yield task, failed(task, exc)
        return
    queue, running = deque(tasks), {}
    while queue or running:
        while queue and len(running) < workers * 4 and not cancelled():
            task = queue.popleft()
            running[pool.submit(fn, task)] = task
        if not running:
            return
        done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
        for fut in done:
            task = running.pop(fut)
            try:
                yield task, fut.result()
            except BrokenProcessPool as exc:  # a worker died (killed, out of memory): stop, keep what is done
                raise StudioError(f"A {job} worker died while on {task['source']} (out of memory?). Set "
                                  f"AMHARIC_TTS_WORKERS to fewer and run the {job} again; finished clips are "
                                  "kept.") from exc
            except Exception as exc:
                yield task, failed(task, exc)
        if cancelled():
            for fut in running:
                fut.cancel()
            return
