"""Bad input: each problem yields a message naming the file, the rest is prepared, nothing escapes."""
from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import cli, espeak_amharic, sentences, spoken_pairs, to_m4a
from utils.datasets import load_manifest, load_report, prepare
from utils.datasets.config import PrepareConfig
from utils.datasets.sources import discover
from utils.events import StudioError, run_to_end
from utils.workspace import Workspace

SENTS = sentences(6)


def run(ws, name, source, **kw):
    return run_to_end(prepare(ws, name, source, workers=1, **kw))


def messages(ws, name) -> str:
    return "\n".join(e["message"] for e in load_report(ws, name)["errors"])


def good_pairs(folder: Path, n: int = 2) -> Path:
    for i in range(n):
        espeak_amharic(SENTS[i], folder / f"ok{i}.wav")
        (folder / f"ok{i}.txt").write_text(SENTS[i], encoding="utf-8")
    return folder


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_zip_with_dotdot_absolute_and_symlink_entries_extracts_only_safe_files(tmp_path):
    src = good_pairs(tmp_path / "g")
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in src.iterdir():
            zf.write(p, p.name)
        zf.writestr("../escaped.txt", "gotcha")
        zf.writestr(f"{tmp_path}/absolute_evil.txt", "gotcha")  # an absolute name, kept as written
        link = zipfile.ZipInfo("link.wav")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    ws = Workspace.open(tmp_path / "ws")
    before = files_under(tmp_path) - files_under(tmp_path / "ws")
    summary = run(ws, "z", archive)
    assert summary["clips"] == 2
    text = messages(ws, "z")
    assert "'../escaped.txt'" in text and f"'{tmp_path}/absolute_evil.txt'" in text and "'link.wav'" in text
    after = files_under(tmp_path) - files_under(tmp_path / "ws")
    assert after == before  # nothing written outside the workspace (and so outside the dataset)
    assert not (tmp_path / "absolute_evil.txt").exists()
    ds = ws.dataset_dir("z")
    assert all(p.resolve().is_relative_to(ds) for p in files_under(ws.root / "datasets"))
    assert not any(p.is_symlink() for p in files_under(ds))


def test_folder_symlink_is_skipped_with_a_message(tmp_path):
    src = good_pairs(tmp_path / "g")
    secret = tmp_path / "secret.wav"
    espeak_amharic(SENTS[3], secret)
    os.symlink(secret, src / "sneaky.wav")
    ws = Workspace.open(tmp_path / "ws")
    assert run(ws, "s", src)["clips"] == 2
    assert "sneaky.wav" in messages(ws, "s") and "symbolic link" in messages(ws, "s")


def test_zip_bomb_guards_on_ratio_total_size_and_entry_count(tmp_path):
    src = good_pairs(tmp_path / "g")
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in src.iterdir():
            zf.write(p, p.name)
        zf.writestr("zeros.wav", b"\0" * (40 << 20))  # 40 MB that compresses ~1000x
    ws = Workspace.open(tmp_path / "ws")
    assert run(ws, "bomb", bomb)["clips"] == 2
    assert "'zeros.wav'" in messages(ws, "bomb") and "zip bomb" in messages(ws, "bomb")
    assert not (ws.dataset_dir("bomb") / "raw" / "bomb" / "zeros.wav").exists()

    with pytest.raises(StudioError, match="bomb.zip.*limit"):
        run(ws, "bomb2", bomb, cfg=PrepareConfig(max_zip_bytes=1 << 20))
    with pytest.raises(StudioError, match="bomb.zip: 5 entries"):
        run(ws, "bomb3", bomb, cfg=PrepareConfig(max_zip_entries=3))


def test_empty_zip_says_so(tmp_path):
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    ws = Workspace.open(tmp_path / "ws")
    with pytest.raises(StudioError, match="empty.zip: the zip is empty"):
        run(ws, "e", empty)
    assert not ws.dataset_dir("e").exists() and ws.list_datasets() == []  # no half-made dataset left behind


def test_a_failed_import_removes_only_the_folder_it_created(tmp_path):
    """A new dataset whose import fails leaves nothing; a failed import into an existing dataset leaves
    its raw uploads, manifest and clips exactly as they were."""
    ws = Workspace.open(tmp_path / "ws")
    (tmp_path / "void").mkdir()
    with pytest.raises(StudioError, match="no files found"):
        run(ws, "fresh", tmp_path / "void")
    assert not ws.dataset_dir("fresh").exists()

    assert run(ws, "kept", good_pairs(tmp_path / "good"))["clips"] == 2
    before = {p: p.read_bytes() for p in files_under(ws.dataset_dir("kept")) if p.is_file()}
    with pytest.raises(StudioError, match="metadata.csv"):  # the wrong format picked for a re-run
        run(ws, "kept", None, fmt="ljspeech")
    after = {p: p.read_bytes() for p in files_under(ws.dataset_dir("kept")) if p.is_file()}
    assert {p: b for p, b in after.items() if p in before} == before  # every earlier file, byte for byte
    assert ws.list_datasets() == ["kept"] and len(load_manifest(ws, "kept")) == 2


