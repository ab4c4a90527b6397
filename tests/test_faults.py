"""Faults around a training run: kill -9 in the middle of a checkpoint write, the disk filling up, two browsers
pressing Start at the same moment, the app process killed and restarted while a run trains. The real trainer on the
tiny preset, real files, a real small disk (a size-limited tmpfs), the real app and browser."""
from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from gradio_client import Client
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.conftest import AppServer
from tests.helpers import make_dataset
from tests.test_jobs import TINY, state, wait
from tests.test_training import corpus, tiny_config  # noqa: F401  (module fixture)
from tests.test_training_process import start_trainer, wait_for
from utils import jobs
from utils.runs import settings, views
from utils.training import load_checkpoint, prepare_run, run
from utils.training.checkpoint import latest_resumable, load_trainer_state, recover, save_checkpoint, step_folders
from utils.training.config import read_run_config, write_run_config
from utils.workspace import read_json


def without_faults(config_path: Path) -> None:
    """The same run, resumed as a user would: the test hook that paused the save switched off."""
    cfg, _ = read_run_config(config_path)
    cfg.fault_pause_checkpoint_step = 0
    write_run_config(config_path, cfg)


def half_written(checkpoints: Path, step: int) -> list[Path]:
    return [p for p in checkpoints.glob(f".step-{step}.tmp-*") if (p / "model.safetensors").exists()]


def test_kill_9_in_the_middle_of_a_checkpoint_write_keeps_the_previous_checkpoint_usable(corpus):
    path = prepare_run(tiny_config(corpus, "midsave", max_steps=8, checkpoint_every=2, fault_pause_checkpoint_step=4))
    checkpoints = corpus.run_dir("midsave") / "checkpoints"
    proc = start_trainer(path)
    wait_for(lambda: half_written(checkpoints, 4), proc)  # step-4's weights are on disk, its config not yet
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    leftover = half_written(checkpoints, 4)
    assert leftover and not (leftover[0] / "config.json").exists(), "the kill did not land mid-write"
    assert [s for s, _ in step_folders(checkpoints)] == [2]  # the half folder is not taken for a checkpoint
    assert latest_resumable(checkpoints).name == "step-2"
    model, config = load_checkpoint(checkpoints / "step-2")
    assert config["step"] == 2 and load_trainer_state(checkpoints / "step-2")["step"] == 2

    without_faults(path)
    result = run(path)  # Resume: continues from step-2 and clears the leftover
    assert result["state"] == "finished" and result["step"] == 8
    log = (corpus.run_dir("midsave") / "train.log").read_text()
    assert f"removed {leftover[0].name}" in log and "resume: continuing from" in log and "step-2" in log
    assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]


def test_a_resave_of_the_same_step_cut_short_puts_the_complete_checkpoint_back(tmp_path):
    import torch

    checkpoints = tmp_path / "checkpoints"
    save_checkpoint(checkpoints / "step-6", {"w": torch.ones(3)}, {"step": 6}, {"step": 6})
    # killed between "move the old step-6 aside" and "move the new one in": only the old copy is on disk
    os.replace(checkpoints / "step-6", checkpoints / ".step-6.old-4242")
    (checkpoints / ".step-6.tmp-4242").mkdir()
    notes = recover(checkpoints)
    assert [p.name for p in checkpoints.iterdir()] == ["step-6"]
    assert load_trainer_state(checkpoints / "step-6")["step"] == 6
    assert any("restored" in n for n in notes) and any("removed .step-6.tmp-4242" in n for n in notes)


