"""A new take of one row (recorded in the browser, uploaded, or given on the command line): the row's recording is
replaced, the old one kept, its clip made again and a decision that judged the old audio cleared; what cannot be
replaced is refused with what to do, and nothing is moved."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import espeak_amharic, sentences, spoken_pairs, to_m4a, tone, write_wav
from utils.audio import FeatureConfig, file_digest, load_audio
from utils.datasets import apply_edits, load_manifest, prepare
from utils.datasets.config import PrepareConfig
from utils.datasets.retake import replace_recording
from utils.events import StudioError, run_to_end
from utils.workspace import Workspace

SENTS = sentences(8)


@pytest.fixture()
def pairs(tmp_path):
    """Dataset "p" of three recordings and their transcripts, row a1 excluded and a2 kept by hand."""
    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "p", spoken_pairs(tmp_path / "pairs", 3), workers=1))
    apply_edits(ws, "p", [{"id": "a1", "action": "exclude"}, {"id": "a2", "action": "keep"}])
    return ws


def _raw(ws) -> dict[str, str]:
    """Every file under raw/ (hidden ones included) and its digest."""
    raw = ws.dataset_dir("p") / "raw"
    return {p.relative_to(raw).as_posix(): file_digest(p) for p in sorted(raw.rglob("*")) if p.is_file()}


def test_a_new_take_replaces_the_rows_recording_keeps_the_old_one_and_is_judged_afresh(pairs, tmp_path):
    ws = pairs
    before = {r["id"]: r for r in load_manifest(ws, "p")}
    old = ws.dataset_dir("p") / "raw" / "pairs" / "a1.wav"
    old_bytes = old.read_bytes()
    take = espeak_amharic(SENTS[1], tmp_path / "take" / "audio.wav", voice="am+f2", rate=120)  # slower, another voice
    said = [e.message for e in replace_recording(ws, "p", "a1", take) if e.message]
    rows = {r["id"]: r for r in load_manifest(ws, "p")}
    assert old.read_bytes() == take.read_bytes()  # the take, as it came, under the recording's name
    kept = list(old.parent.glob(".a1.wav.before-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == old_bytes  # nothing lost
    assert said[0] == (f"Row a1: the new take replaces its recording raw/pairs/a1.wav, which is kept as {kept[0].name} "
                       "beside it.")
    assert said[1] == f"raw/pairs/a1.wav: made again from the take, {rows['a1']['duration']:.1f} s"
    assert said[2] == ("your Exclude of row a1 went with the old recording: listen to the new clip, and decide "
                       "again.")
    assert said[3].startswith(f"Row a1: {rows['a1']['duration']:.1f} s, flags: none. 3 usable of 3 clip(s)")
    assert rows["a1"]["duration"] > before["a1"]["duration"] + 0.3 and rows["a1"]["sha1"] != before["a1"]["sha1"]
    assert rows["a1"]["review"] is None and not rows["a1"]["excluded"] and rows["a1"]["text"] == SENTS[1]
    assert rows["a2"]["review"] == "keep" and rows["a0"] == before["a0"]  # the other rows as they were
    clip, _ = load_audio(ws.dataset_dir("p") / rows["a1"]["audio"])
    assert len(clip) / 24000 == pytest.approx(rows["a1"]["duration"], abs=0.02)  # the clip is the take's
    from utils.datasets.features import cache_path

    assert cache_path(ws.dataset_dir("p"), rows["a1"]["sha1"], FeatureConfig()).is_file()  # its mels, for training
    # the next preparation finds the clip made, under the key it looks for: nothing made again, nothing cleared
    again = [e.message for e in prepare(ws, "p", workers=1) if e.message]
    assert "3 clip(s) already made by an earlier run" in again and not any("made again" in m for m in again), again
    assert {r["id"]: r for r in load_manifest(ws, "p")} == rows


def test_a_take_of_another_format_is_written_as_the_recording_it_replaces(pairs, tmp_path):
    """The row's table (here its .txt beside it) names its file with its suffix: an MP3 or FLAC take put under
    a1.wav keeps the name and becomes WAV, sample for sample."""
    ws = pairs
    spoken = espeak_amharic(SENTS[4], tmp_path / "spoken.wav")
    audio, rate = sf.read(spoken)
    sf.write(tmp_path / "take.flac", audio, rate)
    run_to_end(replace_recording(ws, "p", "a1", tmp_path / "take.flac"))
    old = ws.dataset_dir("p") / "raw" / "pairs" / "a1.wav"
    assert sf.info(old).format == "WAV" and sf.info(old).samplerate == rate
    assert np.allclose(sf.read(old)[0], audio, atol=1 / 2**15)
    rows = {r["id"]: r for r in load_manifest(ws, "p")}
    assert rows["a1"]["duration"] == pytest.approx(len(audio) / rate, abs=0.6)  # trimmed of its silence
    # a phone's M4A, which the studio cannot write: the take goes under its name as FLAC, which ffmpeg reads the same
    phone = Workspace.open(tmp_path / "phone")
    src = spoken_pairs(tmp_path / "phone-pairs", 2)
    to_m4a(src / "a0.wav")
    run_to_end(prepare(phone, "m", src, workers=1))
    said = [e.message for e in replace_recording(phone, "m", "a0", spoken) if e.message]
    assert said[0].endswith("The take is written as FLAC under that name: the studio cannot write .m4a files.")
    assert said[1].startswith("raw/phone-pairs/a0.m4a: made again from the take")
    assert sf.info(phone.dataset_dir("m") / "raw" / "phone-pairs" / "a0.m4a").format == "FLAC"
    row = {r["id"]: r for r in load_manifest(phone, "m")}["a0"]
    assert row["duration"] == pytest.approx(len(audio) / rate, abs=0.6)


def test_what_cannot_be_replaced_is_refused_with_what_to_do_and_nothing_is_moved(pairs, tmp_path):
    ws = pairs
    files = _raw(ws)
    (tmp_path / "notes.wav").write_text("not audio", encoding="utf-8")
    take = espeak_amharic(SENTS[5], tmp_path / "take.wav")
    refusals = [
        (("nope", take), "Dataset 'p' has no row 'nope': pick a row of its table first."),
        (("a1", tmp_path / "notes.wav"), "notes.wav: not readable audio"),
        (("a1", tmp_path / "absent.wav"), "Record or upload the new take first."),
        (("a0", ws.dataset_dir("p") / "raw" / "pairs" / "a0.wav"), "this take is the recording row a0 already has"),
    ]
    for (row, given), words in refusals:
        with pytest.raises(StudioError, match=words.replace("(", r"\(").replace(")", r"\)")):
            run_to_end(replace_recording(ws, "p", row, given))
        assert _raw(ws) == files, row
    strict = Workspace.open(tmp_path / "strict")  # a take longer than a clip may be would lose its row
    run_to_end(prepare(strict, "p", spoken_pairs(tmp_path / "p2", 1), cfg=PrepareConfig(max_clip_file=5.0), workers=1))
    write_wav(tmp_path / "long.wav", tone(6.0), 24000)
    with pytest.raises(StudioError, match=r"long\.wav: 6 s long, longer than a clip may be \(5 s\): record the row's "
                                          "sentence alone"):
        run_to_end(replace_recording(strict, "p", "a0", tmp_path / "long.wav"))
    assert sorted(p.name for p in (strict.dataset_dir("p") / "raw" / "p2").iterdir()) == ["a0.txt", "a0.wav"]
    # a clip cut from a long recording: the whole recording is what can be given again
    long = tmp_path / "long"
    espeak_amharic(" ".join(SENTS[:3]), long / "talk.wav")
    run_to_end(prepare(ws, "talk", long / "talk.wav", fmt="long", workers=1))
    cut = load_manifest(ws, "talk")[0]
    with pytest.raises(StudioError, match=r"was cut from the long recording talk\.wav: one of its clips cannot be "
                                          r"replaced alone"):
        run_to_end(replace_recording(ws, "talk", cut["id"], take))


def test_a_clip_that_fails_to_be_made_puts_the_old_recording_back(pairs, tmp_path, monkeypatch):
    """What the checks before could not see (a decoder failing on the take midway): the row keeps its recording,
    and raw/ is as it was, with no hidden copy left."""
    from utils.datasets import retake

    ws = pairs
    files, rows = _raw(ws), load_manifest(ws, "p")
    monkeypatch.setattr(retake, "process_clip", lambda task: {"id": task["id"], "error": "a1.wav: decoding failed"})
    with pytest.raises(StudioError, match="a1.wav: decoding failed"):
        run_to_end(replace_recording(ws, "p", "a1", espeak_amharic(SENTS[5], tmp_path / "take.wav")))
    assert _raw(ws) == files and load_manifest(ws, "p") == rows


def test_a_take_waits_for_a_run_training_on_the_dataset_but_not_for_one_queued(pairs, tmp_path):
    """A run reads its clips as it trains (its held-out clips at each check): one made again under it would change
    its data midway. A run queued has read nothing yet."""
    import os
    import time

    from utils.workspace import atomic_write_json

    ws = pairs
    run_dir = ws.run_dir("busy")
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "p", "engine": "matcha"}})
    atomic_write_json(run_dir / "status.json", {"state": "running", "pid": os.getpid(), "heartbeat": time.time()})
    take = espeak_amharic(SENTS[5], tmp_path / "take.wav")
    files = _raw(ws)
    with pytest.raises(StudioError, match="Run busy is training on dataset 'p' and reads its clips as it goes: replace "
                                          "the recording when it has finished, or stop it first"):
        run_to_end(replace_recording(ws, "p", "a1", take))
    assert _raw(ws) == files
    atomic_write_json(run_dir / "status.json", {"state": "queued", "queued": time.time()})
    run_to_end(replace_recording(ws, "p", "a1", take))
    assert _raw(ws) != files


def test_a_recording_read_where_it_lies_or_not_kept_is_refused(tmp_path):
    """A folder inside a data folder is linked, not copied: its files are the curator's own, so the take goes
    there by their hand, not the studio's. A dataset whose uploads were deleted has nothing to replace."""
    data = tmp_path / "drive"
    spoken_pairs(data / "takes", 2, prefix="b")
    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "linked", data / "takes", in_place=(data,), workers=1))
    take = espeak_amharic(SENTS[5], tmp_path / "take.wav")
    mine = file_digest(data / "takes" / "b0.wav")
    with pytest.raises(StudioError, match=r"read where it lies, in your folder .*takes \(it was not copied in\)\. "
                                          r"Save the new take over b0\.wav there, then press Prepare again"):
        run_to_end(replace_recording(ws, "linked", "b0", take))
    assert file_digest(data / "takes" / "b0.wav") == mine and sorted(p.name for p in (data / "takes").iterdir()) == [
        "b0.txt", "b0.wav", "b1.txt", "b1.wav"]
    run_to_end(prepare(ws, "dropped", data / "takes", cfg=PrepareConfig(keep_uploads=False), workers=1))
    with pytest.raises(StudioError, match="kept no copy of its uploads"):
        run_to_end(replace_recording(ws, "dropped", "b0", take))


