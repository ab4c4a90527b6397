"""A curator's first hour (issue #22) in a real browser: refusals stay readable where they were made, the
music-removal clips show their scores, the Optimizations tab opens on what was chosen and why, and a voice
exported elsewhere is offered as soon as the Inference tab is opened. Screenshots go to the test's tmp folder."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import AppServer, serve
from tests.helpers import screenshot
from tests.test_inference import CKPT, voice_workspace
from tests.test_separation_dataset import ws  # noqa: F401  (fixture: dataset "news", a clean and a musical clip)
from utils import inference
from utils.runs import settings
from utils.transcripts.scoring import check_path
from utils.workspace import atomic_write_json
from utils.datasets import load_manifest
from utils.datasets import save_manifest


def shot(page, locator, tmp_path, name: str) -> None:
    screenshot(locator or page, tmp_path, name)


def id_cell(table, column: int, row_id: str):
    """The cell of a table's id column that holds `row_id`."""
    return table.get_by_test_id(re.compile(rf"^cell-\d+-{column}$")).filter(has_text=re.compile(rf"^\s*{row_id}\s*$"))


@pytest.fixture
def server(ws):  # noqa: F811
    s = serve(ws)
    yield s
    s.stop()


def test_refusals_stay_written_in_the_tab_after_their_toast_is_gone(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_label("...or a path inside the workspace").fill("uploads/nothing-here")
    page.locator("#dataset-prepare").click()  # no dataset name typed
    log = page.locator("#dataset-log textarea")
    expect(log).to_have_value(re.compile(r"Not done: Type a name for the new dataset"), timeout=30_000)
    page.locator(".toast-body").first.wait_for(state="detached", timeout=60_000)  # the toast fades...
    expect(log).to_have_value(re.compile(r"Not done: Type a name"))  # ...the text stays
    shot(page, page.locator("#dataset-log"), tmp_path, "dataset-refusal")

    page.get_by_role("tab", name="Amharic G2P").click()
    page.locator("#g2p-dict-word textarea, #g2p-dict-word input").first.fill("ሰላም")
    page.locator("#g2p-dict-ipa textarea, #g2p-dict-ipa input").first.fill("s ə l a θ")
    page.locator("#g2p-dict-add").click()
    status = page.locator("#g2p-dict-status")
    expect(status).to_contain_text("Not done: the model has no symbol for 'θ'", timeout=30_000)  # said once
    shot(page, status, tmp_path, "g2p-refusal")


def test_a_pick_or_form_that_fails_says_why_in_a_box_that_stays(server, page, tmp_path):
    """A row, clip or settings file that changed under the page is said where it was picked (the status line
    under it), not as a red 'Error' badge once the toast fades; an unexpected error names its type and text,
    sends the curator to the app's log, and its traceback is there."""
    ws = server.ws
    atomic_write_json(check_path(ws, "news"), {"dataset": "news", "method": "asr", "rows": [
        {"id": "song", "score": 0.9, "reason": "the recognizer heard other words"},
        {"id": "clean", "score": 0.1, "reason": "as written"}]})  # a transcript check's result, as it writes it
    page.goto(server.url)
    page.get_by_text("Show every row, not only flagged ones").click()
    table, review = page.locator("#dataset-flagged"), page.locator("#transcripts-review")
    expect(table).to_contain_text("song", timeout=30_000)
    expect(review).to_contain_text("the recognizer heard other words", timeout=30_000)
    save_manifest(ws, "news", [r for r in load_manifest(ws, "news") if r["id"] != "song"])  # another browser removed it

    id_cell(table, 0, "song").click()
    boxes = {"#dataset-status": "Not done: Dataset 'news' has no row 'song'",
             "#transcripts-status": "Not done: Dataset 'news' has no row 'song' in this list any more"}
    expect(page.locator("#dataset-status")).to_contain_text(boxes["#dataset-status"], timeout=30_000)
    id_cell(review, 1, "song").click()
    expect(page.locator("#transcripts-status")).to_contain_text(boxes["#transcripts-status"], timeout=30_000)
    shot(page, page.locator("#dataset-status"), tmp_path, "row-pick-refusal")

    page.get_by_role("tab", name="Music removal").click()
    page.get_by_label("Listen to a clip").click()
    page.get_by_role("option", name="song", exact=True).click()
    boxes["#sep-status"] = "Not done: Dataset 'news' has no clip 'song'"
    expect(page.locator("#sep-status")).to_contain_text(boxes["#sep-status"], timeout=30_000)

    page.get_by_role("tab", name="Optimizations").click()
    expect(page.locator("#chosen-here")).to_contain_text("Where it trains", timeout=30_000)
    settings.settings_path(ws).write_text("{hand-edited", encoding="utf-8")  # a settings file that cannot be read
    page.locator("#settings-preset").get_by_label("small", exact=True).check()
    boxes["#settings-changes"] = "training_settings.json cannot be read"
    expect(page.locator("#settings-changes")).to_contain_text(boxes["#settings-changes"], timeout=30_000)
    expect(page.locator("#settings-changes")).to_contain_text("press Reset to recommended")
    shot(page, page.locator("#settings-changes"), tmp_path, "unreadable-settings")

    expect(page.locator(".toast-body")).to_have_count(0, timeout=60_000)  # the toasts fade...
    for tab, selector in (("Dataset", "#dataset-status"), ("Dataset", "#transcripts-status"),
                          ("Music removal", "#sep-status"), ("Optimizations", "#settings-changes")):
        page.get_by_role("tab", name=tab).click()
        expect(page.locator(selector)).to_contain_text(boxes[selector])  # ...the words stay
    page.get_by_role("button", name="Reset to recommended").click()  # rewrites the file: the form works again
    expect(page.locator("#settings-changes")).to_contain_text("Back to the recommended settings", timeout=30_000)


def test_music_removal_names_each_clip_with_its_score(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_role("tab", name="Music removal").click()
    page.locator("#sep-run").click()
    expect(page.locator("#sep-table")).to_contain_text("yes, clearly", timeout=180_000)
    # the listen list starts on the clip with music
    first = re.compile(r"song \(yes, clearly: music score 0\.\d+\)")
    expect(page.get_by_label("Listen to a clip")).to_have_value(first, timeout=30_000)
    shot(page, page.locator("#sep-table"), tmp_path, "separation-scores")
    page.locator("#sep-accept").click()  # nothing picked: only the clearly musical clip
    expect(page.locator("#sep-status")).to_contain_text("1 clip(s) with clear music", timeout=30_000)
    expect(page.locator("#sep-table")).to_contain_text("separated")


def test_optimizations_open_on_what_was_chosen_here_and_why(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_role("tab", name="Optimizations").click()
    chosen = page.locator("#chosen-here")
    expect(chosen).to_contain_text("Where it trains (device): cpu.", timeout=30_000)
    expect(chosen).to_contain_text("no GPU found")
    expect(page.locator("#effective-batch")).to_contain_text("frames per micro-batch")
    expect(page.locator("#why-precision")).to_be_hidden()  # every setting is folded away
    shot(page, None, tmp_path, "optimizations-first-screen")
    page.get_by_text("Every setting: training length, quality checks, saved copies").click()
    for name in ("beta2", "grad_clip", "checkpoint_every"):
        why = page.locator(f"#why-{name}")
        expect(why).to_be_visible()
        assert "default" not in why.inner_text().split("trade:")[0], why.inner_text()  # a reason, not a shrug
    expect(page.get_by_label(re.compile(r"^Cap on one update's size.*\(grad_clip\)$"))).to_have_value("5")


def test_a_voice_exported_elsewhere_is_offered_when_the_inference_tab_opens(tmp_path, page):
    ws = voice_workspace(tmp_path / "workspace")
    server = AppServer(ws.root).wait_ready()
    try:
        page.goto(server.url)
        page.get_by_role("tab", name="Inference").click()
        expect(page.get_by_label("Voice or checkpoint")).to_have_value(re.compile("step 10"))
        page.get_by_role("tab", name="Training").click()
        inference.export_voice(ws, CKPT, "fresh-voice")  # what the Training tab's Export does
        page.get_by_role("tab", name="Inference").click()
        page.get_by_label("Voice or checkpoint").click()
        expect(page.get_by_role("option", name="fresh-voice (exported voice)")).to_be_visible(timeout=30_000)
        shot(page, page.locator("#inference-voice"), tmp_path, "inference-voice-list")
        # it came from opening the tab: the tab's select event refreshes the voice list
        wired = page.evaluate("""() => {
            const c = window.gradio_config, voice = c.components.find(x => x.props.elem_id === 'inference-voice');
            const tab = c.components.find(x => x.type === 'tabitem' && x.props.label === 'Inference');
            return c.dependencies.some(d => d.targets.some(t => t[0] === tab.id && t[1] === 'select')
                                            && d.outputs.includes(voice.id));
        }""")
        assert wired
    finally:
        server.stop()
