"""Shared fixtures: a running app in a subprocess, and a real headless Chromium driven by Playwright."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


# The app under test never reaches the network (CI has none): its HTTP clients go through a proxy that
# refuses at once (so --share's tunnel request fails here, on loopback), the loopback stays direct, and
# the Hugging Face hub is offline.
DEAD_PROXY = "http://127.0.0.1:9"
OFFLINE = {"HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "ALL_PROXY": DEAD_PROXY,
           "http_proxy": DEAD_PROXY, "https_proxy": DEAD_PROXY, "all_proxy": DEAD_PROXY,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "HF_HUB_OFFLINE": "1"}
os.environ.update(OFFLINE)  # and so does every process a test starts itself (`app.py` subcommands, trainers, ...)
# One compute thread a process, as the test modules set for pytest's own (torch.set_num_threads(1)): a trainer, an
# app and a browser share the 2 cores with pytest, and a trainer's two OpenMP threads, one of them waiting for a
# core, made a tiny run's step 10-50x slower (a 20-step run took 44 s instead of 7 s).
os.environ["OMP_NUM_THREADS"] = "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """`python app.py ...` on a free port, its output in a log file (no pipe left unread)."""

    def __init__(self, workspace: Path, *args: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workspace = workspace
        self.log_path = workspace.parent / f"app-{self.port}.log"
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "GRADIO_ANALYTICS_ENABLED": "False", **OFFLINE, **(env or {})}
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--workspace", str(workspace),
                                      "--port", str(self.port), *args],
                                     cwd=ROOT, env=full_env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> "AppServer":
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app exited with {self.proc.returncode}:\n{self.output()}")
            try:
                urllib.request.urlopen(self.url + "/", timeout=2)
                return self
            except urllib.error.HTTPError:
                return self  # answering (e.g. 401 behind a login) is ready
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"app did not answer within {timeout}s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def start_app(tmp_path):
    servers = []

    def start(*args: str, workspace: Path | None = None, env: dict | None = None, wait: bool = True) -> AppServer:
        server = AppServer(workspace or tmp_path / "workspace", *args, env=env)
        servers.append(server)
        return server.wait_ready() if wait else server

    yield start
    for s in servers:
        s.stop()


def serve(ws) -> AppServer:
    """The app on a workspace a test built, ready; `server.ws` is that workspace (the caller stops it)."""
    server = AppServer(ws.root).wait_ready()
    server.ws = ws
    return server


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """One app shared by the browser tests of a module."""
    server = AppServer(tmp_path_factory.mktemp("ui") / "workspace").wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise RuntimeError("Debian's chromium is missing: the README's test command installs it (apt-get install chromium).")
    from playwright.sync_api import expect

    # An assertion waits 5 s by default: on a loaded 2-core CI machine an upload of a zip was still
    # "Uploading 1 file..." after 5 s. Waiting longer only delays a failure, never a pass.
    expect.set_options(timeout=20_000)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True,
                              args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                    "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()


# ------------------------------------------------------------------------------------ shared trained things
# Expensive and read-only, made once a session: a test that changes a workspace copies it (`tiny_runs_copy`).

def tiny_matcha_config(ws, name: str, **kw):
    """The smallest Matcha run that writes every run file: 2 steps, a checkpoint at each, no evaluation."""
    from utils.training import TrainConfig

    base = dict(workspace=str(ws.root), dataset="am", run=name, preset="tiny", max_steps=2, lr=2e-3, warmup_steps=1,
                log_every=1, eval_every=0, checkpoint_every=1, mcd="logmel", eval_clips=1, sample_clips=0, ode_steps=2,
                ema_decay=0.0, max_frames_per_batch=600, grad_accumulation=1, eval_vocoder="griffin-lim")
    return TrainConfig.from_dict({**base, **kw})  # a family's own settings by name too


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """Dataset `am` (one espeak-ng speaker, 4 + 1 clips), Matcha run `one` (checkpoints at steps 1 and 2) and F5 run
    `f5` (one step): trained voices of two families for tests that read them. Do not change it: copy it."""
    import torch

    from tests.helpers import make_dataset
    from utils.training import prepare_run, run

    torch.set_num_threads(1)
    ws = make_dataset(tmp_path_factory.mktemp("tiny-runs") / "ws", n_train=4, n_val=1, voices=("am",), max_chars=30)
    assert run(prepare_run(tiny_matcha_config(ws, "one")))["state"] == "finished"
    assert run(prepare_run(tiny_matcha_config(ws, "f5", engine="f5", max_steps=1)))["state"] == "finished"
    return ws


@pytest.fixture
def tiny_runs_copy(tiny_runs, tmp_path):
    """A copy of `tiny_runs` of this test's own, to change."""
    from utils.workspace import Workspace

    shutil.copytree(tiny_runs.root, tmp_path / "tiny-runs")
    return Workspace.open(tmp_path / "tiny-runs")


@pytest.fixture(scope="session")
def transfer_bases(tmp_path_factory):
    """`made(family)`: that family's base pretrained (once a session, at the first test that asks) on espeak-ng speech
    of other languages and saved in its published layout, with Amharic clips in a voice it never heard beside it
    (tests/transfer_bases.py, sizes "test"). Read-only: `transfer` gives a test its own copy."""
    import torch

    from tests.transfer_bases import AMHARIC, BASE_DATA, SIZES, Transfer
    from tests.transfer_data import amharic, other_languages
    from utils.workspace import Workspace

    torch.set_num_threads(1)
    size = SIZES["test"]
    ws = Workspace.open(tmp_path_factory.mktemp("transfer") / "ws")
    other_languages(ws, BASE_DATA, size.base_clips, size.base_val)
    amharic(ws, AMHARIC, size.clips, size.val)
    made = {}

    def base(family: str):
        if family not in made:
            made[family] = Transfer(family, ws, size)
            made[family].base()
        return made[family]
    return base


@pytest.fixture
def transfer(transfer_bases, tmp_path):
    """`made(family)`: a Transfer on this test's own copy of the session's workspace, its base already made."""
    from tests.transfer_bases import Transfer
    from utils.workspace import Workspace

    def made(family: str):
        shared = transfer_bases(family)
        shutil.copytree(shared.ws.root, tmp_path / "ws", dirs_exist_ok=True)
        return Transfer(family, Workspace.open(tmp_path / "ws"), shared.size)
    return made
