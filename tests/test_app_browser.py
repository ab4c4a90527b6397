"""The whole app in a real headless Chromium: every tab there and working offline, a reload that stays on its tab,
messages that stay where they were made, pickers current each time their tab opens; and a curator's whole journey,
from a recordings zip to hearing the trained voice, that ends with a photograph of every tab for the docs.

One app serves the module (`studio`); the journey starts an empty app of its own, as a new curator does."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import expect

from tests.conftest import AppServer, serve
from tests.helpers import (LIVE, live_checkpoint, make_ljspeech_zip, news_dataset, numeric_ticks, plot_seen,
                           screenshot, voice_workspace)
from tests.test_jobs import TINY
from utils import hardware, jobs
from utils.audio import load_audio
from utils.datasets import deletion, load_manifest, save_manifest
from utils.runs import settings, views
from utils.separation.gate import CLEAR
from utils.transcripts.scoring import check_path
from utils.workspace import Workspace, atomic_write_json
from webui.app import TABS


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """A workspace a curator works in: dataset `news` (a clean clip and one over music), run r1's checkpoint and a
    vocoder, and run `live` training now (its checkpoint at step 2 the best so far)."""
    tmp = tmp_path_factory.mktemp("studio")
    ws = voice_workspace(tmp / "workspace")
    news_dataset(ws.root, tmp)
    live_checkpoint(ws, 2, best=True)
    server = serve(ws)
    yield server
    server.stop()


def open_tab(page, name: str):
    page.get_by_role("tab", name=name, exact=True).click()
    return page.get_by_role("tabpanel").filter(visible=True).last


def id_cell(table, column: int, row_id: str):
    """The cell of a table's id column that holds `row_id`."""
    return table.get_by_test_id(re.compile(rf"^cell-\d+-{column}$")).filter(has_text=re.compile(rf"^\s*{row_id}\s*$"))


def test_every_tab_is_shown_and_system_tab_reports_cpu_count(studio, page):
    import os

    page.goto(studio.url)
    for label, _ in TABS:
        expect(page.get_by_role("tab", name=label)).to_be_visible()
    page.get_by_role("tab", name="System").click()
    card = page.locator("#hardware-card")
    expect(card).to_contain_text("CPU cores")
    expected = len(os.sched_getaffinity(0))
    assert page.locator("#cpu-count").inner_text().strip() == str(expected)
    expect(card).to_contain_text("No GPU was found")
    # the live panel refreshes from the server on a timer
    expect(page.locator("#live-usage")).to_contain_text(re.compile(r"CPU \d+%"), timeout=20_000)
    expect(page.locator("#recommended-settings")).to_contain_text("precision")
    # CPU % and RAM GiB each on an axis of its own unit, named in the legend
    busy, memory = plot_seen(page, "#usage-percent", ("CPU %",)), plot_seen(page, "#usage-memory", ("RAM GiB",))
    assert "RAM GiB" not in busy["legend"] and "CPU %" not in memory["legend"]
    assert numeric_ticks(busy["y"])[-1] == 100 and numeric_ticks(memory["y"])[0] == 0
    # memory against all there is: the axis runs to the machine's RAM, not to the line (which read as full)
    assert numeric_ticks(memory["y"])[-1] >= 0.8 * hardware.live_usage()["ram_total_gb"], memory["y"]


def test_a_tab_selection_answered_after_a_newer_one_changes_no_timer():
    """Gradio selects the first tab as the page mounts; sent or answered late on a busy server it must not switch
    off the timers of the tab the curator clicked since (what left the System tab blank in a CI run), nor of the
    tab a reload reopened."""
    import types

    import gradio as gr

    from webui.app import _NewestSelection, timers_for

    with gr.Blocks():
        dataset_timer, system_timer = gr.Timer(1.0), gr.Timer(2.0)
    every, newest = [dataset_timer, system_timer], _NewestSelection()
    open_dataset = timers_for([dataset_timer], every, newest, "dataset")
    open_system = timers_for([system_timer], every, newest, "system")
    browser, other = types.SimpleNamespace(session_hash="a"), types.SimpleNamespace(session_hash="b")

    clicked = open_system(2000.0, "system", browser)
    assert [u.active for u in clicked] == [False, True]
    late = open_dataset(1000.0, "system", browser)  # the mount-time select, answered after the click
    assert late == [gr.skip(), gr.skip()]
    sent_late = open_dataset(2500.0, "system", browser)  # sent after the click: the page shows System
    assert sent_late == [gr.skip(), gr.skip()]
    assert [u.active for u in open_dataset(1000.0, "dataset", other)] == [True, False]  # another browser's own clock
    assert [u.active for u in open_dataset(3000.0, "dataset", browser)] == [True, False]  # a newer click switches
    assert [u.active for u in open_system(4000.0, "", browser)] == [False, True]  # no tab found: the select decides


