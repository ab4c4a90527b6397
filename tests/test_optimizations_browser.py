"""The Optimizations tab in a real browser: pre-filled with reasons, a change shows its trade, Save
persists it for new runs, Reset goes back, Measure explains itself on a CPU machine."""
import json
import re

from playwright.sync_api import expect

from utils import runs
from utils.workspace import Workspace


PRECISION = re.compile(r"^Number precision.*\(precision\)$")  # what it does, then the technical name


def test_settings_are_prefilled_saved_with_their_trade_and_reset(app_server, page):
    ws = Workspace.open(app_server.workspace)
    page.goto(app_server.url)
    page.get_by_role("tab", name="Optimizations").click()
    page.get_by_text("Every setting: speed and memory").click()  # folded away on the first screen
    expect(page.locator("#why-precision")).to_contain_text("no GPU found")
    expect(page.locator("#why-precision")).to_contain_text("trade:")
    batch = page.locator("#effective-batch")  # a CPU: every batch is a step
    expect(batch).to_contain_text("2000 frames per micro-batch × 1 accumulated = 2000 frames")
    expect(batch).to_contain_text("every batch updates the weights")
    precision = page.get_by_label(PRECISION)
    expect(precision).to_have_value("fp32")

    precision.click()
    page.get_by_role("option", name="fp16", exact=True).click()
    page.locator("#save-settings").click()
    changes = page.locator("#settings-changes")
    expect(changes).to_contain_text("precision: fp32 → fp16")
    expect(changes).to_contain_text("loss scaling")
    assert json.loads(runs.settings_path(ws).read_text()) == {"precision": "fp16"}
    accumulation = page.get_by_label(re.compile(r"\(grad_accumulation\)$"))
    accumulation.fill("3")
    accumulation.press("Tab")
    page.locator("#save-settings").click()
    expect(batch).to_contain_text("2000 frames per micro-batch × 3 accumulated = 6000 frames")
    assert json.loads(runs.settings_path(ws).read_text()) == {"precision": "fp16", "grad_accumulation": 3}
    expect(page.locator("#why-precision")).to_contain_text("your choice")

    page.reload()  # saved in the workspace, not in the page
    page.get_by_role("tab", name="Optimizations").click()
    page.get_by_text("Every setting: speed and memory").click()
    expect(page.get_by_label(PRECISION)).to_have_value("fp16")

    page.get_by_role("button", name="Reset to recommended").click()
    expect(page.get_by_label(PRECISION)).to_have_value("fp32")
    expect(batch).to_contain_text("× 1 accumulated = 2000 frames")
    assert runs.saved_settings(ws) == {}

    page.get_by_text("Measure the largest batch this GPU can take").click()
    page.get_by_role("button", name="Measure", exact=True).click()
    expect(page.get_by_text("No GPU here").first).to_be_visible()