def test_the_command_line_and_the_dataset_tab_replace_a_recording(pairs, tmp_path, capsys):
    import app
    from webui.dataset import retake_row

    ws = pairs
    take = espeak_amharic(SENTS[6], tmp_path / "take.wav")
    assert app.main(["replace-recording", "p", "a2", str(take), "--workspace", str(ws.root)]) == 0
    out = capsys.readouterr().out
    assert "Row a2: the new take replaces its recording raw/pairs/a2.wav" in out and '"clips": 3' in out
    row = {r["id"]: r for r in load_manifest(ws, "p")}["a2"]
    assert row["review"] is None  # its Keep judged the old recording
    assert app.main(["replace-recording", "p", "ghost", str(take), "--workspace", str(ws.root)]) == 2
    assert "Dataset 'p' has no row 'ghost'" in capsys.readouterr().err
    # the tab: the handler the button calls says what was done, and the summary of the dataset after it
    again = espeak_amharic(SENTS[7], tmp_path / "again.wav")
    said = retake_row(ws, "p", "a0", str(again))
    assert said.startswith("Row a0: the new take replaces its recording raw/pairs/a0.wav")
    assert "Row a0: " in said and "2 usable of 3 clip(s)" in said  # a1 excluded
    for name, row_id, given, words in (("p", "", str(again), "Pick a row in the table first"),
                                       ("p", "a0", None, "Record or upload the new take first")):
        with pytest.raises(StudioError, match=words):
            retake_row(ws, name, row_id, given)


