"""The transcript review list and the machine drafts in a real browser (Dataset tab), on espeak-ng clips with a
tiny random-weight recognizer of the real format installed in the workspace."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.helpers import make_dataset, tiny_recognizer
from utils.events import run_to_end
from utils.transcripts import asr
from utils.workspace import read_jsonl, write_jsonl


def test_check_review_fix_exclude_and_accept_a_draft_in_the_browser(start_app, page, tmp_path):
    ws = make_dataset(tmp_path / "workspace", name="am", n_train=6, n_val=1)
    manifest = ws.dataset_dir("am") / "manifest.jsonl"
    rows = read_jsonl(manifest)
    rows[6].update(text="", normalized="", flags=["missing_text"])  # a clip cut from a long recording
    write_jsonl(manifest, rows)
    run_to_end(asr.fetch(ws, str(tiny_recognizer(tmp_path / "tiny-ctc"))))
    server = start_app(workspace=ws.root)
    page.goto(server.url)
    page.get_by_role("tab", name="Dataset").click()
    expect(page.locator("#transcripts-recognizer")).to_contain_text("tiny-ctc")

    # check by the recognizer: the review list fills, worst first
    page.get_by_label("Method").click()
    page.get_by_role("option", name="asr").click()
    page.locator("#transcripts-check").click()
    log = page.locator("#transcripts-log textarea")
    expect(log).to_have_value(re.compile("clips ranked"), timeout=120_000)
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
    saved = {r["id"]: r for r in read_jsonl(manifest)}
    assert saved[first]["text"] == "ሰላም ነው ።" and saved[first]["text_fixed"]

    # exclude the second
    second = review.get_by_test_id("cell-1-1").inner_text().strip()
    review.get_by_test_id("cell-1-1").click()
    expect(page.locator("#transcripts-row textarea, #transcripts-row input")).to_have_value(second)
    page.locator("#transcripts-exclude").click()
    expect(page.locator("#transcripts-status")).to_contain_text(f"{second}: exclude saved")
    expect(review.get_by_test_id("cell-1-5")).to_have_text("exclude")
    assert {r["id"]: r for r in read_jsonl(manifest)}[second]["excluded"]

    # a machine draft for the clip without text, accepted as the transcript
    page.locator("#transcripts-draft").click()
    expect(log).to_have_value(re.compile(r"machine draft\(s\) made"), timeout=120_000)
    drafts = page.locator("#transcripts-drafts")
    expect(drafts.get_by_test_id("cell-0-0")).to_have_text("am-006", timeout=30_000)
    drafts.get_by_test_id("cell-0-0").click()
    expect(page.locator("#transcripts-row textarea, #transcripts-row input")).to_have_value("am-006")
    draft = asr.draft_rows(ws, "am")[0]["draft"]
    expect(box).to_have_value(draft)  # the machine draft, ready to correct
    page.locator("#transcripts-save").click()
    expect(page.locator("#transcripts-status")).to_contain_text("am-006: text fixed saved")
    expect(drafts.get_by_test_id("cell-0-0")).to_have_count(0)  # typed rows leave the drafts list
    assert {r["id"]: r for r in read_jsonl(manifest)}["am-006"]["text"] == " ".join(draft.split())
