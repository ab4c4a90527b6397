"""Worker processes for work over every clip (preparation, the music gate): how many, how they start, and a
bounded window of tasks in flight, so cancel is quick, memory stays flat and a crash names its clip; and one long
job run in a child process of its own (events_in_child), so the app's process does not keep what the job held."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from queue import Empty
from typing import Callable, Iterator

from utils.events import Event, StudioError

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


# ------------------------------------------------------------------------------ one long job in a child process
def events_in_child(fn: Callable[..., Iterator[Event]], *args, job: str, **kwargs) -> Iterator[Event]:
    """The events of `fn(*args, **kwargs)` (an importable event generator), run in a fresh process of its own.
    A job whose memory grows with the dataset (the transcript check: ~7 KB a clip) then leaves the app's process
    as small as before it, however big the dataset: a process's freed memory is rarely the system's again, a
    child's is when it ends. Events come without their `result` (the UI shows messages); a StudioError in the child
    is raised here with its message. Closing this generator (a closed page) stops the child as Ctrl-C would: its
    `finally` blocks run, so a job that keeps its progress on disk goes on from there next time."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_forward_events, args=(queue, fn, args, kwargs), name=job)
    child.start()
    try:
        while (said := _next_said(queue, child, job))[0] == "event":
            yield said[1]
        kind, payload = said
        if kind == "end":
            child.join(timeout=10)  # the child is only winding down
            return
        raise (StudioError if kind == "refused" else RuntimeError)(payload)
    finally:
        if child.is_alive():
            child.terminate()  # SIGTERM: the child's handler turns it into SystemExit, unwinding its job
        threading.Thread(target=child.join, daemon=True).start()  # reaped once it has wound down


def _next_said(queue, child, job: str) -> tuple[str, object]:
    """The child's next (kind, payload); a child that ended without saying how is said as a StudioError."""
    while True:
        try:
            return queue.get(timeout=0.5)
        except Empty:
            if child.is_alive():
                continue
        try:  # it ended: what it said just before may still be on its way
            return queue.get(timeout=1.0)
        except Empty:
            child.join()
            raise StudioError(f"The {job} stopped unexpectedly (its process ended with code {child.exitcode}: out "
                              "of memory?). What it finished is kept; start it again to go on.") from None


def _forward_events(queue, fn, args, kwargs) -> None:
    """The child's side of events_in_child."""
    import dataclasses
    import signal
    import sys
    import traceback

    def stop(*_):  # the app stopped listening: unwind the job (its finally blocks run), never wait on the queue
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # once: a second stop ends the unwinding outright
        queue.cancel_join_thread()
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    try:
        for event in fn(*args, **kwargs):
            queue.put(("event", dataclasses.replace(event, result=None)))
        queue.put(("end", None))
    except StudioError as exc:
        queue.put(("refused", str(exc)))
    except Exception as exc:
        traceback.print_exc()
        queue.put(("failed", f"{type(exc).__name__}: {exc}"))
    finally:  # said its last: a stop finds nothing to unwind, and inside the exit's own clean-up (atexit) a
        # SystemExit would print "Exception ignored in atexit callback" tracebacks into the app's console
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
