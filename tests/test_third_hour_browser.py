"""A curator's third hour (issue 46) in a real browser, for what only the page shows: the first evaluation's
point on the validation MCD plot, with plain numbers on its axes; every picker current when its tab opens, and
matching what the tab shows."""
from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.conftest import serve
from tests.helpers import numeric_ticks, plot_seen, screenshot
from tests.test_inference import voice_workspace
from tests.test_second_hour_browser import LIVE, live_checkpoint
from utils.datasets import deletion
from utils.runs import settings
from utils.workspace import Workspace, append_jsonl, atomic_write_json

VISIBLE_POINTS_JS = """(sel) => [...document.querySelectorAll(sel + ' svg .role-mark path')]
  .filter(p => p.getAttribute('opacity') !== '0' && /[0-9.]+,[0-9.]+[^Z]*[AL]/.test(p.getAttribute('d') || ''))
  .length"""  # marks with an area or a length: a line through one point is 'M x,yZ', drawn as nothing


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = Workspace.open(tmp_path_factory.mktemp("third-browser") / "workspace")
    run_dir = ws.run_dir("first-eval")
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "am", "preset": "tiny", "max_steps": 100}})
    atomic_write_json(run_dir / "status.json", {"state": "finished", "created": time.time(), "step": 50,
                                                "max_steps": 100})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 50, "loss": 3.0, "time": time.time()})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 50, "mcd": 12.34567, "time": time.time()})
    s = serve(ws)
    yield s
    s.stop()


def test_the_first_evaluation_shows_as_a_point_with_plain_axis_labels(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_role("tab", name="Training").click()
    seen = plot_seen(page, "#mcd-plot", ("distance from the real voice (mcd)",))
    steps, values = numeric_ticks(seen["x"]), numeric_ticks(seen["y"])  # the point stands off the plot's edges
    assert steps[0] == 0 and steps[-1] > 50 and values[0] < 12.3457 < values[-1], seen
    assert page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") == 1
    screenshot(page.locator("#mcd-plot"), tmp_path, "first-evaluation-point")

    # the run's last evaluation: Gradio drew a plot whose axes moved with the points it held before, so this point
    # stayed missing until a reload
    run_dir = server.ws.run_dir("first-eval")
    append_jsonl(run_dir / "metrics.jsonl", {"step": 100, "mcd": 11.5, "time": time.time()})
    atomic_write_json(run_dir / "status.json", {"state": "finished", "created": time.time(), "step": 100,
                                                "max_steps": 100})
    expect_points = time.time() + 40
    while page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") != 2 and time.time() < expect_points:
        time.sleep(0.5)
    assert page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") == 2
    assert numeric_ticks(plot_seen(page, "#mcd-plot", ("distance from the real voice (mcd)",))["x"])[-1] > 100


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """An app started on a workspace with nothing in it yet but saved settings: what the tabs built then is empty,
    and all the rest comes while it runs (as the curator's work does)."""
    ws = Workspace.open(tmp_path_factory.mktemp("third-studio") / "workspace")
    settings.save_settings(ws, {"max_steps": 300})
    s = serve(ws)
    for name in ("lectures", "news"):  # prepared after the app started
        ws.dataset_dir(name).mkdir(parents=True)
        (ws.dataset_dir(name) / "manifest.jsonl").write_text("", encoding="utf-8")
    voice_workspace(ws.root)  # run r1's checkpoint
    live_checkpoint(ws, 2, best=True)  # and a run training now
    yield s
    s.stop()


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def test_dataset_pickers_and_the_steps_box_are_current_each_time_their_tab_opens(studio, page):
    page.goto(studio.url)
    g2p = page.locator("#g2p-dataset input")
    open_tab(page, "Amharic G2P")
    expect(g2p).to_have_value("lectures")  # not empty while datasets exist
    deletion.delete_dataset(studio.ws, "lectures", confirmed=True)
    open_tab(page, "Dataset")
    open_tab(page, "Amharic G2P")
    expect(g2p).to_have_value("news")  # the deleted one is gone without Refresh
    g2p.click()
    expect(page.get_by_role("option", name="news", exact=True)).to_be_visible()
    expect(page.get_by_role("option", name="lectures", exact=True)).to_have_count(0)
    page.keyboard.press("Escape")
    open_tab(page, "Music removal")
    expect(page.locator("#sep-dataset input")).to_have_value("news")

    steps = page.locator("#train-form").get_by_label("steps", exact=True)
    open_tab(page, "Training")
    expect(steps).to_have_value("300")
    open_tab(page, "Optimizations")
    page.get_by_text("Measure the largest batch this GPU can take").click()
    expect(page.locator("#measure-dataset input")).to_have_value("news")
    page.get_by_text("Every setting: training length, quality checks, saved copies").click()
    page.get_by_label(re.compile(r"\(max_steps\)")).fill("400")
    page.locator("#save-settings").click()
    expect(page.locator("#settings-changes")).to_contain_text("Saved")
    open_tab(page, "Training")
    expect(steps).to_have_value("400")  # what the Optimizations tab saved
    steps.fill("350")
    open_tab(page, "System")
    open_tab(page, "Training")
    expect(page.locator("#run-summary")).to_contain_text(LIVE)  # the tab's refresh came back
    expect(steps).to_have_value("350")  # a number typed here stays


def test_the_voice_spoken_with_stays_picked_and_the_export_picker_starts_on_it(studio, page, tmp_path):
    picker = page.get_by_label("Voice or checkpoint", exact=True)
    page.goto(studio.url)
    open_tab(page, "Inference")
    expect(picker).to_have_value(re.compile(f"^{LIVE} · step 2"))
    page.get_by_text("Export a voice (folder + zip, optional ONNX)").click()
    expect(page.get_by_label("Checkpoint or voice", exact=True)).to_have_value(picker.input_value())
    page.locator("#inference-text textarea").fill("ሰላም ነው።")
    page.locator("#inference-speak").click()
    expect(page.locator("#inference-info")).to_contain_text("real-time factor", timeout=60_000)
    live_checkpoint(studio.ws, 4, best=True)  # the run saves a better checkpoint while step 2's speech is shown
    page.get_by_text("A/B: the same text from two voices or checkpoints").click()
    page.locator("#inference-ab-a input").click()  # another picker's list says when the page has heard of it
    expect(page.get_by_role("option", name=re.compile(f"^{LIVE} · step 4"))).to_be_visible(timeout=30_000)
    page.keyboard.press("Escape")
    expect(picker).to_have_value(re.compile(f"^{LIVE} · step 2"))  # the list grew; the voice heard stayed
    screenshot(page.locator("#inference-voice"), tmp_path, "spoken-voice-stays")
