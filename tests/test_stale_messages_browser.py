"""Messages that stop being true are taken down (issue 35, item 4), in a real browser: the Training tab's message
line about one run once another run is shown, the run picker and list once a run is deleted, and the G2P tab's
request for a dictionary entry once the entry is in."""
from __future__ import annotations

import re
import subprocess

from playwright.sync_api import expect

from tests.helpers import screenshot
from tests.test_training_live import fake_run
from utils.workspace import Workspace


def test_the_training_tab_drops_a_message_about_another_run_and_a_deleted_run(start_app, page, tmp_path):
    ws = Workspace.open(tmp_path / "workspace")
    fake_run(ws, "gone", state="finished")
    fake_run(ws, "fine", state="finished")
    trainer = subprocess.Popen(["sleep", "600"])  # a "trainer" that Stop's signal ends without a goodbye
    try:
        fake_run(ws, "broken", state="running", pid=trainer.pid, launcher_pid=trainer.pid)  # the newest: shown first
        server = start_app(workspace=ws.root)
        page.goto(server.url)
        page.get_by_role("tab", name="Training").click()
        summary, message = page.locator("#run-summary"), page.locator("#train-message")
        stop, resume = page.locator("#stop-button"), page.locator("#resume-button")
        expect(summary).to_contain_text("broken: running", timeout=30_000)
        expect(stop).to_be_enabled()
        expect(resume).to_be_disabled()  # it still trains

        stop.click()  # the line now follows run broken: "Run broken ... failed"
        expect(message).to_contain_text(re.compile(r"Run broken .*failed"), timeout=30_000)
    finally:
        trainer.kill()
        trainer.wait()
    # an ended run has nothing to stop: Stop is greyed out (it stayed red and pressable), Resume is not
    expect(stop).to_be_disabled()
    expect(resume).to_be_enabled()
    picker = page.locator("#run-select input")
    picker.click()
    page.get_by_role("option", name="fine", exact=True).click()
    expect(summary).to_contain_text("fine: finished")
    expect(message).to_have_text("")  # it would read as said of run fine
    expect(stop).to_be_disabled()
    screenshot(page.locator("#run-summary"), tmp_path, "another-run-shown")

    picker.click()
    page.get_by_role("option", name="gone", exact=True).click()
    expect(summary).to_contain_text("gone: finished")
    page.get_by_label("yes, delete the run shown").check()
    page.get_by_role("button", name="Delete run").click()
    expect(message).to_contain_text("Deleted run gone.")
    expect(picker).not_to_have_value("gone")  # the picker names a run that exists, at once
    expect(page.locator("#run-list")).not_to_contain_text("gone")
    assert not ws.run_dir("gone").exists()


def test_the_g2p_tab_stops_asking_for_an_entry_it_received(app_server, page):
    page.goto(app_server.url)
    page.get_by_role("tab", name="Amharic G2P").click()
    page.locator("#g2p-input textarea").fill("ሰላም Google ነው")
    page.locator("#g2p-run").click()
    warnings = page.locator("#g2p-warnings")
    expect(warnings).to_contain_text("Google. Add them to the pronunciation dictionary", timeout=30_000)

    page.locator("#g2p-dict-word input, #g2p-dict-word textarea").fill("Google")
    page.locator("#g2p-dict-ipa input, #g2p-dict-ipa textarea").fill("ɡ u ɡ ə l")
    page.locator("#g2p-dict-add").click()
    expect(page.locator("#g2p-dict-status")).to_contain_text("Google → ɡ u ɡ ə l saved")
    expect(warnings).to_have_text("No warnings.")  # the reading above is of the dictionary as it is now
    expect(page.locator("#g2p-ipa textarea")).to_have_value(re.compile("ɡ u ɡ ə l"))
