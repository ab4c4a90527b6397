"""The transcript review list and the machine drafts in a real browser (Dataset tab), on espeak-ng clips with a
tiny random-weight recognizer of the real format installed in the workspace."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.helpers import make_dataset, screenshot, tiny_recognizer
from tests.test_dataset_tab import CUT_JS
from utils.events import run_to_end
from utils.transcripts import asr
from utils.datasets import load_manifest
from utils.datasets import save_manifest


def test_check_review_fix_exclude_and_accept_a_draft_in_the_browser(start_app, page, tmp_path):
    ws = make_dataset(tmp_path / "workspace", name="am", n_train=6, n_val=1)
    rows = load_manifest(ws, "am")
    rows[6].update(text="", normalized="", flags=["missing_text"])  # a clip cut from a long recording
    save_manifest(ws, "am", rows)
    run_to_end(asr.fetch(ws, str(tiny_recognizer(tmp_path / "tiny-ctc"))))
    server = start_app(workspace=ws.root)
    page.goto(server.url)
    page.get_by_role("tab", name="Dataset").click()
    expect(page.locator("#transcripts-recognizer")).to_contain_text("tiny-ctc")
    assert page.evaluate(CUT_JS, "Recognizer (Hugging Face id or folder)") == []  # each choice read whole

    # check by the recognizer: the review list fills, worst first
    page.get_by_label("Method").click()
    page.get_by_role("option", name="asr").click()
    page.locator("#transcripts-check").click()
    log = page.locator("#transcripts-log textarea")
    expect(log).not_to_have_value("", timeout=60_000)  # its lines show while it runs: no progress drawn over them
    assert page.locator("#transcripts-log .wrap:not(.hide)").count() == 0
    expect(log).to_have_value(re.compile("clips ranked"), timeout=120_000)
    # how far it went is said beside the log; the log's first line says how it scored, and its last is in sight
    expect(page.locator("#transcripts-progress")).to_contain_text("% done")
    assert re.match(r"asr: scored by what the speech recognizer \S+ hears\n", log.input_value())
    assert page.evaluate("(t) => t.scrollTop + t.clientHeight >= t.scrollHeight - 2", log.element_handle())
    review = page.locator("#transcripts-review")
    expect(review.get_by_test_id("cell-0-0")).to_have_text("1", timeout=30_000)
    first = review.get_by_test_id("cell-0-1").inner_text().strip()

    # fix the worst one's text
    review.get_by_test_id("cell-0-1").click()
    expect(page.locator("#transcripts-row textarea, #transcripts-row input")).to_have_value(first)
    box = page.locator("#transcripts-text textarea, #transcripts-text input")
    box.fill("ሰላም ነው ።")
    page.locator("#transcripts-save").click()
    expect(page.locator("#transcripts-status")).to_contain_text(f"{first}: text fixed saved")
    expect(review.get_by_test_id("cell-0-5")).to_have_text("text fixed")  # the decision column
    saved = {r["id"]: r for r in load_manifest(ws, "am")}
    assert saved[first]["text"] == "ሰላም ነው ።" and saved[first]["text_fixed"]

    # exclude the second
    second = review.get_by_test_id("cell-1-1").inner_text().strip()
    review.get_by_test_id("cell-1-1").click()
    expect(page.locator("#transcripts-row textarea, #transcripts-row input")).to_have_value(second)
    page.locator("#transcripts-exclude").click()
    expect(page.locator("#transcripts-status")).to_contain_text(f"{second}: exclude saved")
    expect(review.get_by_test_id("cell-1-5")).to_have_text("exclude")
    assert {r["id"]: r for r in load_manifest(ws, "am")}[second]["excluded"]

    # a machine draft for the clip without text, accepted as the transcript
    page.locator("#transcripts-draft").click()
    checked = log.input_value()
    # answered under the button, not in the Check log far above it
    expect(page.locator("#transcripts-draft-log textarea")).to_have_value(re.compile(r"machine draft\(s\) made"),
                                                                         timeout=120_000)
    assert log.input_value() == checked
    drafts = page.locator("#transcripts-drafts")
    button, answer, listed = (page.locator(f"#{i}").bounding_box()  # measured together: the page scrolls
                              for i in ("transcripts-draft", "transcripts-draft-log", "transcripts-drafts"))
    assert button["y"] + button["height"] <= answer["y"] < listed["y"], (button, answer, listed)
    screenshot(page.locator("#transcripts-draft-log"), tmp_path, "draft-answered-under-its-button")
    expect(drafts.get_by_test_id("cell-0-0")).to_have_text("am-006", timeout=30_000)
    drafts.get_by_test_id("cell-0-0").click()
    expect(page.locator("#transcripts-row textarea, #transcripts-row input")).to_have_value("am-006")
    draft = asr.draft_rows(ws, "am")[0]["draft"]
    expect(box).to_have_value(draft)  # the machine draft, ready to correct
    page.locator("#transcripts-save").click()
    expect(page.locator("#transcripts-status")).to_contain_text("am-006: text fixed saved")
    expect(drafts.get_by_test_id("cell-0-0")).to_have_count(0)  # typed rows leave the drafts list
    assert {r["id"]: r for r in load_manifest(ws, "am")}["am-006"]["text"] == " ".join(draft.split())


def ranked_dataset(root):
    """Dataset 'am' (7 espeak-ng clips) with its report and a transcript check's ranking already written, as the
    check leaves them (method alignment: this workspace has no recognizer), every transcript the one it scored."""
    from utils import datasets
    from utils.audio import file_digest
    from utils.workspace import atomic_write_json

    ws = make_dataset(root, name="am", n_train=6, n_val=1)
    rows = load_manifest(ws, "am")
    for r in rows:
        r["sha1"] = file_digest(ws.dataset_dir("am") / r["audio"])
    save_manifest(ws, "am", rows)
    datasets.recheck(ws, "am")  # the report the Dataset tab's summary reads
    reason = "the speech is much longer than the text: part of what is said is not written"
    atomic_write_json(ws.dataset_dir("am") / "transcript_check.json", {
        "dataset": "am", "method": "alignment", "created": "2026-11-25 10:00", "seconds": 1.0, "skipped": [],
        "rows": [{"id": r["id"], "score": 9.0 - i, "reason": reason, "text": r["text"], "z": {}}
                 for i, r in enumerate(rows)]})
    return ws


def test_a_suspicious_clip_opens_under_its_list_with_every_column_on_screen_and_a_second_press_is_answered(
        start_app, page, tmp_path):
    """The clip picked in "Most suspicious first" opens right under that list (not under the drafts section), the
    list's columns all fit on screen with "rank" on one line, an exclusion there updates the Dataset tab's "N of M
    clips" at once, and Check transcripts pressed while a check runs, or while the ranking is current, says so."""
    from utils.transcripts.scoring import one_check_at_a_time

    ws = ranked_dataset(tmp_path / "workspace")
    server = start_app(workspace=ws.root)
    page.goto(server.url)
    page.get_by_role("tab", name="Dataset").click()
    summary = page.locator("#dataset-summary")
    expect(summary).to_contain_text("7 of 7 clips", timeout=60_000)
    review = page.locator("#transcripts-review")
    first = review.get_by_test_id("cell-0-1")
    expect(first).to_have_text("am-000", timeout=30_000)

    # every column inside the list's box, and the header "rank" on one line
    box = review.bounding_box()
    heads = page.evaluate("""() => [...document.querySelectorAll('#transcripts-review th')].map(h => {
        const r = h.getBoundingClientRect(), span = h.querySelector('.header') || h, range = document.createRange();
        range.selectNodeContents(span);
        return {name: h.innerText.trim(), right: r.right, lines: new Set([...range.getClientRects()].map(x => Math.round(x.top))).size};
    })""")
    assert [h["name"] for h in heads] == ["rank", "id", "score", "reason", "text", "decision"]
    assert all(h["right"] <= box["x"] + box["width"] + 1 for h in heads), heads
    assert heads[0]["lines"] == 1, heads[0]

    # the clip opens right under the list it was picked in
    first.click()
    row = page.locator("#transcripts-row textarea, #transcripts-row input")
    expect(row).to_have_value("am-000")
    listed, editor, drafts_head = (page.locator(f"#{i}").bounding_box()  # measured together: the page scrolls
                                   for i in ("transcripts-review", "transcripts-text", "transcripts-drafts-head"))
    assert listed["y"] + listed["height"] <= editor["y"] < drafts_head["y"], (listed, editor, drafts_head)
    screenshot(page.locator("#transcripts-review"), tmp_path, "review-list-and-its-clip")

    # excluding it there: the Dataset tab's summary counts it out at once, without Refresh
    page.locator("#transcripts-exclude").click()
    expect(page.locator("#transcripts-status")).to_contain_text("am-000: exclude saved")
    expect(summary).to_contain_text("6 of 7 clips")

    # a second press is answered: the ranking is current (nothing changed but a decision), or a check is running
    note = page.locator("#transcripts-check-note")
    page.locator("#transcripts-check").click()
    expect(note).to_contain_text("The ranking below is current: the check of 2026-11-25 10:00")
    with one_check_at_a_time(ws, "am"):  # as a check started from another browser or the command line holds it
        page.locator("#transcripts-check").click()
        expect(note).to_contain_text("A check of am is already running, started from another page")
        expect(note).to_contain_text("Cancel check stops it")
    assert "Not done" in note.inner_text()


