"""A full-page screenshot of every tab, as a curator sees it with a prepared dataset, a finished run and
an exported voice, saved as <tab>.png in a temporary folder (tests write nowhere else). The same test
refreshes the README's and the user guide's pictures in docs/screenshots/ when AMHARIC_TTS_SCREENSHOTS
names that folder: `python docs/refresh_screenshots.py`. Amharic renders with Debian's
fonts-sil-abyssinica (tests/run.sh installs it)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import expect

from tests.conftest import AppServer
from tests.helpers import plot_seen
from tests.test_curator_journey import make_ljspeech_zip
from tests.test_jobs import TINY
from utils import inference
from utils.runs import settings
from utils.datasets import prepare
from utils.events import run_to_end
from utils.separation import dataset as separation
from utils.training import TrainConfig, prepare_run, run
from utils.workspace import Workspace
from webui.app import TABS

pytestmark = pytest.mark.slow

WIDTH = 1280
STEPS = 40


def file_name(label: str) -> str:
    return label.lower().replace(" ", "-") + ".png"


@pytest.fixture
def shots(tmp_path) -> Path:
    """The folder the screenshots go to: AMHARIC_TTS_SCREENSHOTS when set (docs/refresh_screenshots.py
    sets it to docs/screenshots), else a temporary one."""
    chosen = os.environ.get("AMHARIC_TTS_SCREENSHOTS")
    return Path(chosen).resolve() if chosen else tmp_path / "screenshots"


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """A workspace a curator has worked in: dataset `abebe` (music removed from its one clip with music),
    run `first` (tiny, evaluated), voice `abebe-voice`."""
    tmp = tmp_path_factory.mktemp("shots")
    ws = Workspace.open(tmp / "workspace")
    run_to_end(prepare(ws, "abebe", make_ljspeech_zip(tmp)))
    run_to_end(separation.process_dataset(ws, "abebe"))
    settings.save_settings(ws, TINY)
    cfg = TrainConfig.from_dict({**TINY, "workspace": str(ws.root), "dataset": "abebe", "run": "first",
                                 "preset": "tiny", "max_steps": STEPS, "eval_every": STEPS // 2, "lr": 2e-3})
    result = run(prepare_run(cfg))
    inference.export_voice(ws, str(Path(result["last_checkpoint"]).relative_to(ws.root)), "abebe-voice")
    server = AppServer(ws.root).wait_ready()
    yield server
    server.stop()


def ready(page, label: str) -> None:
    """Wait until the tab shows its content, not loading placeholders."""
    if label == "Dataset":
        page.locator("#dataset-pick input").click()
        page.get_by_role("option", name="abebe", exact=True).click()
        expect(page.locator("#dataset-summary")).to_contain_text("usable", timeout=60_000)
    elif label == "Music removal":
        expect(page.locator("#sep-table")).to_contain_text("clip00", timeout=30_000)
    elif label == "Amharic G2P":
        expect(page.locator("#g2p-ipa textarea")).to_have_value(re.compile(r"\S"), timeout=30_000)
    elif label == "Training":
        expect(page.locator("#run-summary")).to_contain_text("finished", timeout=30_000)
        plot_seen(page, "#loss-plot", timeout=30_000)  # its curves drawn, not an empty box
    elif label == "Inference":
        page.locator("#inference-speak").click()
        expect(page.locator("#inference-info")).to_contain_text("real-time factor", timeout=120_000)
    elif label == "System":
        expect(page.locator("#live-usage")).to_contain_text(re.compile(r"CPU \d+%"), timeout=30_000)
    expect(page.get_by_text("Error", exact=True)).to_have_count(0)  # the docs never show a failed tab
    page.evaluate("async () => { await document.fonts.ready; }")  # no letter photographed in a fallback font
    page.wait_for_timeout(1500)  # plots finish drawing


def test_every_tab_is_photographed_for_the_docs(studio, browser, shots):
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(studio.url)
    shots.mkdir(parents=True, exist_ok=True)
    try:
        for label, _ in TABS:
            page.get_by_role("tab", name=label, exact=True).click()
            ready(page, label)
            path = shots / file_name(label)
            page.screenshot(path=str(path), full_page=True)
            # 256 colours: a UI screenshot looks the same and the file is a fraction of the size
            Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
            with Image.open(path) as shot:
                assert shot.width == WIDTH and shot.height > 500, (label, shot.size)
    finally:
        context.close()
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(file_name(label) for label, _ in TABS)