def test_zero_byte_non_audio_and_three_hour_files_are_named_and_the_rest_prepared(tmp_path):
    src = good_pairs(tmp_path / "bad")
    (src / "zero.wav").write_bytes(b"")
    (src / "zero.txt").write_text(SENTS[2], encoding="utf-8")
    (src / "fake.wav").write_text("this is a text file renamed to .wav")
    (src / "fake.txt").write_text(SENTS[3], encoding="utf-8")
    # 3 hours of a quiet generated signal, written block by block (43 MB, 8-bit at 4 kHz)
    with sf.SoundFile(str(src / "marathon.wav"), "w", 4000, 1, "PCM_U8") as f:
        block = (0.01 * np.sin(np.arange(4000 * 60) * 0.05)).astype(np.float32)
        for _ in range(180):
            f.write(block)
    (src / "marathon.txt").write_text(SENTS[4], encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "bad", src)
    assert summary["clips"] == 2 and {r["id"] for r in load_manifest(ws, "bad")} == {"ok0", "ok1"}
    text = messages(ws, "bad")
    assert "zero.wav: the file is empty (0 bytes)" in text
    assert "fake.wav: not readable audio, damaged or not a sound file" in text and "re-export it as WAV" in text
    assert str(tmp_path) not in text and "Error opening" not in text  # no server path, no library wording
    assert "marathon.wav: 3:00:00 long" in text and "or put a subtitle file (.srt or .vtt" in text  # it has its transcript
    assert not (ws.dataset_dir("bad") / "audio" / "marathon.wav").exists()


def test_csv_referencing_missing_and_outside_files_names_each_row(tmp_path):
    src = tmp_path / "c"
    espeak_amharic(SENTS[0], src / "a.wav")
    (src / "meta.csv").write_text(f"audio|text\na.wav|{SENTS[0]}\nnope.wav|{SENTS[1]}\n/etc/hosts|{SENTS[2]}\n",
                                  encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    assert run(ws, "c", src)["clips"] == 1
    text = messages(ws, "c")
    assert "row 3: audio 'nope.wav' does not exist" in text and "row 4: audio '/etc/hosts'" in text


def test_transcripts_without_audio_in_ljspeech_are_named(tmp_path):
    src = tmp_path / "lj"
    espeak_amharic(SENTS[0], src / "wavs" / "a.wav")
    (src / "metadata.csv").write_text(f"a|{SENTS[0]}\nb|{SENTS[1]}\n", encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    assert run(ws, "lj", src)["clips"] == 1
    assert "line 2: transcript for 'b' has no audio" in messages(ws, "lj")


def test_a_missing_audio_file_named_with_its_extension_is_expected_at_its_real_path(tmp_path):
    """It said 'expected wavs/missing.wav.wav', a file no curator would look for."""
    src = tmp_path / "lj"
    espeak_amharic(SENTS[0], src / "wavs" / "a.wav")
    (src / "metadata.csv").write_text(f"a|{SENTS[0]}\nmissing.wav|{SENTS[1]}\nb|{SENTS[1]}\n", encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "lj", src)
    text = messages(ws, "lj")
    assert "'missing.wav' has no audio (expected wavs/missing.wav)." in text
    assert "'b' has no audio (expected wavs/b.wav)." in text  # an id without extension: as before


def test_a_line_naming_its_file_gives_the_row_the_files_name_without_extension(tmp_path):
    """The row was 'am003.wav', its clip am003.wav.wav, and `clip-voice --row am003` found no such row."""
    src = tmp_path / "lj"
    espeak_amharic(SENTS[0], src / "wavs" / "am003.wav")
    espeak_amharic(SENTS[1], src / "wavs" / "spk1.utt3.wav")
    (src / "metadata.csv").write_text(f"am003.wav|{SENTS[0]}\nspk1.utt3|{SENTS[1]}\n", encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "lj", src)
    rows = {r["id"]: r for r in load_manifest(ws, "lj")}
    assert set(rows) == {"am003", "spk1.utt3"}
    assert not any(r["audio"].endswith(".wav.wav") for r in rows.values())


def test_nothing_usable_raises_with_the_reason(tmp_path):
    src = tmp_path / "n"
    src.mkdir()
    (src / "x.wav").write_bytes(b"RIFF....garbage")
    ws = Workspace.open(tmp_path / "ws")
    with pytest.raises(StudioError, match=r"No clip could be made from n, so no dataset was made: .*x\.wav"):
        run(ws, "n", src)  # a dataset of no clip would be offered by every picker: none is made
    assert not ws.dataset_dir("n").exists() and (src / "x.wav").read_bytes() == b"RIFF....garbage"
    (tmp_path / "void").mkdir()
    with pytest.raises(StudioError, match="no files found"):
        run(ws, "v", tmp_path / "void")


def test_phone_recordings_in_m4a_are_decoded_with_ffmpeg_and_raw_keeps_the_original(tmp_path):
    src = good_pairs(tmp_path / "phone", n=3)
    m4a = to_m4a(src / "ok1.wav")
    original = m4a.read_bytes()
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "phone", sorted(src.iterdir()))
    rows = {r["id"]: r for r in load_manifest(ws, "phone")}
    assert summary["clips"] == 3 and set(rows) == {"ok0", "ok1", "ok2"}
    assert rows["ok1"]["source"] == "raw/ok1.m4a" and 1.0 < rows["ok1"]["duration"] < 15
    assert (ws.dataset_dir("phone") / "raw" / "ok1.m4a").read_bytes() == original  # kept byte for byte
    assert (ws.dataset_dir("phone") / "decoded" / "ok1.m4a.flac").is_file()
    # recorded again under its name, the new file's own time older than the decoding's (a hard link keeps it): it is
    # decoded again and its clip made again, not the old recording's decoding kept
    m4a.unlink()
    again = to_m4a(espeak_amharic(SENTS[5], src / "ok1.wav", rate=110))
    os.utime(again, ns=(10**18, 10**18))  # 2001
    said = [e.message for e in prepare(ws, "phone", [again], workers=1) if e.message]
    assert "1 clip(s) made again: their recordings changed since they were made (ok1)" in said, said
    now = {r["id"]: r for r in load_manifest(ws, "phone")}["ok1"]
    assert now["sha1"] != rows["ok1"]["sha1"] and abs(now["duration"] - rows["ok1"]["duration"]) > 0.3


def test_aac_saved_under_an_mp3_or_wav_name_is_decoded_with_ffmpeg_too(tmp_path):
    """A phone's AAC named .mp3 or .wav was "not readable audio ... (File does not exist ...)" with ffmpeg there."""
    from utils.datasets.disk import file_seconds

    src = good_pairs(tmp_path / "phone", n=3)
    for i, name in ((1, "ok1.mp3"), (2, "ok2.wav")):
        to_m4a(src / f"ok{i}.wav").rename(src / name)
    seconds, how = file_seconds(src / "ok2.wav", (src / "ok2.wav").stat().st_size)
    assert how == "guess" and seconds > 0  # the disk line counts it, to be decoded
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "phone", sorted(src.iterdir()))
    rows = {r["id"]: r for r in load_manifest(ws, "phone")}
    assert summary["clips"] == 3 and summary["errors"] == 0, messages(ws, "phone")
    assert 1.0 < rows["ok1"]["duration"] < 15 and (ws.dataset_dir("phone") / "decoded" / "ok2.wav.flac").is_file()