def test_offline_the_page_asks_nothing_of_another_host_and_its_fonts_are_whole(studio, page):
    """A curator offline (or on a Colab without internet) sees the studio's own fonts, never a fallback one for some
    letters: every request goes to the app itself, every font face the page declares loads from it, and each face's
    file has every Latin letter and digit (Gradio's bundled SemiBold files hold a few dozen glyphs: the title drew
    its "A" in the font and "mharic" in the fallback)."""
    import io
    import re as regex
    import string
    import urllib.request
    from urllib.parse import urljoin, urlparse

    from fontTools.ttLib import TTFont

    hosts, failed, fonts = set(), [], []
    page.on("request", lambda r: hosts.add(urlparse(r.url).netloc) if r.url.startswith("http") else None)
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("response", lambda r: fonts.append(r.url) if r.url.endswith(".woff2") else None)
    page.goto(studio.url)
    expect(page.get_by_role("tab", name=TABS[0][0])).to_be_visible()
    for label, _ in TABS:
        page.get_by_role("tab", name=label, exact=True).click()
    faces = page.evaluate("""async () => { await document.fonts.ready;
        const out = []; document.fonts.forEach(f => out.push([f.family, f.weight, f.status])); return out; }""")
    assert hosts == {urlparse(studio.url).netloc}, hosts
    assert not [u for u in failed if ".woff" in u or ".css" in u], failed
    assert all(status == "loaded" for _, _, status in faces if status != "unloaded"), faces
    sheets = page.evaluate("() => [...document.querySelectorAll('link[rel=stylesheet], style')].map(e => e.href || '')")
    css = "".join(urllib.request.urlopen(u).read().decode() for u in sheets if u) + page.evaluate(
        "() => [...document.querySelectorAll('style')].map(e => e.textContent).join('')")
    declared = {urljoin(studio.url + "/", u) for u in regex.findall(r"url\(['\"]?([^'\")]+\.woff2)", css)}
    assert fonts and set(fonts) <= declared, (fonts, declared)  # what the page drew with, from the app's own CSS
    needed = set(map(ord, string.ascii_letters + string.digits))
    for url in sorted(declared):
        cmap = TTFont(io.BytesIO(urllib.request.urlopen(url).read())).getBestCmap()
        assert needed <= set(cmap), f"{url} lacks {''.join(sorted(chr(c) for c in needed - set(cmap)))}"


def test_a_reload_stays_on_the_tab_that_was_open(studio, page, tmp_path):
    page.goto(studio.url)
    expect(page.get_by_role("tab", name="Dataset")).to_have_attribute("aria-selected", "true")
    page.get_by_role("tab", name="Training").click()
    expect(page).to_have_url(re.compile("#training$"))
    page.reload()
    expect(page.get_by_role("tab", name="Training")).to_have_attribute("aria-selected", "true", timeout=30_000)
    expect(page.locator("#run-summary")).to_contain_text(f"{LIVE}: running", timeout=30_000)  # its timers run
    screenshot(page, tmp_path, "reload-stays-on-training")
    page.goto(studio.url)  # the plain address: this browser remembers the tab too
    expect(page.get_by_role("tab", name="Training")).to_have_attribute("aria-selected", "true", timeout=30_000)
    page.get_by_role("tab", name="Music removal").click()
    page.get_by_role("tab", name="One file").click()  # a tab row inside a tab is not the page's tab
    page.reload()
    expect(page.get_by_role("tab", name="Music removal")).to_have_attribute("aria-selected", "true", timeout=30_000)
    assert "#music-removal" in page.url


# each heading of a table: how many lines its words take (the first text in it, not its menu button)
HEADING_LINES_JS = """(sel) => Object.fromEntries([...document.querySelectorAll(sel + ' th')].map(th => {
  const walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
  let node; while ((node = walk.nextNode()) && !node.textContent.trim()) {}
  if (!node) return ['', 0];
  const range = document.createRange(); range.selectNodeContents(node);
  return [node.textContent.trim(), new Set([...range.getClientRects()].map(r => Math.round(r.top))).size];
}))"""


