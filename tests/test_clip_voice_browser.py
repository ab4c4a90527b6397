"""The Inference tab's OmniVoice section in a real browser: a voice from a dataset row, picked and heard."""
from __future__ import annotations

import re
import shutil

from playwright.sync_api import expect

from tests.conftest import serve
from tests.helpers import screenshot
from tests.test_clip_voice import LONG, clip_dataset, tiny_base  # noqa: F401  (the module's tiny base fixture)
from utils.workspace import Workspace


def test_a_voice_from_a_dataset_row_is_picked_and_speaks(tiny_base, tmp_path, page):  # noqa: F811
    ws = Workspace.open(tmp_path / "workspace")
    shutil.copytree(tiny_base, ws.root / "pretrained" / "omnivoice")
    server = serve(clip_dataset(ws))
    try:
        page.goto(server.url)
        page.get_by_role("tab", name="Inference").click()
        page.get_by_text("OmniVoice: a voice from one clip (no training)").click()
        expect(page.locator("#clip-voice-licences")).to_contain_text("CC-BY-NC-4.0")
        expect(page.locator("#clip-voice-licences")).to_contain_text("Boson Higgs Audio 2 Community License")
        # opening the section picks the only dataset itself (clicking the list meanwhile raced with that update)
        expect(page.locator("#clip-voice-dataset input")).to_have_value("am", timeout=30_000)
        # the row nearest 8 s is picked first and fills in its transcript and a name
        expect(page.locator("#clip-voice-text textarea")).to_have_value(LONG, timeout=30_000)
        expect(page.locator("#clip-voice-name input, #clip-voice-name textarea").first).to_have_value("am-long")
        page.locator("#clip-voice-make").click()
        expect(page.locator("#clip-voice-log textarea")).to_have_value(re.compile("voice am-long is ready"),
                                                                         timeout=120_000)
        expect(page.get_by_label("Voice or checkpoint")).to_have_value(re.compile("am-long"), timeout=30_000)
        screenshot(page.locator("#clip-voice"), tmp_path, "clip-voice")
        page.locator("#inference-text textarea").fill("ሰላም ነው።")
        page.locator("#inference-speak").click()
        expect(page.locator("#inference-info")).to_contain_text("real-time factor", timeout=120_000)
        page.wait_for_function("() => Array.from(document.querySelectorAll('#inference-audio audio'))"
                               ".some(a => a.src && a.duration > 0.3)", timeout=30_000)
    finally:
        server.stop()