def test_without_ffmpeg_an_m4a_is_named_with_what_to_do_and_the_rest_is_prepared(tmp_path, monkeypatch):
    import utils.audio

    src = good_pairs(tmp_path / "phone", n=2)
    to_m4a(src / "ok1.wav")
    real_which = utils.audio.shutil.which
    monkeypatch.setattr(utils.audio.shutil, "which", lambda name: None if name == "ffmpeg" else real_which(name))
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "phone", sorted(src.iterdir()))
    assert summary["clips"] == 1 and [r["id"] for r in load_manifest(ws, "phone")] == ["ok0"]
    assert "ok1.m4a: M4A audio needs ffmpeg to decode" in messages(ws, "phone")


def test_a_first_preparation_that_fails_midway_keeps_the_uploads_and_the_finished_clips(tmp_path, monkeypatch):
    """A worker killed for memory, a full disk or a Drive error after the recordings were found used to delete the
    new dataset folder, its raw copies (perhaps the only copy of an upload) and the finished clips, while the
    message said finished clips are kept. Now the folder stays, and a re-run goes on from the clips done."""
    import errno
    import importlib

    prepare_module = importlib.import_module("utils.datasets.prepare")

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    ws = Workspace.open(tmp_path / "ws")
    source = good_pairs(tmp_path / "upload", 3)
    monkeypatch.setattr(prepare_module, "save_manifest", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run(ws, "big", source)
    ds = ws.dataset_dir("big")
    assert sorted(p.name for p in (ds / "raw").rglob("*.wav")) == ["ok0.wav", "ok1.wav", "ok2.wav"]
    done = (ds / prepare_module.STATE_DIR / "done.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(done) == 3  # every clip finished before the disk filled
    monkeypatch.undo()
    assert run(ws, "big", None)["clips"] == 3  # the re-run from raw/ (what the message asks for) finishes it
    assert ws.list_datasets() == ["big"]


def test_a_header_line_in_ljspeech_metadata_is_skipped_and_said_once_not_counted_as_an_error(tmp_path):
    """'id|text' (with a BOM and Windows line ends) was read as a transcript for 'id' with no audio: 1 file error."""
    src = tmp_path / "lj"
    for i in range(2):
        espeak_amharic(SENTS[i], src / "wavs" / f"a{i}.wav")
    (src / "metadata.csv").write_bytes(f"\ufeffID|Text\r\na0|{SENTS[0]}\r\na1|{SENTS[1]}\r\n".encode("utf-8"))
    ws = Workspace.open(tmp_path / "ws")
    events = list(prepare(ws, "lj", src, workers=1))
    summary = events[-1].result
    assert summary["clips"] == 2 and summary["errors"] == 0 and messages(ws, "lj") == ""
    said = [e for e in events if "read as a header" in (e.message or "")]
    assert len(said) == 1 and said[0].level == "info" and "metadata.csv line 1" in said[0].message


@pytest.mark.parametrize("sep", [",", "\t", ";"])
def test_a_metadata_csv_written_with_commas_tabs_or_semicolons_is_read_and_said_so(tmp_path, sep):
    """A spreadsheet's export (id,text) gave 30 lines of "expected 'id|text'", an empty dataset, and advice to get
    machine transcripts (a spreadsheet where the comma is the decimal mark writes semicolons). With no '|' in any line
    and the other separator in every one, it is read as id<sep>text and said in one line; a comma later in the text
    stays in the text."""
    ds = tmp_path / "ds"
    for i in range(2):
        espeak_amharic(SENTS[i], ds / "raw" / "wavs" / f"a{i}.wav")
    (ds / "raw" / "metadata.csv").write_text(f"id{sep}text\na0{sep}{SENTS[0]}, {SENTS[1]}\na1{sep}{SENTS[1]}\n",
                                             encoding="utf-8")
    found = discover(ds)
    assert [(it.id, it.text) for it in found.items] == [("a0", f"{SENTS[0]}, {SENTS[1]}"), ("a1", SENTS[1])]
    assert found.errors == []
    said = " ".join(found.notes)
    names = {",": "commas", "\t": "tabs", ";": "semicolons"}
    assert f"separates its columns with {names[sep]}, not '|'" in said, found.notes


def test_transcript_lines_that_cannot_be_read_are_named_before_machine_drafts(tmp_path):
    """Lines of a metadata.csv in no layout the studio reads left every clip without text, and the advice was to get
    machine drafts of what the file already says: the unread lines come first, with how to prepare again."""
    from webui.dataset import summary_markdown

    src = tmp_path / "up"
    for i in range(2):
        espeak_amharic(SENTS[i], src / "wavs" / f"a{i}.wav")
    (src / "metadata.csv").write_text(f"a0 {SENTS[0]}\na1 {SENTS[1]}\n", encoding="utf-8")  # spaces, no separator
    ws = Workspace.open(tmp_path / "ws")
    done = list(prepare(ws, "sp", src, workers=1))[-1].message
    assert "no clip has text: 2 line(s) or file(s) could not be read" in done and "delete-dataset sp" in done
    assert "2 line(s) or file(s) could not be read (listed above)" in summary_markdown(ws, "sp")


def test_one_recording_listed_twice_is_told_apart_from_two_recordings_under_one_id(tmp_path):
    """A line repeated with another text read "id 'a0' is given to 2 or more recordings" of what was one recording,
    and said nothing of which text is where."""
    ds = tmp_path / "ds"
    espeak_amharic(SENTS[0], ds / "raw" / "wavs" / "a0.wav")
    (ds / "raw" / "metadata.csv").write_text(f"a0|{SENTS[0]}\na0|{SENTS[1]}\n", encoding="utf-8")
    items = discover(ds).items
    assert [(it.id, it.text) for it in items] == [("a0", SENTS[0]), ("a0-dup2", SENTS[1])]
    assert items[1].notes["duplicate_id"] == (
        "id 'a0' is given to the same recording again, with this text: kept as row a0-dup2, beside row a0 with the "
        "first text; keep the row whose text is right and exclude the other")


def test_a_first_row_named_like_a_header_word_is_a_clip_when_its_audio_exists(tmp_path):
    ds = tmp_path / "ds"
    espeak_amharic(SENTS[0], ds / "raw" / "wavs" / "audio.wav")
    espeak_amharic(SENTS[1], ds / "raw" / "wavs" / "a1.wav")
    (ds / "raw" / "metadata.csv").write_text(f"audio|text\na1|{SENTS[1]}\n", encoding="utf-8")
    found = discover(ds)
    assert [(it.id, it.text) for it in found.items] == [("audio", "text"), ("a1", SENTS[1])]
    assert found.errors == [] and found.notes == []


def test_a_clip_too_long_to_train_on_says_how_its_speech_can_still_be_used(tmp_path):
    """An 88 s clip in an LJSpeech zip read '87.8 s (maximum 20.0 s)' and was left out, with no word of cutting it."""
    src = tmp_path / "lj"
    espeak_amharic(" ".join(SENTS[:2]), src / "wavs" / "lecture.wav")
    (src / "metadata.csv").write_text(f"lecture|{SENTS[0]} {SENTS[1]}\n", encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "lj", src, cfg=PrepareConfig(max_duration=1.5))
    row, = load_manifest(ws, "lj")
    # its transcript is kept in the way out: Format long would cut it at pauses and drop the text
    assert row["excluded"] and "(maximum 1.5 s); to use it with its transcript, cut the recording and its text into " \
        "pieces under 1.5 s, or put a subtitle file (.srt or .vtt, the recording's name) beside it" \
        in row["notes"]["too_long"]
    from utils.datasets.clips import too_long_note

    untranscribed = too_long_note(88.0, {"text": ""}, PrepareConfig())
    assert "; to use its speech, prepare this recording on its own with Format long (--format long on the command " \
        "line): it is cut at pauses" in untranscribed


def test_a_too_long_subtitle_cue_is_told_to_be_split_in_its_file():
    from utils.datasets.clips import too_long_note

    cfg = PrepareConfig()
    cue = too_long_note(31.0, {"start": 12.0, "end": 43.0, "text": "ሰላም"}, cfg)
    assert cue == "31.0 s (maximum 20.0 s); split this cue in its subtitle file and prepare again"
    assert too_long_note(21.0, {"start": 1.0, "end": 22.0, "text": ""}, cfg) == "21.0 s (maximum 20.0 s)"


def test_an_upload_that_makes_no_clip_leaves_no_dataset_and_says_what_was_given_and_what_is_needed(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    notes = tmp_path / "notes.txt"
    notes.write_text("ሰላም ነው።\n", encoding="utf-8")
    stamp = notes.stat().st_mtime_ns
    with pytest.raises(StudioError, match=r"No clip could be made from notes\.txt, so no dataset was made: a dataset "
                                          r"needs speech recordings with their transcripts.*transcript with no audio"):
        list(prepare(ws, "notes", [notes]))
    proc = cli("prepare", str(notes), "--name", "notes-cli", "--workspace", str(ws.root))
    assert proc.returncode == 2 and "No clip could be made from notes.txt" in proc.stderr
    assert not ws.dataset_dir("notes").exists() and not ws.dataset_dir("notes-cli").exists()
    assert "notes" not in ws.list_datasets() and "notes-cli" not in ws.list_datasets()
    assert notes.read_text(encoding="utf-8") == "ሰላም ነው።\n" and notes.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("header", [True, False])
def test_a_three_column_metadata_csv_from_a_spreadsheet_reads_its_text_once_without_quotes(tmp_path, header):
    """Excel's id,text,normalized (a BOM, Windows line ends, quotes around a text holding a comma) was split once at
    the first comma: every transcript said twice ("text,normalized"), its quotes kept, and no flag raised."""
    ds = tmp_path / "ds"
    for i in range(3):
        espeak_amharic(SENTS[i], ds / "raw" / "wavs" / f"a{i}.wav")
    quoted = f'"{SENTS[1]}, ""{SENTS[2][:10]}"""'
    lines = ([] if not header else ["id,text,normalized"]) + [
        f"a0,{SENTS[0]},{SENTS[0]}", "", f"a1,{quoted},{quoted}", f"a2,{SENTS[2]},{SENTS[2]} ።"]
    (ds / "raw" / "metadata.csv").write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    found = discover(ds)
    assert [(it.id, it.text) for it in found.items] == [
        ("a0", SENTS[0]), ("a1", f'{SENTS[1]}, "{SENTS[2][:10]}"'), ("a2", SENTS[2])]
    assert found.errors == []
    said = " ".join(found.notes)
    assert "read as id,text,normalized, its text from the column text" in said, found.notes
    assert ("line 1 read as a header" in said) == header
    if not header:  # one comma in each text of a headerless file is a text, not a third column
        (ds / "raw" / "metadata.csv").write_text(f"a0,{SENTS[0]}, {SENTS[1]}\n", encoding="utf-8")
        assert [it.text for it in discover(ds).items if it.id == "a0"] == [f"{SENTS[0]}, {SENTS[1]}"]


def test_lines_are_numbered_as_the_file_is_blank_lines_counted(tmp_path):
    """A line after a blank one was named one line too early ("line 8" of line 9), a CSV row likewise."""
    ds = tmp_path / "ds"
    espeak_amharic(SENTS[0], ds / "raw" / "wavs" / "a0.wav")
    (ds / "raw" / "metadata.csv").write_text(f"a0|{SENTS[0]}\n\n\nmissing|{SENTS[1]}\n", encoding="utf-8")
    assert [e["message"].split(":")[0] for e in discover(ds).errors] == ["raw/metadata.csv line 4"]
    table = tmp_path / "t"
    espeak_amharic(SENTS[0], table / "raw" / "c0.wav")
    (table / "raw" / "list.csv").write_text(f"file,text\nc0.wav,{SENTS[0]}\n\nc9.wav,{SENTS[1]}\n,{SENTS[2]}\n",
                                            encoding="utf-8")
    espeak_amharic(SENTS[1], table / "raw" / "extra.wav")  # named by no row
    found = discover(table)
    said = [e["message"] for e in found.errors]
    assert [m.split(":")[0] for m in said] == ["raw/list.csv row 4", "raw/list.csv row 5"]
    assert "1 recording(s) that no row of list.csv names are left out: raw/extra.wav" in " ".join(found.notes)
    assert "names no audio file; fill in its file column or delete the row" in said[1]


def _three_pairs_prepared(tmp_path: Path, excluded: tuple[str, ...]) -> tuple[Path, Workspace]:
    """A folder of three recordings with their transcripts, prepared as dataset "p", the rows `excluded` by hand."""
    from utils.datasets.curate import apply_edits

    src = spoken_pairs(tmp_path / "pairs", 3)
    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "p", src, workers=1))
    apply_edits(ws, "p", [{"id": i, "action": "exclude"} for i in excluded])
    return src, ws


def test_a_folder_prepared_again_reads_its_corrected_transcripts_and_recordings_and_brings_its_new_ones(tmp_path,
                                                                                                       capsys):
    """The first changed file of a folder stopped its import: recordings added after it never came in, unsaid; a
    transcript fixed without changing its length was taken for the file the dataset had, and the fix ignored unsaid;
    one fixed with another length was refused ("choose another dataset name", its review decisions lost). A recording
    made again under its name was refused until the dataset was deleted (its decisions with it)."""
    src, ws = _three_pairs_prepared(tmp_path, excluded=("a1", "a2"))
    before = {r["id"]: r for r in load_manifest(ws, "p")}
    fixed = src / "a0.txt"
    fixed.unlink()  # as an editor saves: a new file, the dataset's hard link keeps the old one
    fixed.write_text(SENTS[0][::-1], encoding="utf-8")  # the same length, other letters
    (src / "a1.wav").unlink()
    espeak_amharic(SENTS[4], src / "a1.wav")  # the recording made again under its name
    espeak_amharic(SENTS[3], src / "b.wav")
    (src / "b.txt").write_text(SENTS[3], encoding="utf-8")
    events = list(prepare(ws, "p", src, workers=1))
    rows = {r["id"]: r for r in load_manifest(ws, "p")}
    assert sorted(rows) == ["a0", "a1", "a2", "b"] and rows["a0"]["text"] == SENTS[0][::-1]
    said = {e.level: [] for e in events}
    for e in events:
        said[e.level].append(e.message or "")
    assert not [e.message for e in events if e.level == "warning" and e.stage == "import"]
    assert any(m.startswith("a0.txt: replaces the version imported before, which is kept as .a0.txt.before-")
               for m in said["info"]), said["info"]
    assert any(m.startswith("a1.wav: replaces the recording imported before, which is kept as .a1.wav.before-")
               and "its clip is made again" in m for m in said["info"]), said["info"]
    assert "1 clip(s) made again: their recordings changed since they were made (a1)" in said["info"]
    assert any(m.startswith("1 new clip(s) added to p (3 before, 4 now); 1 clip(s) made again from a changed recording "
                            "(a1); ") for m in said["info"]), said["info"]
    # the new recording is the row's audio now, judged afresh; the other row's decision stays
    assert rows["a1"]["sha1"] != before["a1"]["sha1"] and rows["a1"]["duration"] != before["a1"]["duration"]
    assert rows["a1"]["review"] is None and not rows["a1"]["excluded"]
    assert rows["a2"]["review"] == "exclude" and rows["a2"]["sha1"] == before["a2"]["sha1"]
    assert any("Your Keep/Exclude on 1 row(s) whose recording changed was cleared" in m and "(a1)" in m
               for m in said["info"]), said["info"]
    raw = ws.dataset_dir("p") / "raw" / "pairs"
    assert [p.read_text(encoding="utf-8") for p in raw.glob(".a0.txt.before-*")] == [SENTS[0]]  # nothing lost
    assert [sf.info(p).duration for p in raw.glob(".a1.wav.before-*")] == [pytest.approx(before["a1"]["duration"],
                                                                                          abs=0.6)]
    import app  # the command line: a file refused (a link) makes its exit status 1 (a script stops), the rest prepared

    (src / "c.wav").symlink_to(src / "a2.wav")
    capsys.readouterr()
    assert app.main(["prepare", str(src), "--name", "p", "--workspace", str(ws.root)]) == app.NOT_ALL_READ == 1
    out, err = capsys.readouterr()
    assert "WARNING: import pairs/c.wav: skipped (symbolic link; copy the real file in)." in out
    assert '"clips": 4' in out and "error: 1 of the files given was not read (each named above with what to do); " \
                                   "p was prepared from the rest." in err


def test_a_recording_saved_over_where_it_lies_is_noticed_and_a_zip_given_again_replaces_what_changed(tmp_path):
    """The dataset's copy of a recording is a hard link (or a folder read in place): one saved over in its folder
    changed what raw/ holds while its clip, made of the old one, was kept by every later Prepare. A zip exported again
    with one recording made again was refused whole."""
    src, ws = _three_pairs_prepared(tmp_path, excluded=("a0", "a1"))
    before = {r["id"]: r for r in load_manifest(ws, "p")}
    audio, rate = sf.read(src / "a0.wav")
    sf.write(src / "a0.wav", audio[: len(audio) // 2], rate)  # saved over: the same file, so raw/'s link changes too
    os.utime(src / "a1.wav")  # touched, not changed: its clip is made again, into the same audio
    events = list(prepare(ws, "p", workers=1))  # Prepare again with nothing given: what raw/ holds
    rows = {r["id"]: r for r in load_manifest(ws, "p")}
    said = [e.message for e in events if e.message]
    assert "2 clip(s) made again: their recordings changed since they were made (a0, a1)" in said
    assert rows["a0"]["duration"] < before["a0"]["duration"] - 0.5 and rows["a0"]["review"] is None
    assert rows["a1"]["sha1"] == before["a1"]["sha1"] and rows["a1"]["review"] == "exclude"  # the same audio: kept
    assert rows["a2"] == before["a2"]
    again = list(prepare(ws, "p", workers=1))  # nothing changed since: nothing made again
    assert not any("made again" in (e.message or "") for e in again)
    # a zip given again: the same entries are kept, the one that changed replaces its old version (kept, hidden)
    zipped = tmp_path / "takes.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        for i in range(3):
            zf.write(src / f"a{i}.wav", f"a{i}.wav")
            zf.writestr(f"a{i}.txt", SENTS[i])
    run_to_end(prepare(ws, "z", zipped, workers=1))
    espeak_amharic(SENTS[5], tmp_path / "new.wav")
    zipped.unlink()
    with zipfile.ZipFile(zipped, "w") as zf:
        for i in range(3):
            zf.write(tmp_path / "new.wav" if i == 2 else src / f"a{i}.wav", f"a{i}.wav")
            zf.writestr(f"a{i}.txt", SENTS[i])
    events = list(prepare(ws, "z", zipped, workers=1))
    said = [e.message for e in events if e.message]
    assert not [e.message for e in events if e.level == "warning" and e.stage == "import"]
    assert any(m.startswith("takes.zip: replaces the version imported before, which is kept as .takes.zip.before-")
               for m in said), said
    assert [m.split(",")[0] for m in said if "replaces the recording" in m] == [
        "a2.wav: replaces the recording imported before"]
    assert "1 clip(s) made again: their recordings changed since they were made (a2)" in said
    kept = list((ws.dataset_dir("z") / "raw" / "takes").glob(".a2.wav.before-*"))
    assert len(kept) == 1 and sf.info(kept[0]).duration == pytest.approx(sf.info(src / "a2.wav").duration)


def test_session_folders_numbered_alike_are_all_trained_on_each_id_taking_its_folders_name(tmp_path):
    """Day1/001.wav and Day2/001.wav, each with its own transcript: Day2's were renamed 001-dup2 and left out of
    training as duplicates, half the data, said only as "given to 2 or more recordings"."""
    ds = tmp_path / "ds"
    for day in (1, 2):
        for i in range(2):
            text = SENTS[2 * (day - 1) + i]
            espeak_amharic(text, ds / "raw" / "days" / f"Day{day}" / f"00{i}.wav")
            (ds / "raw" / "days" / f"Day{day}" / f"00{i}.txt").write_text(text, encoding="utf-8")
    found = discover(ds)
    assert sorted(it.id for it in found.items) == ["000", "001", "Day2_000", "Day2_001"]
    assert not any(it.notes for it in found.items) and found.errors == []
    assert "2 recording(s) share a name with one in another folder" in " ".join(found.notes)
    day2 = {it.id: it.text for it in found.items}
    assert day2["Day2_001"] == SENTS[3]
    from utils.datasets.sources import _own_folder

    assert _own_folder("raw/spk2/wavs/001.wav", "raw/spk1/wavs/001.wav") == "spk2"  # not "wavs", which both have
    assert _own_folder("raw/a/b/001.wav", "raw/a/001.wav") == "b" and _own_folder("raw/a/1.wav", "raw/a/1.flac") == ""
    # prepared again, each keeps its id (the one that held it first keeps the plain one)
    owners = {it.id: it.source for it in found.items}
    assert {it.id: it.source for it in discover(ds, owners=owners).items} == owners


def test_a_zip_with_utf8_names_not_flagged_as_utf8_keeps_its_amharic_file_names(tmp_path):
    """macOS's Archive Utility writes UTF-8 names without the zip's UTF-8 flag: they were read in the old DOS code
    page, so metadata.csv found no audio for ድምፅ_01 ("0 usable") and pairs got ids like ßëÇßê_1."""
    name = "ድምፅ_01"
    wav = tmp_path / "a.wav"
    espeak_amharic(SENTS[0], wav)
    placeholder = "x" * len(name.encode("utf-8"))  # written as ASCII (no flag), then given the UTF-8 bytes
    made = tmp_path / "made.zip"
    with zipfile.ZipFile(made, "w") as zf:
        zf.write(wav, f"lj/wavs/{placeholder}.wav")
        zf.writestr("lj/metadata.csv", f"{name}|{SENTS[0]}\n")
    data = made.read_bytes().replace(placeholder.encode(), name.encode("utf-8"))
    mac = tmp_path / "mac.zip"
    mac.write_bytes(data)
    with zipfile.ZipFile(mac) as zf:
        assert not any(i.flag_bits & 0x800 for i in zf.infolist())  # as the Mac wrote it
    ws = Workspace.open(tmp_path / "ws")
    summary = run_to_end(prepare(ws, "mac", mac, workers=1))
    assert summary["clips"] == 1 and summary["errors"] == 0, messages(ws, "mac")
    assert [r["id"] for r in load_manifest(ws, "mac")] == [name]


def test_transcripts_turned_to_question_marks_by_a_spreadsheet_say_to_save_it_as_utf8(tmp_path):
    """Excel's "CSV (Comma delimited)" writes '?' for each Amharic letter: every row said to write the clip "in
    Amharic letters (Save text)", the curator sent to retype the whole dataset the file once held."""
    from utils.datasets.checks import check_text, lost_letters

    src = good_pairs(tmp_path / "ansi", n=2)
    for p in sorted(src.glob("*.txt")):
        p.unlink()
    table = "file,text\n" + "".join(f"ok{i}.wav,{''.join('?' if not c.isspace() else c for c in SENTS[i])}\n"
                                      for i in range(2))
    (src / "list.csv").write_text(table, encoding="cp1252")
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "ansi", src)
    rows = load_manifest(ws, "ansi")
    assert len(rows) == 2 and all('again as "CSV UTF-8"' in r["notes"]["non_ethiopic"] for r in rows)
    said = check_text("??? ???? ??", PrepareConfig())["notes"]["non_ethiopic"]
    assert said.startswith("the transcript is question marks where its letters were") and "CSV UTF-8" in said
    assert not lost_letters("ሰላም?") and not lost_letters("?") and lost_letters("???? ???")


def test_a_float_wav_louder_than_full_scale_is_not_called_clipped_but_a_flat_topped_one_is(tmp_path):
    """32-bit float keeps samples above 1.0 (the gain brings them back down): a peak of 4.0 read "clipping: 2.93% of
    samples at full scale"."""
    from utils.datasets.clips import clipped_share

    src = good_pairs(tmp_path / "f", n=2)
    speech, sr = sf.read(src / "ok0.wav", dtype="float32")
    loud = speech / np.abs(speech).max() * 4.0
    sf.write(src / "ok0.wav", loud, sr, subtype="FLOAT")
    sf.write(src / "ok1.wav", np.clip(loud, -1, 1), sr, subtype="FLOAT")  # flat at 1.0: clipped, float or not
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "f", src)
    flags = {r["id"]: r["flags"] for r in load_manifest(ws, "f")}
    assert "clipping" not in flags["ok0"] and "clipping" in flags["ok1"]
    assert clipped_share(np.clip(loud, -1, 1), "PCM_16") == clipped_share(np.clip(loud, -1, 1), "FLOAT") > 0.01


def test_a_recording_too_long_for_one_clip_with_its_transcript_is_told_to_keep_its_text(tmp_path):
    """An 11-minute lecture.wav with lecture.txt was told "prepare it with --format long", which cuts it at pauses and
    drops the transcript (a recording under the limit got the better advice: cut it with its text, or subtitles)."""
    src = good_pairs(tmp_path / "lec", n=2)
    (src / "ok1.txt").unlink()
    ws = Workspace.open(tmp_path / "ws")
    with pytest.raises(StudioError) as refused:  # no clip made: no dataset, and every file's why
        run(ws, "lec", src, cfg=PrepareConfig(max_clip_file=0.5))
    said = str(refused.value)
    assert "ok0.wav: 0:00:0" in said and "too long for one clip (limit 0:00:00)" in said
    assert "to use it with its transcript" in said and "subtitle file (.srt or .vtt" in said  # ok0 has a text
    assert "ok1.wav" in said and "prepare this recording on its own with Format long" in said  # ok1 has none

    # cut at pauses as told: the transcript beside it is said to be unused, not counted as unreadable
    good_pairs(tmp_path / "long" / "raw", n=1)
    found = discover(tmp_path / "long", "long")
    assert found.errors == [] and any("ok0.txt: a transcript, not used when recordings are cut at pauses" in n
                                      for n in found.notes), found.notes


def test_a_table_saved_as_unicode_text_says_to_rename_it_tsv(tmp_path):
    """Excel's "Unicode Text" (UTF-16, tabs, .txt) was "a transcript with no audio", and nothing said what to do."""
    ds = tmp_path / "ds"
    good_pairs(ds / "raw", n=2)
    for p in sorted((ds / "raw").glob("*.txt")):
        p.unlink()
    (ds / "raw" / "list.txt").write_text(f"wav\ttext\nok0.wav\t{SENTS[0]}\nok1.wav\t{SENTS[1]}\n", encoding="utf-16")
    said = [e["message"] for e in discover(ds).errors]
    assert said == ['raw/list.txt: a table of transcripts (its columns are separated by tabs, as Excel\'s "Unicode '
                    'Text" saves): rename it list.tsv and prepare again, and it is read as one.']
    (ds / "raw" / "list.txt").rename(ds / "raw" / "list.tsv")
    assert [(it.id, it.text) for it in discover(ds).items] == [("ok0", SENTS[0]), ("ok1", SENTS[1])]


def test_a_wav_cut_short_says_the_file_did_not_finish_not_only_too_short(tmp_path):
    """A recording whose copy stopped part way read only "too_short 0.07 s": nothing said the file was broken."""
    src = good_pairs(tmp_path / "cut", n=2)
    whole = (src / "ok1.wav").read_bytes()
    (src / "ok1.wav").write_bytes(whole[:len(whole) // 3])
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "cut", src)
    rows = {r["id"]: r for r in load_manifest(ws, "cut")}
    assert "cut_short" in rows["ok1"]["flags"] and rows["ok1"]["excluded"] and not rows["ok0"]["flags"]
    said = rows["ok1"]["notes"]["cut_short"]
    assert said.startswith("the file ends at ") and "before the" in said and "copy it again from the original" in said
