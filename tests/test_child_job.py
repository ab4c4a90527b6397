"""utils.workers.events_in_child: a long job run in a process of its own, seen from the app's side."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from utils.events import Event, StudioError
from utils.workers import events_in_child


# the jobs below run in the spawned child, which imports this module by name
def counting_job(n: int):
    for i in range(n):
        yield Event("count", i + 1, n, f"pid {os.getpid()}", result={"big": list(range(1000))})


def refused_job():
    yield Event("start", message="looking")
    raise StudioError("Dataset 'x' has 2 rows; the check needs at least 5.")


def slow_job(marker: str):
    try:
        for i in range(600):
            yield Event("slow", i, 600, "working")
            time.sleep(0.1)
    finally:  # what a check does when it is cut off: keep its progress
        Path(marker).write_text("kept")


def dying_job():
    yield Event("start", message="about to die")
    time.sleep(0.5)  # what it said is on its way first, as with a job the system kills for memory
    os._exit(9)


def test_events_come_from_another_process_without_their_results():
    events = list(events_in_child(counting_job, 3, job="count"))
    assert [(e.done, e.total) for e in events] == [(1, 3), (2, 3), (3, 3)]
    assert {e.message for e in events} != {f"pid {os.getpid()}"}
    assert all(e.result is None for e in events)


def test_a_refusal_in_the_child_is_raised_here_with_its_words():
    events = events_in_child(refused_job, job="check")
    assert next(events).message == "looking"
    with pytest.raises(StudioError, match=r"has 2 rows; the check needs at least 5"):
        next(events)


def test_closing_stops_the_child_and_its_finally_runs(tmp_path):
    marker = tmp_path / "kept.txt"
    events = events_in_child(slow_job, str(marker), job="slow job")
    assert next(events).stage == "slow"
    events.close()  # the page was closed
    deadline = time.time() + 20
    while not (marker.exists() and marker.read_text()) and time.time() < deadline:  # made, then written
        time.sleep(0.1)
    assert marker.read_text() == "kept"


def test_a_child_that_dies_is_said_with_its_job_and_code():
    events = events_in_child(dying_job, job="transcript check")
    next(events)
    with pytest.raises(StudioError, match=r"transcript check stopped unexpectedly .*code 9"):
        next(events)


EXITING = """
import atexit, multiprocessing, pathlib, sys, time
from utils.events import Event
from utils.workers import _forward_events

def job():
    yield Event("start", message="done")

atexit.register(time.sleep, 30)  # the exit's clean-up, as multiprocessing's joins its threads there
atexit.register(pathlib.Path(sys.argv[1]).write_text, "exiting")
_forward_events(multiprocessing.get_context("spawn").Queue(), job, (), {})
"""


def test_a_stop_that_comes_while_the_child_exits_is_quiet(tmp_path):
    """Cancel check printed "Exception ignored in atexit callback ... sys.exit(143)" twice into the app's console
    (Colab's cell output: it looks like a crash) when the stop reached a child already exiting."""
    import signal
    import subprocess
    import sys

    marker = tmp_path / "exiting"
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen([sys.executable, "-c", EXITING, str(marker)], cwd=root, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists(), child.communicate(timeout=30)[1]
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM and "Exception ignored" not in err and "SystemExit" not in err, err
