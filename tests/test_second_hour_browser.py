"""A curator's second hour (issue 35) in a real browser, for what only the page shows: a reload stays on the tab
that was open, the Inference picker follows the run that is training until a voice is picked, and A/B speaks its
own text."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.conftest import serve
from tests.helpers import screenshot
from tests.test_inference import CKPT, voice_workspace
from utils.jobs import machine_id
from utils.workspace import read_json

LIVE = "live"


def live_checkpoint(ws, step: int, best: bool = False) -> None:
    """What the trainer of run `live` writes: a checkpoint folder, and status.json naming the best one."""
    folder = ws.run_dir(LIVE) / "checkpoints" / f"step-{step}"
    shutil.copytree(ws.root / CKPT, folder)
    status = ws.run_dir(LIVE) / "status.json"
    now = {**(read_json(status, {}) or {}), "state": "running", "step": step, "max_steps": 100, "pid": os.getpid(),
           "machine": machine_id()}  # this test's own process stands in for the trainer: the run stays active
    if best:
        now.update(best_checkpoint=str(folder), best_mcd=9.5)
    status.write_text(json.dumps(now))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = voice_workspace(tmp_path_factory.mktemp("second-browser") / "workspace")
    live_checkpoint(ws, 2)
    s = serve(ws)
    yield s
    s.stop()


def test_a_reload_stays_on_the_tab_that_was_open(server, page, tmp_path):
    page.goto(server.url)
    expect(page.get_by_role("tab", name="Dataset")).to_have_attribute("aria-selected", "true")
    page.get_by_role("tab", name="Training").click()
    expect(page).to_have_url(re.compile("#training$"))
    page.reload()
    expect(page.get_by_role("tab", name="Training")).to_have_attribute("aria-selected", "true", timeout=30_000)
    expect(page.locator("#run-summary")).to_contain_text(f"{LIVE}: running", timeout=30_000)  # its timers run
    screenshot(page, tmp_path, "reload-stays-on-training")
    page.goto(server.url)  # the plain address: this browser remembers the tab too
    expect(page.get_by_role("tab", name="Training")).to_have_attribute("aria-selected", "true", timeout=30_000)
    page.get_by_role("tab", name="Music removal").click()
    page.get_by_role("tab", name="One file").click()  # a tab row inside a tab is not the page's tab
    page.reload()
    expect(page.get_by_role("tab", name="Music removal")).to_have_attribute("aria-selected", "true", timeout=30_000)
    assert "#music-removal" in page.url


def test_the_voice_picker_follows_the_run_in_training_until_a_voice_is_picked(server, page, tmp_path):
    picker = page.get_by_label("Voice or checkpoint")
    page.goto(server.url + "/#inference")
    expect(page.get_by_role("tab", name="Inference")).to_have_attribute("aria-selected", "true", timeout=30_000)
    expect(picker).to_have_value(f"{LIVE} · step 2", timeout=30_000)  # the run training now, not r1
    live_checkpoint(server.ws, 4, best=True)  # the run saves a better checkpoint
    expect(picker).to_have_value(re.compile(f"^{LIVE} · step 4 · best"), timeout=30_000)
    screenshot(page.locator("#inference-voice"), tmp_path, "picker-follows-the-run")
    picker.click()
    page.get_by_role("option", name=f"{LIVE} · step 2").click()  # the curator picks one
    live_checkpoint(server.ws, 6, best=True)
    picker.click()
    expect(page.get_by_role("option", name=re.compile(f"^{LIVE} · step 6"))).to_be_visible(timeout=30_000)
    page.keyboard.press("Escape")
    expect(picker).to_have_value(f"{LIVE} · step 2")  # the list grew; the pick stayed


def test_ab_speaks_its_own_text_which_starts_as_the_main_text(server, page, tmp_path):
    page.goto(server.url + "/#inference")
    main, ab = page.locator("#inference-text textarea"), page.locator("#inference-ab-text textarea")
    page.get_by_text("A/B: the same text from two voices or checkpoints").click()
    expect(ab).to_have_value(main.input_value())
    main.fill("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")
    expect(ab).to_have_value("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")  # follows the main text until edited
    ab.fill("ሰላም ነው።")
    main.fill("ሌላ ጽሑፍ ነው። ዛሬ ጥሩ ቀን ነው።")
    main.blur()
    page.wait_for_timeout(1000)
    expect(ab).to_have_value("ሰላም ነው።")  # edited here: the main text no longer writes over it
    page.locator("#inference-compare").click()
    for side in ("a", "b"):
        expect(page.locator(f"#inference-audio-{side} audio[src]").first).to_have_attribute(
            "src", re.compile(r"\S+"), timeout=60_000)
    expect(page.get_by_text(re.compile(r"1 sentence\(s\)")).first).to_be_visible()  # A/B spoke its own one sentence
    screenshot(page, tmp_path, "ab-own-text")