def test_on_a_phone_a_tab_of_the_more_tabs_menu_opens_from_the_address_and_is_kept(studio, browser, tmp_path):
    """At 420 px Gradio moves the later tabs into a "More tabs" menu whose buttons carry no tab id: #inference opened
    the Dataset tab, and a tab picked from the menu was kept neither in the address nor for a reload."""
    context = browser.new_context(viewport={"width": 420, "height": 900})
    page = context.new_page()
    try:
        page.goto(studio.url.rstrip("/") + "/#inference")
        expect(page.get_by_role("tab", name="Inference")).to_have_attribute("aria-selected", "true", timeout=30_000)
        page.get_by_role("button", name="More tabs").click()
        page.locator(".overflow-dropdown button", has_text="Training").click()
        expect(page).to_have_url(re.compile("#training$"))
        page.reload()
        expect(page.get_by_role("tab", name="Training")).to_have_attribute("aria-selected", "true", timeout=30_000)
        screenshot(page, tmp_path, "phone-reload-stays-on-training")
        # the runs table's one-word headings on one line each: "dataset" was broken into "dat/ase/t"
        expect(page.locator("#run-list th").first).to_be_visible()
        lines = page.evaluate(HEADING_LINES_JS, "#run-list")
        assert "dataset" in lines and all(n == 1 for head, n in lines.items() if " " not in head), lines
    finally:
        context.close()


def test_refusals_stay_written_in_the_tab_after_their_toast_is_gone(studio, page, tmp_path):
    page.goto(studio.url)
    page.get_by_label("...or a path inside the workspace").fill("uploads/nothing-here")
    page.locator("#dataset-prepare").click()  # no dataset name typed
    log = page.locator("#dataset-log textarea")
    expect(log).to_have_value(re.compile(r"Not done: Type a name for the new dataset"), timeout=30_000)
    expect(page.locator(".toast-body").first).to_be_visible()
    page.get_by_role("tab", name="Amharic G2P").click()  # the toast goes with its tab: it read as the next one's
    expect(page.locator(".toast-body")).to_have_count(0, timeout=3_000)  # at once, not when it fades (10 s)
    page.get_by_role("tab", name="Dataset").click()
    expect(log).to_have_value(re.compile(r"Not done: Type a name"))  # the text stays
    screenshot(page.locator("#dataset-log"), tmp_path, "dataset-refusal")

    page.get_by_role("tab", name="Amharic G2P").click()
    page.locator("#g2p-dict-word textarea, #g2p-dict-word input").first.fill("ሰላም")
    page.locator("#g2p-dict-ipa textarea, #g2p-dict-ipa input").first.fill("s ə l a θ")
    page.locator("#g2p-dict-add").click()
    status = page.locator("#g2p-dict-status")
    expect(status).to_contain_text("Not done: The model has no symbol for 'θ'", timeout=30_000)  # said once
    screenshot(status, tmp_path, "g2p-refusal")