# ------------------------------------------------------------------------------- a full disk
@contextmanager
def small_disk(path: Path, size: str):
    """A size-limited tmpfs mounted at `path`: a disk that really fills up (needs root, as in the test image)."""
    path.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"mounting a small tmpfs needs root (CAP_SYS_ADMIN); run the tests as root as "
                           f"tests/run.sh does in the test image: {out.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> None:
    """Write until the disk refuses even a single page."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 20, 4096):
            while True:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)


def test_a_full_disk_stops_the_run_with_a_message_and_keeps_a_usable_checkpoint(corpus):
    run_dir = corpus.run_dir("fulldisk")
    with small_disk(run_dir, "256m"):  # a tiny-preset checkpoint is about 60 MB
        path = prepare_run(tiny_config(corpus, "fulldisk", max_steps=8, checkpoint_every=2,
                                       fault_pause_checkpoint_step=4))
        checkpoints = run_dir / "checkpoints"
        proc = start_trainer(path)
        wait_for(lambda: half_written(checkpoints, 4), proc)  # while step-4 is being written...
        fill(run_dir / "filler")  # ...the disk fills up
        assert proc.wait(timeout=120) != 0

        status = read_json(run_dir / "status.json")
        assert status["state"] == "failed"
        assert "disk is full" in status["message"] and str(run_dir) in status["message"]
        assert "step-2" in status["message"] and "Resume" in status["message"]
        assert "disk is full" in Path(proc.output_path).read_text()
        assert [s for s, _ in step_folders(checkpoints)] == [2]
        assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]  # the partial save is gone
        load_checkpoint(checkpoints / "step-2")

        (run_dir / "filler").unlink()  # the user frees space and presses Resume
        without_faults(path)
        result = run(path)
        assert result["state"] == "finished" and result["step"] == 8
        assert "resume: continuing from" in (run_dir / "train.log").read_text()


# ------------------------------------------------------------------ two users at the same moment
@pytest.fixture
def jobs_ws(tmp_path):
    ws = make_dataset(tmp_path / "workspace", n_train=3, n_val=1, max_chars=25)
    settings.save_settings(ws, TINY)  # what the Optimizations tab saves: tiny CPU batches
    yield ws
    for r in views.run_table(ws):
        if r["status"] in jobs.ACTIVE:
            jobs.stop(ws, r["run"]), jobs.stop(ws, r["run"])


def test_a_run_recorded_on_another_machine_is_not_taken_for_a_live_one(jobs_ws):
    """A Colab runtime is reset and a new one opens the same Drive workspace: the run's pids are from the
    old machine and may name unrelated processes here (here: this very test process)."""
    run_dir = jobs_ws.run_dir("from-old-runtime")
    run_dir.mkdir()
    jobs.update_status(run_dir, state="running", devices="cpu", pid=os.getpid(), launcher_pid=os.getpid(),
                       machine="a-boot-that-is-over", created=time.time(), step=1200, heartbeat=time.time())
    assert "not running" in jobs.stop(jobs_ws, "from-old-runtime")  # no signal sent to our pid
    status = state(jobs_ws, "from-old-runtime")
    assert status["state"] == "failed" and "machine restarted" in status["message"]
    assert jobs.device_busy(jobs_ws, "cpu") == []  # it holds no place in the queue either


# ----------------------------------------------------------------------------------------------- the UI
FROM_SCRATCH = "(from scratch)"


def start_from_ui(url: str, name: str) -> str:
    """What the Start button sends (api_name start_training); returns the message shown under it."""
    note, _, _ = Client(url, verbose=False).predict("am", "tiny", name, 100_000, FROM_SCRATCH, "full", False,
                                                     "matcha", False, "", "", api_name="/start_training")
    return note


def test_the_app_killed_and_restarted_during_training_shows_the_run_again_live(jobs_ws, page):
    ws = jobs_ws
    first = AppServer(ws.root).wait_ready()
    start_from_ui(first.url, "survivor")  # the run's launcher is started by this app process
    status = wait(lambda: (s := state(ws, "survivor")).get("step", 0) >= 2 and s, "the run to train")
    first.proc.kill()  # the UI dies without any chance to clean up (an OOM kill, a Colab cell stopped)
    first.stop()
    assert jobs.pid_alive(status["pid"]) and jobs.pid_alive(status["launcher_pid"])  # the run goes on

    second = AppServer(ws.root).wait_ready()
    posts = []  # [sent at, what, how it ended, ended at]: a failure says whether the page's polls stopped being
    # sent, were sent and never answered (a pending tick blocks every later one), or were answered with nothing new
    page.on("request", lambda r: r.method == "POST" and posts.append([time.time(), f"{r.url} {r.post_data}"[:160],
                                                                       "pending", None]))

    def ended(request, how):
        for post in reversed(posts):
            if post[2] == "pending" and post[1].startswith(request.url):
                post[2:] = [how, time.time()]
                return
    page.on("requestfinished", lambda r: ended(r, "answered"))
    page.on("requestfailed", lambda r: ended(r, f"failed: {r.failure}"))
    try:
        page.goto(second.url)
        page.get_by_role("tab", name="Training").click()
        summary = page.locator("#run-summary")
        expect(summary).to_contain_text("survivor", timeout=30_000)  # picked without the user choosing it
        expect(summary).to_contain_text("running")
        expect(page.locator("#train-log textarea")).to_have_value(re.compile(r"training from step 0"), timeout=30_000)
        shown = int(re.search(r"step (\d+)", summary.inner_text()).group(1))
        try:
            page.wait_for_function("(before) => { const m = document.querySelector('#run-summary').innerText"
                                   ".match(/step (\\d+)/); return m && +m[1] > before; }", arg=shown, timeout=120_000)
        except PlaywrightTimeout as exc:  # once seen in a full run: say whether the run or the page stood still
            tail = (ws.run_dir("survivor") / "train.log").read_text(errors="replace")[-1500:]
            t0 = posts[0][0] if posts else 0.0
            calls = "\n".join(f"{a - t0:7.1f} s {how}{f' after {b - a:.1f} s' if b else ''}: {what}"
                              for a, what, how, b in posts[-12:])
            raise AssertionError(f"the page stayed at step {shown}: it shows {summary.inner_text()!r}; the run's "
                                 f"status {state(ws, 'survivor')}; its log ends:\n{tail}\nthe page's last "
                                 f"{min(12, len(posts))} of {len(posts)} requests:\n{calls}\nthe app's log ends:\n"
                                 f"{second.output()[-2000:]}") from exc
        expect(page.locator("#run-list")).to_contain_text("running")
    finally:
        second.stop()


def test_two_browsers_pressing_start_at_once_get_one_running_and_one_queued_until_the_cpu_is_free(jobs_ws):
    """Both requests read "the CPU is free" at the same moment: one trains, the other waits in the queue (never
    both on the CPU), each user is told about their own run, the waiting one's Training tab names the run that
    holds the CPU, and the queue moves on once that run stops."""
    ws = jobs_ws
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
        for _ in range(5):  # and it stays that way
            assert sorted(state(ws, n)["state"] for n in names) == ["queued", "running"]
            time.sleep(0.5)
        running = next(n for n in names if state(ws, n)["state"] == "running")
        waiting = next(n for n in names if n != running)
        # the waiting user's Training tab says so, naming the run that holds the CPU
        client = Client(server.url, verbose=False)
        summary = wait(lambda: (s := client.predict(waiting, api_name="/refresh_run")[0]) and running in s and s,
                       "the queued run's summary to name the running one", 30)
        assert "queued" in summary and f"waiting for cpu: {running} holds it" in summary
        jobs.stop(ws, running)
        wait(lambda: state(ws, waiting).get("state") == "running", "the queued run to start once the CPU is free")
    finally:
        server.stop()
