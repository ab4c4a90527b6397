"""Dataset tab handlers, called as the UI calls them, and what the tab draws in a real browser."""
from __future__ import annotations

import re

import gradio as gr
import pytest
from playwright.sync_api import expect

from tests.helpers import (PLOT_SEEN_JS, espeak_amharic, make_dataset, numeric_ticks, plot_seen, screenshot,
                           sentences, tone, write_wav)
from utils.datasets import load_manifest
from utils.events import StudioError
from utils.workspace import Workspace
from webui import dataset as tab
from webui.context import AppContext

SENTS = sentences(4)
# whether every point of the plot at the selector is drawn whole inside its frame (none clipped by an edge)
POINTS_INSIDE_JS = """(sel) => {
  const svg = document.querySelector(sel + ' svg');
  const frame = svg && svg.querySelector('.role-frame.root > g > path.background');
  if (!frame) return false;
  const f = frame.getBoundingClientRect();
  const points = [...svg.querySelectorAll('.mark-symbol.role-mark path')].map(p => p.getBoundingClientRect());
  return points.length > 0 && points.every(b => b.top >= f.top && b.bottom <= f.bottom && b.left >= f.left &&
                                                b.right <= f.right);
}"""


# what covers the middle of the control at the selector (another control's list drawn over it), or null
COVERED_JS = """(sel) => {
  const box = document.querySelector(sel), r = box.getBoundingClientRect();
  const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return box.contains(top) ? null : top.outerHTML.slice(0, 200);
}"""
# the texts cut short (wider than the room they are given) in the control whose label starts with the words given
CUT_JS = """(words) => {
  const head = [...document.querySelectorAll('label span, span[data-testid="block-info"]')]
    .find(s => s.innerText.trim().startsWith(words));
  const block = head.closest('.block');
  return [...block.querySelectorAll('input, label')].filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => e.value || e.innerText);
}"""


def upload_files(tmp_path):
    """What gr.File(file_count="multiple") hands the handler: paths of the uploaded files."""
    up = tmp_path / "upload"
    for i in range(3):
        espeak_amharic(SENTS[i], up / f"u{i}.wav")
    write_wav(up / "u3.wav", tone(0.2), 24000)  # too short
    (up / "list.csv").write_text("file,sentence,other\n" + "".join(f"u{i}.wav,{SENTS[i]},{SENTS[(i + 1) % 4]}\n"
                                                                   for i in range(4)), encoding="utf-8")
    return [str(p) for p in sorted(up.iterdir())]