def test_a_pick_or_form_that_fails_says_why_in_a_box_that_stays(studio, page, tmp_path):
    """A row, clip or settings file that changed under the page is said where it was picked (the status line
    under it), not as a red 'Error' badge once the toast fades; an unexpected error names its type and text,
    sends the curator to the app's log, and its traceback is there."""
    ws = studio.ws
    atomic_write_json(check_path(ws, "news"), {"dataset": "news", "method": "asr", "rows": [
        {"id": "song", "score": 0.9, "reason": "the recognizer heard other words"},
        {"id": "clean", "score": 0.1, "reason": "as written"}]})  # a transcript check's result, as it writes it
    page.goto(studio.url)
    page.get_by_text("Show every row, not only flagged ones").click()
    table, review = page.locator("#dataset-flagged"), page.locator("#transcripts-review")
    expect(table).to_contain_text("song", timeout=30_000)
    expect(review).to_contain_text("the recognizer heard other words", timeout=30_000)
    rows = load_manifest(ws, "news")
    save_manifest(ws, "news", [r for r in rows if r["id"] != "song"])  # another browser removed it

    id_cell(table, 0, "song").click()
    boxes = {"#dataset-status": "Not done: Dataset 'news' has no row 'song'",
             "#transcripts-status": "Not done: Dataset 'news' has no row 'song' in this list any more"}
    expect(page.locator("#dataset-status")).to_contain_text(boxes["#dataset-status"], timeout=30_000)
    id_cell(review, 1, "song").click()
    expect(page.locator("#transcripts-status")).to_contain_text(boxes["#transcripts-status"], timeout=30_000)
    screenshot(page.locator("#dataset-status"), tmp_path, "row-pick-refusal")

    # back, with a clip added meanwhile: the Music removal tab's list is read as the tab opens (it shows "encore")
    save_manifest(ws, "news", rows + [{**rows[0], "id": "encore"}])
    page.get_by_role("tab", name="Music removal").click()
    expect(page.locator("#sep-table")).to_contain_text("encore", timeout=30_000)
    save_manifest(ws, "news", [r for r in rows if r["id"] != "song"])  # and removed again while the tab shows it
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
    screenshot(page.locator("#settings-changes"), tmp_path, "unreadable-settings")

    for tab, selector in (("Dataset", "#dataset-status"), ("Dataset", "#transcripts-status"),
                          ("Music removal", "#sep-status"), ("Optimizations", "#settings-changes")):
        page.get_by_role("tab", name=tab).click()  # the toasts go as a tab opens...
        expect(page.locator(".toast-body")).to_have_count(0, timeout=3_000)
        expect(page.locator(selector)).to_contain_text(boxes[selector])  # ...the words stay
    page.get_by_role("button", name="Reset to recommended").click()  # rewrites the file: the form works again
    expect(page.locator("#settings-changes")).to_contain_text("Back to the recommended settings", timeout=30_000)


def test_dataset_pickers_and_the_steps_box_are_current_each_time_their_tab_opens(studio, page):
    """Each picker and the steps box read the workspace as it is when their tab opens: a dataset prepared after the
    page loaded, one deleted, steps saved on the Optimizations tab; a number typed in the box stays."""
    ws = studio.ws
    settings.save_settings(ws, {"max_steps": 300})
    page.goto(studio.url)
    ws.dataset_dir("lectures").mkdir(parents=True)  # prepared after the page loaded
    (ws.dataset_dir("lectures") / "manifest.jsonl").write_text("", encoding="utf-8")
    g2p = page.locator("#g2p-dataset input")
    open_tab(page, "Amharic G2P")
    g2p.click()
    page.get_by_role("option", name="lectures", exact=True).click()  # offered: the list was read as the tab opened
    expect(g2p).to_have_value("lectures")
    deletion.delete_dataset(ws, "lectures", confirmed=True)
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


# ---------------------------------------------------------------------------------------------- the journey
N_CLIPS = 6
STEPS = 40
FIXED_WORD, FIXED_IPA = "ሰላም", "s ə l a m a"  # the curator's reading, unlike the rules' "s ə l a m"
SHOT_WIDTH = 1280