def test_in_the_browser_a_row_picked_gets_its_new_take_and_plays_it(start_app, page, tmp_path):
    """The Dataset tab's row editor: a take uploaded into its box replaces the picked row's recording; the status
    line says so, the player plays the new clip and the row's Exclude is gone from the table."""
    from playwright.sync_api import expect

    from tests.helpers import screenshot

    server = start_app(wait=False)
    ws = Workspace.open(server.workspace)
    run_to_end(prepare(ws, "p", spoken_pairs(tmp_path / "pairs", 3), workers=1))
    apply_edits(ws, "p", [{"id": "a1", "action": "exclude"}])
    take = espeak_amharic(SENTS[5], tmp_path / "take.wav", rate=120)
    page.goto(server.wait_ready().url)
    expect(page.locator("#dataset-summary")).to_contain_text("2 of 3 clips")  # the dataset prepared last, shown
    page.locator("#dataset-flagged").get_by_test_id("cell-0-0").click()  # the excluded row, the one listed
    expect(page.get_by_label("Row", exact=True)).to_have_value("a1")
    length = page.locator("#dataset-clip #duration")  # the player's own time: the clip's length, as it drew it
    expect(length).to_have_text("0:02")
    page.locator("#dataset-take-panel").get_by_text("A new take of this row").click()
    page.locator("#dataset-take input[type=file]").set_input_files(str(take))
    expect(page.locator("#dataset-take audio, #dataset-take [data-testid=waveform-controls]").first).to_be_attached(
        timeout=30_000)
    page.locator("#dataset-take-replace").click()
    status = page.locator("#dataset-status")
    expect(status).to_contain_text("Row a1: the new take replaces its recording raw/pairs/a1.wav", timeout=120_000)
    expect(status).to_contain_text("3 usable of 3 clip(s)")
    expect(page.locator("#dataset-summary")).to_contain_text("3 of 3 clips")  # redrawn: a1 no longer excluded
    expect(length).to_have_text("0:03")  # the player plays the new clip
    screenshot(page.locator("#dataset-take-panel").locator(".."), tmp_path, "new-take")
    row = {r["id"]: r for r in load_manifest(ws, "p")}["a1"]
    assert row["review"] is None and row["duration"] > 2.0
    # a take waiting in the box is of the row picked: picking another empties it (it went to the wrong row)
    page.locator("#dataset-take input[type=file]").set_input_files(str(take))
    expect(page.locator("#dataset-take input[type=file]")).to_have_count(0)
    page.get_by_label("Show every row, not only flagged ones").check()
    page.locator("#dataset-flagged").get_by_test_id("cell-0-0").click()
    expect(page.get_by_label("Row", exact=True)).to_have_value("a0")
    expect(page.locator("#dataset-take input[type=file]")).to_have_count(1)  # the box is empty again
