"""The transcript check after the curator fixed a few texts, and its Cancel: a check again reuses
the aligner the last check trained and aligns only the clips that changed; Cancel, from the page or any other
process, stops a running check and keeps what it did."""
from __future__ import annotations

import fcntl
import re

import pytest
import torch
from playwright.sync_api import expect

from tests.helpers import make_dataset
from utils import datasets, jobs
from utils.events import StudioError, run_to_end
from utils.jobs import check_run
from utils.transcripts import check_transcripts, scoring
from utils.transcripts.progress import stamp
from utils.transcripts.review import check_running

torch.set_num_threads(1)


@pytest.fixture
def ws(tmp_path):
    return make_dataset(tmp_path / "workspace", name="am", n_train=5, n_val=1, max_chars=30)


def test_checking_again_after_two_fixes_reuses_the_aligner_and_aligns_only_those_clips(ws):
    first = run_to_end(check_transcripts(ws, "am", method="alignment", steps=2))
    header, lines = scoring.progress_log(ws, "am").read()
    assert len(lines) == 6
    fixed = [first["rows"][0]["id"], first["rows"][3]["id"]]
    datasets.apply_edits(ws, "am", [{"id": rid, "action": "text", "text": "ሰላም ነው ።"} for rid in fixed])

    said = []
    again = run_to_end(check_transcripts(ws, "am", method="alignment"), printer=said.append)  # as the tab: no steps
    assert any("4 of 6 clips are aligned as they are now (their results are kept); 2 to align" in line
               for line in said), said
    assert not any("training the aligner" in line or "this will take" in line for line in said), said
    assert stamp(header["checkpoint"]) == header["aligner"]  # the same aligner, not trained again
    _, after = scoring.progress_log(ws, "am").read()
    assert sorted(line["id"] for line in after[len(lines):]) == sorted(fixed)  # only the two were aligned again
    texts = {r["id"]: r["text"] for r in again["rows"]}
    assert len(texts) == 6 and all(texts[rid] == "ሰላም ነው ።" for rid in fixed)


def test_cancel_stops_a_running_check_and_a_request_with_none_running_is_refused(ws):
    with pytest.raises(StudioError, match="No transcript check of am is running"):
        scoring.cancel_check(ws, "am")
    events = check_transcripts(ws, "am", method="alignment", steps=100_000)
    while not next(events).message.startswith("training the aligner"):
        pass
    assert check_running(ws, "am")
    nothing = "No aligner had finished training, so nothing of it is kept"  # it said a trained aligner was kept
    said = scoring.cancel_check(ws, "am")
    assert said.startswith("Cancelling the check of am") and nothing in said
    with pytest.raises(StudioError, match=f"The check of am was cancelled. {nothing}"):
        for _ in events:
            pass
    assert not check_running(ws, "am")
    assert jobs.reconcile(ws.run_dir(check_run("am"))).get("state") not in jobs.ACTIVE  # its training stopped too
    assert not scoring.cancel_path(ws, "am").exists()  # the next check is not cancelled by this request


def test_a_check_cancelled_while_aligning_says_it_keeps_the_aligner_and_the_clips_aligned(ws):
    first = run_to_end(check_transcripts(ws, "am", method="alignment", steps=2))
    datasets.apply_edits(ws, "am", [{"id": first["rows"][0]["id"], "action": "text", "text": "ሰላም ነው ።"}])
    events = check_transcripts(ws, "am", method="alignment")
    while not next(events).message.startswith("going on with the aligner"):
        pass
    assert "Kept: the trained aligner and the 6 clip(s) it aligned" in scoring.cancel_check(ws, "am")
    with pytest.raises(StudioError, match="cancelled. Kept: the trained aligner and the 6 clip"):
        for _ in events:
            pass


def test_a_cancelled_check_leaves_no_run_or_lock_behind_and_the_next_check_starts_cleanly(ws):
    """Cancel while the aligner trains: the check ends only once its training's processes have, its throwaway run
    folder removed (no later check resumes an unfinished training) and the device's lock free for the next run; the
    dataset is as it was, and a check right after runs to its end."""
    rows = datasets.load_manifest(ws, "am")
    events = check_transcripts(ws, "am", method="alignment", steps=100_000)
    while not next(events).message.startswith("training the aligner"):
        pass
    scoring.cancel_check(ws, "am")
    with pytest.raises(StudioError, match="The check of am was cancelled"):
        for _ in events:
            pass
    assert not ws.run_dir(check_run("am")).exists()
    with open(ws.root / ".locks" / "cpu.lock", "a") as lock:  # no launcher or trainer of the check holds the CPU
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert not check_running(ws, "am")
    assert datasets.load_manifest(ws, "am") == rows and all((ws.dataset_dir("am") / r["audio"]).exists() for r in rows)

    result = run_to_end(check_transcripts(ws, "am", method="alignment", steps=2))
    assert len(result["rows"]) == 6
    assert jobs.read_status(ws.run_dir(check_run("am")))["state"] == "finished"  # kept: the next check reuses it


def test_the_cancel_button_stops_the_check_in_the_browser(start_app, page, tmp_path):
    ws = make_dataset(tmp_path / "workspace", name="am", n_train=5, n_val=1, max_chars=30)
    server = start_app(workspace=ws.root)
    page.goto(server.url)
    page.get_by_role("tab", name="Dataset").click()
    page.locator("#transcripts-check").click()
    log = page.locator("#transcripts-log textarea")
    expect(log).to_have_value(re.compile("measuring how fast this machine trains the aligner"), timeout=60_000)
    page.locator("#transcripts-cancel").click()
    expect(page.locator("#transcripts-check-note")).to_contain_text("Cancelling the check of am")
    expect(log).to_have_value(re.compile("Not done: The check of am was cancelled"), timeout=120_000)
    page.locator("#transcripts-cancel").click()  # nothing runs any more: said so
    expect(page.locator("#transcripts-check-note")).to_contain_text("No transcript check of am is running",
                                                                    timeout=30_000)