@pytest.fixture
def journey(tmp_path):
    archive = make_ljspeech_zip(tmp_path, N_CLIPS)
    ws = Workspace.open(tmp_path / "workspace")
    # tiny CPU batches (a full-size model cannot train in a test), evaluated half way for the docs' quality curve
    settings.save_settings(ws, {**TINY, "eval_every": STEPS // 2})
    server = AppServer(ws.root).wait_ready()
    server.ws, server.archive = ws, archive
    yield server
    for r in views.run_table(ws):
        if r["status"] in jobs.ACTIVE:
            jobs.stop(ws, r["run"]), jobs.stop(ws, r["run"])
    server.stop()


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where the tabs' pictures go: AMHARIC_TTS_SCREENSHOTS when set (docs/refresh_screenshots.py sets it to
    docs/screenshots), else a temporary folder."""
    chosen = os.environ.get("AMHARIC_TTS_SCREENSHOTS")
    return Path(chosen).resolve() if chosen else tmp_path / "screenshots"


def choose(scope, page, label: str, option: str) -> None:
    scope.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


def test_a_curator_goes_from_a_recordings_zip_to_hearing_the_trained_voice_and_every_tab_is_photographed(
        journey, page, browser, shots):
    """Recordings zip (one clip with music under it) -> check report -> music removed from that clip -> a
    pronunciation fixed in the dictionary -> tiny training run, stopped and resumed -> exported voice -> speech on
    the Inference tab, downloaded; then a full-page picture of every tab as the curator now sees it (the docs'
    pictures: `python docs/refresh_screenshots.py`). UI only, but for the tiny CPU settings saved before the app
    starts (what the Optimizations tab saves; the full-size recommendation cannot train in a test)."""
    ws = journey.ws
    page.goto(journey.url)

    # 1. Dataset: upload the zip, name it, Prepare; the totals appear
    tab = open_tab(page, "Dataset")
    tab.locator("#dataset-upload input[type=file]").set_input_files(str(journey.archive))
    # by the cell's name: once uploaded, Gradio shows the name's stem and extension apart ("my_recordings .zip")
    expect(tab.locator("#dataset-upload").get_by_role("cell", name="my_recordings.zip")).to_be_visible()
    tab.locator("#dataset-prepare").click()  # forgot the name: told what to do, nothing is made
    expect(page.get_by_text("Type a name for the new dataset").first).to_be_visible()
    assert ws.list_datasets() == []
    tab.get_by_label("Dataset name", exact=True).fill("abebe")
    tab.locator("#dataset-prepare").click()
    summary = tab.locator("#dataset-summary")
    expect(summary).to_contain_text("abebe", timeout=180_000)
    expect(summary).to_contain_text(re.compile(rf"of {N_CLIPS} clips"))
    expect(summary).to_contain_text(re.compile(r"usable of [\d.]+ (h|min|s)"))  # utils.training.speed.say_hours
    expect(tab.locator("#dataset-log textarea")).to_have_value(re.compile(r"done"))
    assert "abebe" in ws.list_datasets()
    assert len(list((ws.dataset_dir("abebe") / "audio").glob("*.wav"))) == N_CLIPS
    expect(tab.locator("#dataset-name-note")).to_contain_text("abebe exists: Prepare adds")  # not "a new dataset"

    # the check report: totals and the table of flagged rows are there
    expect(tab.locator("#dataset-flagged")).to_be_visible()

    # 2. Music removal: the detector finds the one clip with music and separates it; the curator accepts
    tab = open_tab(page, "Music removal")
    choose(tab, page, "Dataset", "abebe")
    tab.locator("#sep-run").click()
    log = page.locator("#sep-log textarea")
    expect(log).to_have_value(re.compile(rf"of {N_CLIPS} clips had music"), timeout=300_000)
    # the music clip is found; a short clean clip may also score just over the gate (a faint candidate)
    expect(log).to_have_value(re.compile(r"clip00 music: separated"))
    expect(log).to_have_value(re.compile(r"clip01 clean: passed through"))
    tab.locator("#sep-accept").click()  # nothing picked: only where music was clearly found
    # the run's own line speaks of clear music too: wait for Accept's
    expect(tab.locator("#sep-status")).to_contain_text("switched to their music-removed audio", timeout=60_000)
    rows = {r["id"]: r for r in load_manifest(ws, "abebe")}
    assert rows["clip00"]["audio"].startswith("separated/") and rows["clip01"]["audio"].startswith("audio/")
    assert all(r["music"]["score"] >= CLEAR for r in rows.values() if r["audio"].startswith("separated/"))

    # 3. Amharic G2P: an Ethiopic year is read out as words, with its IPA
    tab = open_tab(page, "Amharic G2P")
    tab.locator("#g2p-input textarea").fill("በ፲፰፻፹፯ ዓ.ም")
    tab.locator("#g2p-run").click()
    # exact values: the tab shows its longer example's reading at load, this must be the typed text's
    expect(tab.locator("#g2p-normalized textarea")).to_have_value("በአስራ ስምንት መቶ ሰማንያ ሰባት አመተ ምህረት")
    expect(tab.locator("#g2p-ipa textarea")).to_have_value(
        re.compile(r"^b ə ʔ a s r a \| s ɨ mː ɨ n t \| m ə tː o \| s ə m a n j a \| s ə b a t \| .*m ɨ h ɨ r ə t$"))

    # the curator fixes how a word is read: the dictionary is used by training and inference alike
    tab.locator("#g2p-dict-word textarea, #g2p-dict-word input").first.fill(FIXED_WORD)
    tab.locator("#g2p-dict-ipa textarea, #g2p-dict-ipa input").first.fill(FIXED_IPA)
    tab.locator("#g2p-dict-add").click()
    expect(tab.locator("#g2p-dict-status")).to_contain_text("saved", timeout=30_000)
    expect(tab.locator("#g2p-dict-table")).to_contain_text(FIXED_WORD)

    # 4. Training: tiny preset; stopped part way, resumed, run to the end; then exported as a voice
    tab = open_tab(page, "Training")
    choose(tab, page, "dataset", "abebe")
    tab.get_by_label("tiny", exact=True).check()
    tab.get_by_label("run name", exact=True).fill("first")
    tab.get_by_label("steps", exact=True).fill(str(STEPS))
    tab.get_by_role("button", name="Start training").click()
    expect(tab.locator("#train-message")).to_contain_text("first")
    run_summary = tab.locator("#run-summary")
    page.wait_for_function("() => { const s = document.querySelector('#run-summary'); "
                           "const m = s && s.innerText.match(/step (\\d+)/); return m && +m[1] >= 2; }", timeout=240_000)
    tab.locator("#stop-button").click()
    expect(run_summary).to_contain_text("first: stopped", timeout=120_000)
    stopped_at = int(re.search(r"step (\d+)", run_summary.inner_text()).group(1))
    assert 0 < stopped_at < STEPS
    tab.locator("#resume-button").click()
    expect(run_summary).to_contain_text("first: finished", timeout=240_000)
    expect(tab.locator("#train-log textarea")).to_have_value(re.compile(rf"training from step {stopped_at} to {STEPS}"))
    expect(tab.locator("#train-log textarea")).to_have_value(re.compile(rf"finished {STEPS} steps"))
    expect(tab.locator("#run-list")).to_contain_text("finished")
    tab.locator("#voice-name textarea, #voice-name input").first.fill("abebe-voice")
    tab.get_by_role("button", name="Export as voice").click()
    expect(tab.locator("#run-message")).to_contain_text("abebe-voice", timeout=60_000)
    assert (ws.voice_dir("abebe-voice") / "model.safetensors").is_file()

    # 5. Inference: the new voice is offered, it speaks typed Amharic with the fixed pronunciation
    tab = open_tab(page, "Inference")
    choose(tab, page, "Voice or checkpoint", "abebe-voice (exported voice)")
    tab.locator("#inference-text textarea").fill(f"{FIXED_WORD} ነው።")
    tab.locator("#inference-speak").click()
    expect(tab.locator("#inference-info")).to_contain_text(re.compile(r"s of audio"), timeout=120_000)
    expect(tab.locator("#inference-info")).to_contain_text("vocoder")
    # what was spoken shows the curator's reading of the word
    expect(tab.locator("#inference-rows")).to_contain_text(FIXED_IPA)
    # the streamed player plays it; the WAV downloads (a real WAV with audio, not an empty header)
    page.wait_for_function("() => Array.from(document.querySelectorAll('#inference-audio audio'))"
                           ".some(a => a.duration > 0)", timeout=60_000)
    link = tab.locator("#inference-wav a").first
    expect(link).to_have_attribute("href", re.compile(r"speech-.*\.wav"), timeout=60_000)
    with page.expect_download() as download:
        link.click()
    saved = Path(download.value.path())
    assert saved.read_bytes()[:4] == b"RIFF" and saved.stat().st_size > 8000
    wave, sr = load_audio(saved)
    assert sr == 24000 and len(wave) / sr > 0.15

    photograph_every_tab(browser, journey.url, shots)


def shown_whole(page, label: str) -> None:
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


def photograph_every_tab(browser, url: str, shots: Path) -> None:
    """A full-page PNG of every tab, <tab>.png, in 256 colours (a UI picture looks the same at a fraction of the
    size)."""
    context = browser.new_context(viewport={"width": SHOT_WIDTH, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(url)
    shots.mkdir(parents=True, exist_ok=True)
    try:
        for label, _ in TABS:
            page.get_by_role("tab", name=label, exact=True).click()
            shown_whole(page, label)
            path = shots / (label.lower().replace(" ", "-") + ".png")
            page.screenshot(path=str(path), full_page=True)
            Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
            with Image.open(path) as shot:
                assert shot.width == SHOT_WIDTH and shot.height > 500, (label, shot.size)
    finally:
        context.close()
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(label.lower().replace(" ", "-") + ".png"
                                                                 for label, _ in TABS)
