"""The UI under faults: the app process dies and restarts while a run trains (the Training tab finds the
run again, live), and two browsers press Start at the same moment (one runs, one waits in the queue)."""
from __future__ import annotations

import re
import threading

import pytest
from gradio_client import Client
from playwright.sync_api import expect

from tests.conftest import AppServer
from tests.helpers import make_dataset
from tests.test_jobs import TINY, state, wait
from utils import jobs
from utils.runs import settings, views

FROM_SCRATCH = "(from scratch)"


@pytest.fixture
def ws(tmp_path):
    ws = make_dataset(tmp_path / "workspace", n_train=3, n_val=1, max_chars=25)
    settings.save_settings(ws, TINY)  # what the Optimizations tab saves: tiny CPU batches
    yield ws
    for r in views.run_table(ws):
        if r["status"] in jobs.ACTIVE:
            jobs.stop(ws, r["run"]), jobs.stop(ws, r["run"])


def start_from_ui(url: str, name: str) -> str:
    """What the Start button sends (api_name start_training); returns the message shown under it."""
    note, _, _ = Client(url, verbose=False).predict("am", "tiny", name, 100_000, FROM_SCRATCH, "full", False,
                                                     "matcha", False, "", "", api_name="/start_training")
    return note


def test_the_app_killed_and_restarted_during_training_shows_the_run_again_live(ws, page):
    first = AppServer(ws.root).wait_ready()
    start_from_ui(first.url, "survivor")  # the run's launcher is started by this app process
    status = wait(lambda: (s := state(ws, "survivor")).get("step", 0) >= 2 and s, "the run to train")
    first.proc.kill()  # the UI dies without any chance to clean up (an OOM kill, a Colab cell stopped)
    first.stop()
    assert jobs.pid_alive(status["pid"]) and jobs.pid_alive(status["launcher_pid"])  # the run goes on

    second = AppServer(ws.root).wait_ready()
    try:
        page.goto(second.url)
        page.get_by_role("tab", name="Training").click()
        summary = page.locator("#run-summary")
        expect(summary).to_contain_text("survivor", timeout=30_000)  # picked without the user choosing it
        expect(summary).to_contain_text("running")
        expect(page.locator("#train-log textarea")).to_have_value(re.compile(r"training from step 0"), timeout=30_000)
        shown = int(re.search(r"step (\d+)", summary.inner_text()).group(1))
        page.wait_for_function("(before) => { const m = document.querySelector('#run-summary').innerText"
                               ".match(/step (\\d+)/); return m && +m[1] > before; }", arg=shown, timeout=120_000)
        expect(page.locator("#run-list")).to_contain_text("running")
    finally:
        second.stop()


def test_two_browsers_pressing_start_at_once_get_one_running_and_one_queued(ws):
    server = AppServer(ws.root).wait_ready()
    try:
        names, notes, barrier = ["tigist", "dawit"], {}, threading.Barrier(2)

        def press_start(name):
            barrier.wait()
            notes[name] = start_from_ui(server.url, name)

        threads = [threading.Thread(target=press_start, args=(n,)) for n in names]
        [t.start() for t in threads]
        [t.join(timeout=120) for t in threads]
        assert all(name in notes[name] for name in names), notes  # each user is told about their run
        wait(lambda: any(state(ws, n).get("step", 0) >= 1 for n in names), "one run stepping")
        assert sorted(state(ws, n)["state"] for n in names) == ["queued", "running"]
        running = next(n for n in names if state(ws, n)["state"] == "running")
        waiting = next(n for n in names if n != running)
        # the waiting user's Training tab says so, naming the run that holds the CPU
        client = Client(server.url, verbose=False)
        summary = wait(lambda: (s := client.predict(waiting, api_name="/refresh_run")[0]) and running in s and s,
                       "the queued run's summary to name the running one", 30)
        assert "queued" in summary and f"waiting for cpu: {running} holds it" in summary
    finally:
        server.stop()