def test_auto_says_it_checks_by_alignment_alone_when_there_is_no_recognizer(tmp_path):
    from webui.transcripts import run_check

    ws = make_dataset(tmp_path / "workspace", name="am", n_train=4, n_val=1)
    check = run_check(ws, "am", "auto")
    said = next(check)  # the first line, before any training starts
    assert said.startswith("auto: no speech recognizer in this workspace, so this check uses the alignment alone")
    assert said.endswith("(to add what one hears: Get recognizer, under Drafts for clips without text)")
    assert run_check(ws, "am", "asr").__next__() == ("asr: scored by the speech recognizer (none in this workspace yet: "
                                                     "Get recognizer, under Drafts for clips without text)")


def test_the_tabs_check_runs_in_a_process_of_its_own_that_a_closed_page_stops(tmp_path):
    """Its memory (1.5 GB at 200 h) is the system's again when it ends; the app's process never holds it."""
    import multiprocessing as mp
    import time

    from utils.transcripts.review import check_running
    from webui.transcripts import run_check

    ws = make_dataset(tmp_path / "workspace", name="am", n_train=4, n_val=1)
    check = run_check(ws, "am", "alignment")
    assert next(check).startswith("alignment: ")  # how it scores, said first
    assert "measuring how fast this machine trains the aligner" in next(check)
    checking = lambda: "transcript check" in [p.name for p in mp.active_children()]  # noqa: E731
    assert checking() and check_running(ws, "am")
    check.close()  # the page was closed
    deadline = time.time() + 30
    while (checking() or check_running(ws, "am")) and time.time() < deadline:
        time.sleep(0.2)
    assert not checking() and not check_running(ws, "am")  # a new check may start