def test_tab_builds_with_named_api_events(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    with gr.Blocks() as demo:
        hooks = tab.build(AppContext(ws))
    names = {getattr(fn, "api_name", None) for fn in demo.fns.values()}
    assert {"dataset_prepare", "dataset_view", "dataset_inspect", "dataset_exclude", "dataset_keep",
            "dataset_text", "dataset_recheck"} <= names
    (on_load, inputs, outputs), (lists, _, lists_outputs), (opened, _, view_outputs, when) = hooks
    assert len(on_load(None)) == len(outputs) == 8  # page load: the workspace as it is now
    assert len(lists(None)) == len(lists_outputs) == 2  # the transcript review and drafts lists
    assert when == "open" and len(opened("am", False, 1)) == len(view_outputs) == 7  # the tab opened again: redrawn
    # the page's first select, as it mounts, knows no dataset yet: it changes nothing (answered after the page load,
    # it drew "Choose or prepare a dataset." over the dataset the picker showed)
    assert opened(None, False, 1) == [gr.skip()] * 7
    # every log of the tab stays on its newest line (assets/app.js pins a .log-box): the Check log showed lines from
    # the middle of a check, its last line out of sight
    logs = [b for b in demo.blocks.values() if isinstance(b, gr.Textbox) and "log" in (b.label or "").lower()]
    assert len(logs) == 3 and all("log-box" in (b.elem_classes or []) for b in logs), [b.label for b in logs]


def test_upload_inspect_prepare_review_and_edit_through_the_handlers(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    files = upload_files(tmp_path)

    info = tab.inspect_upload(ws, files, "")
    assert info["audio"] == "file" and info["text"] == "sentence" and info["columns"] == ["file", "sentence", "other"]

    logs = list(tab.run_prepare(ws, files, "", "up", "auto", "phoneme", info["audio"], info["text"], "", None))
    assert "usable of 4 clip(s)" in logs[-1]

    summary, hist, rates, table, page, where = tab.load_view(ws, "up")
    assert "**3** of 4 clips" in summary and "too_short" in summary
    assert hist["clips"].sum() == 4 and len(rates) == 4
    assert list(table["id"]) == ["u3"] and "too_short" in table.iloc[0]["flags"]

    row_id, audio_path, text = tab.select_row(ws, "up", "u3")
    assert audio_path.endswith("audio/u3.wav") and text == SENTS[3]
    assert "keep saved" in tab.edit_row(ws, "up", "u3", "keep")
    assert not {r["id"]: r for r in load_manifest(ws, "up")}["u3"]["excluded"]
    tab.edit_row(ws, "up", "u1", "text", SENTS[2])
    assert {r["id"]: r for r in load_manifest(ws, "up")}["u1"]["text"] == SENTS[2]
    everything = tab.load_view(ws, "up", show_all=True)[3]
    assert set(everything["id"]) == {"u0", "u1", "u2", "u3"}
    with pytest.raises(StudioError, match="Pick a row"):
        tab.edit_row(ws, "up", "", "keep")


def test_a_long_transcript_is_cut_in_its_table_cell_and_whole_in_the_editor(tmp_path):
    """A 60 s clip's transcript made its table cell taller than the screen."""
    ws = make_dataset(tmp_path / "ws", n_train=3, n_val=1, max_chars=60)
    row = load_manifest(ws, "am")[0]
    long_text = " ".join([row["text"]] * 12)
    tab.edit_row(ws, "am", row["id"], "text", long_text)
    table = tab.load_view(ws, "am", show_all=True)[3]
    cell = table.set_index("id").loc[row["id"], "text"]
    assert cell.endswith(" ...") and len(cell) <= tab.CELL_CHARS + 4 and long_text.startswith(cell[:-4])
    assert tab.select_row(ws, "am", row["id"])[2] == long_text


def test_the_rate_plots_axes_end_on_round_numbers_past_the_longest_and_the_fastest_clip(tmp_path):
    """Limited only from 0, the speaking-rate plot ended its axes on the farthest points, drawn half off its edges,
    and ticked the odd range finely: 21 labels from 0.0 to 4.0 side by side."""
    ws = make_dataset(tmp_path / "ws", n_train=5, n_val=1, max_chars=60)
    rates = tab.load_view(ws, "am")[2]
    axes = tab.plot_updates(*tab.load_view(ws, "am"))[-1]
    limits = axes["rate"]
    assert axes["hist"] == {"y_lim": [0, tab.HIST_TOP]}  # 6 clips: whole clips up to 10 on the histogram
    for (low, high), column in ((limits["x_lim"], "duration"), (limits["y_lim"], "chars_per_s")):
        farthest = rates[column].max()
        assert low == 0 and 1.05 * farthest <= high < 1.3 * farthest
        assert float(f"{high:.2g}") == high  # a round number: Vega ticks it at round steps
    assert [tab.round_end(v) for v in (4.13, 7.8, 9.6, 0.95, 30)] == [4.5, 9, 12, 1, 35]


def test_prepare_from_a_workspace_path_and_refusal_outside_it(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    folder = ws.uploads / "pairs"
    espeak_amharic(SENTS[0], folder / "a.wav")
    (folder / "a.txt").write_text(SENTS[0], encoding="utf-8")
    logs = list(tab.run_prepare(ws, None, "uploads/pairs", "p", "auto", "phoneme", None, None, None))
    assert "1 usable of 1 clip(s)" in logs[-1]
    with pytest.raises(StudioError, match="outside the workspace"):
        list(tab.run_prepare(ws, None, str(tmp_path), "p2", "auto", "phoneme", None, None, None))
    with pytest.raises(StudioError, match="Upload a zip"):
        list(tab.run_prepare(ws, None, "", "p3", "auto", "phoneme", None, None, None))


def test_a_long_recording_alone_is_told_to_get_its_text_not_to_train(tmp_path):
    """Its clips have no text: the summary read '0 speaker(s)' and the Next line said to train on the Training tab."""
    ws = Workspace.open(tmp_path / "ws")
    recording = espeak_amharic(" ".join(SENTS[:2]), tmp_path / "up" / "radio.wav")
    logs = list(tab.run_prepare(ws, [str(recording)], "", "radio", "auto", "phoneme", None, None, None))
    assert "0 speaker(s)" not in logs[-1] and "no usable clip yet (no clip has text" in logs[-1]
    assert "python app.py transcribe --dataset radio" in logs[-1]
    summary = tab.load_view(ws, "radio")[0]
    assert "no usable clip yet" in summary and "speaker(s)" not in summary
    assert "**Draft missing transcripts**" in summary and "**Save text**" in summary and "Training" not in summary
    assert "Keep puts one back" not in summary and "Typing its text and pressing Save text puts one back" in summary


def test_the_summary_says_which_flags_fixing_a_text_clears():
    """"Keep puts one back; fixing its text does too": a row in Latin letters that was also the same audio as another
    row stayed out after its text was fixed."""
    both = tab.excluded_line({"clips": 10, "usable_clips": 7, "flags": {"non_ethiopic": 1, "duplicate_audio": 2}})
    assert ("fixing its text clears only the text's own flags (transcript is not in Ethiopic script), so a row also "
            "flagged for the same audio as another row stays out until you Keep it") in both
    assert "fixing its text does too" in tab.excluded_line({"clips": 3, "usable_clips": 2,
                                                            "flags": {"non_ethiopic": 1}})
    audio_only = tab.excluded_line({"clips": 3, "usable_clips": 2, "flags": {"duplicate_audio": 1}})
    assert "Keep puts one back." in audio_only and "text" not in audio_only.split("Keep")[1]


def test_running_app_prepares_and_shows_a_dataset_through_gradio_client(start_app):
    from gradio_client import Client

    server = start_app(wait=False)
    folder = server.workspace / "uploads" / "pairs"
    for i in range(2):
        espeak_amharic(SENTS[i], folder / f"a{i}.wav")
        (folder / f"a{i}.txt").write_text(SENTS[i], encoding="utf-8")
    client = Client(server.wait_ready().url, verbose=False)
    log, upload, typed = client.predict(None, "uploads/pairs", "api", "auto", "phoneme", None, None, None, False, True,
                                        api_name="/dataset_prepare")
    assert "2 usable of 2 clip(s)" in log
    # what it read is said first, and the next Prepare starts from an empty box: a curator's second dataset took the
    # first one's zip, still in the box, as well as its own files
    assert log.splitlines()[0] == "Reads 1 source(s) into api: uploads/pairs (typed path)"
    assert upload is None and typed == ""
    summary, hist, rates, table, page, where = client.predict("api", False, api_name="/dataset_view")
    assert "**2** of 2 clips" in summary and sum(row[-1] for row in hist["data"]) == 2
    assert "saved" in client.predict("api", "a1", "", api_name="/dataset_exclude")
    assert "**1** of 2 clips" in client.predict("api", False, api_name="/dataset_view")[0]


def test_the_first_prepare_in_a_fresh_workspace_draws_both_plots_and_a_second_clears_the_picked_row(start_app, page, tmp_path):
    server = start_app(wait=False)
    folder = server.workspace / "uploads" / "pairs"
    for i in range(3):
        espeak_amharic(SENTS[i], folder / f"a{i}.wav")
        (folder / f"a{i}.txt").write_text(SENTS[i], encoding="utf-8")
    write_wav(folder / "short.wav", tone(0.2), 24000)  # flagged: too short
    (folder / "short.txt").write_text(SENTS[3], encoding="utf-8")
    page.goto(server.wait_ready().url)
    typed = page.get_by_label("...or a path inside the workspace")
    typed.fill("uploads/pairs")
    name = page.get_by_label("Dataset name", exact=True)
    name.fill("first")
    # tabbing out of the name opens nothing over it (the Format list did), and every choice of what the model reads
    # is shown whole (the frontend's box cut its label under its arrow)
    name.press("Tab")
    page.wait_for_function("() => !document.querySelector('#dataset-name').contains(document.activeElement)")
    assert page.locator("[aria-expanded=true]").count() == 0  # nothing opened by a focus alone
    assert page.evaluate(COVERED_JS, "#dataset-name") is None
    assert page.evaluate(CUT_JS, "What the model reads") == []
    screenshot(page.locator("#dataset-name").locator(".."), tmp_path, "name-format-frontend")
    page.locator("#dataset-prepare").click()
    expect(page.locator("#dataset-summary")).to_contain_text("of 4 clips", timeout=180_000)
    expect(typed).to_have_value("")  # read: the next Prepare starts from an empty box

    bars = plot_seen(page, "#dataset-hist")
    assert sum(numeric_ticks(bars["y"])) > 0  # clip counts, not the counts as categories
    # whole clips on the count axis (4 clips were ticked 0, 0.5, 1, ... 2), once the axes' own update is drawn
    page.wait_for_function(f"(s) => {{ const y = ({PLOT_SEEN_JS})(s).y.map(t => +t.replace(',', '')); "
                           "return y.length > 1 && Math.max(...y) >= 10 && y.every(Number.isInteger); }",
                           arg="#dataset-hist", timeout=20_000)
    plot_seen(page, "#dataset-rate", ("ok", "flagged"))
    page.wait_for_function(POINTS_INSIDE_JS, arg="#dataset-rate")  # the longest and fastest clips not cut in half
    points = plot_seen(page, "#dataset-rate")
    assert numeric_ticks(points["x"])[0] == 0 and numeric_ticks(points["y"])[0] == 0  # no clip half off a corner
    screenshot(page.locator("#dataset-rate"), tmp_path, "first-prepare-rate")

    # a row picked in the first dataset is not left picked when a second one is prepared
    page.locator("#dataset-flagged").get_by_test_id("cell-0-0").click()  # the flagged row: short
    expect(page.get_by_label("Row", exact=True)).to_have_value("short")
    status = page.locator("#dataset-status")
    page.locator("#dataset-exclude").click()
    expect(status).to_contain_text("short: exclude saved · first: 3 usable clips")
    typed.fill("uploads/pairs")
    name.fill("second")
    page.locator("#dataset-prepare").click()
    expect(page.locator("#dataset-summary")).to_contain_text("second", timeout=180_000)
    expect(page.get_by_label("Row", exact=True)).to_have_value("")
    expect(status).to_have_text("")  # the line spoke of a row of "first"

    # prepared again under the name picked (the picker's value does not change), from the uploads it keeps: no row of
    # it stays picked, and no line about it from before the prepare stays
    page.locator("#dataset-flagged").get_by_test_id("cell-0-0").click()
    expect(page.get_by_label("Row", exact=True)).to_have_value("short")
    page.locator("#dataset-exclude").click()
    expect(status).to_contain_text("short: exclude saved · second")
    page.locator("#dataset-prepare").click()
    expect(page.get_by_label("Row", exact=True)).to_have_value("", timeout=180_000)  # once the prepare is done
    expect(page.get_by_label("Transcript (edit, then Save text)")).to_have_value("")
    expect(page.locator("#dataset-log textarea")).to_have_value(re.compile("^Reads: the uploads second keeps"))
    expect(status).to_have_text("")


def test_pickers_open_on_the_dataset_prepared_last_not_the_first_by_name(tmp_path):
    """A long recording without text ("longrec", 0 usable minutes) opened the Training and Review pickers ahead of
    the dataset just prepared ("mixed2")."""
    import os

    from tests.helpers import make_dataset
    from webui import training
    from webui.components import dataset_pick

    ws = make_dataset(tmp_path / "ws", name="mixed2", n_train=1, n_val=0)
    make_dataset(tmp_path / "ws", name="longrec", n_train=1, n_val=0)
    os.utime(ws.dataset_dir("longrec") / "manifest.jsonl", (1e9, 1e9))  # prepared long ago
    assert ws.list_datasets() == ["longrec", "mixed2"] and ws.newest_dataset() == "mixed2"
    assert dataset_pick(ws, None)["value"] == "mixed2" and dataset_pick(ws, "gone")["value"] == "mixed2"
    ctx = AppContext(ws)
    assert training.restore_form(ctx)[0]["value"] == "mixed2"  # no run yet to take it from
    assert training.form_on_open(ctx, None, 0)[0]["value"] == "mixed2"
    # a pick that still exists is not sent back: a refresh answered after the curator picked another dataset would
    # put the one it was sent over theirs (a CI run's OmniVoice run started on the dataset shown before the pick)
    for refreshed in (dataset_pick(ws, "longrec"), training.form_on_open(ctx, "longrec", 0)[0]):
        assert "value" not in refreshed and refreshed["choices"] == ["longrec", "mixed2"]
    # an older studio's manifest.jsonl read into the table is not a change: opening longrec first left it the
    # default of every picker; an edit of one of its rows is one
    from utils.datasets import load_manifest, update_rows

    rows = load_manifest(ws, "longrec")
    assert (ws.dataset_dir("longrec") / "manifest.sqlite").exists() and ws.newest_dataset() == "mixed2"
    update_rows(ws, "longrec", [{**rows[0], "text": rows[0]["text"] + " ።"}])
    assert ws.newest_dataset() == "longrec"
