"""Dataset preparation: every input kind, real audio (espeak-ng Amharic and generated signals)."""
from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import cli, espeak_amharic, sentences, serve_tab, tone, write_wav
from utils.audio import FeatureConfig, file_digest, load_audio, log_mel
from utils.datasets import features, load_manifest, load_report, prepare
from utils.datasets.sources import discover
from utils.datasets.split import assign_split
from utils.datasets.subtitles import parse_subtitles
from utils.events import StudioError, run_to_end
from utils.workspace import Workspace, read_json

SENTS = sentences(12)


def run(ws, name, source, **kw):
    kw.setdefault("workers", 1)
    return run_to_end(prepare(ws, name, source, **kw))


def speech(path: Path, i: int, voice: str = "am") -> Path:
    return espeak_amharic(SENTS[i % len(SENTS)], path, voice=voice)


def ljspeech(folder: Path, n: int = 4, speakers: list[str] | None = None) -> Path:
    lines = []
    for i in range(n):
        speech(folder / "wavs" / f"utt{i:03d}.wav", i)
        lines.append(f"utt{i:03d}|{speakers[i % len(speakers)]}|{SENTS[i]}" if speakers else f"utt{i:03d}|{SENTS[i]}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def recording_with_pauses(path: Path, tmp: Path, n: int = 3, pause: float = 1.0) -> tuple[Path, list[tuple[float, float]]]:
    """Several espeak sentences in one file with silence between; returns the sentence times."""
    parts, times, t = [], [], pause
    for i in range(n):
        a, sr = load_audio(speech(tmp / f"part{i}.wav", i), 24000)
        parts += [np.zeros(int(pause * 24000), np.float32), a]
        times.append((t, t + len(a) / 24000))
        t += len(a) / 24000 + pause
    parts.append(np.zeros(int(pause * 24000), np.float32))
    write_wav(path, np.concatenate(parts), 24000)
    return path, times


def srt_time(s: float) -> str:
    ms = int(round(s * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


# ------------------------------------------------------------------------------------- formats
def test_ljspeech_zip_becomes_24k_mono_clips_with_manifest_split_report_and_untouched_raw(tmp_path):
    src = ljspeech(tmp_path / "lj", 5)
    archive = tmp_path / "lj.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(src.rglob("*")):
            zf.write(p, p.relative_to(src).as_posix())
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "lj", archive)

    assert summary["clips"] == summary["usable_clips"] == 5 and summary["format"] == "ljspeech"
    ds = ws.dataset_dir("lj")
    assert file_digest(ds / "raw" / "lj.zip") == file_digest(archive)  # kept exactly as received
    rows = load_manifest(ws, "lj")
    assert {r["id"] for r in rows} == {f"utt{i:03d}" for i in range(5)}
    for r in rows:
        info = sf.info(str(ds / r["audio"]))
        assert (info.samplerate, info.channels, info.subtype) == (24000, 1, "PCM_16")
        assert r["text"] == SENTS[int(r["id"][3:])] and r["normalized"] and r["phonemes"]
        assert r["sha1"] == file_digest(ds / r["audio"]) and r["excluded"] is False and r["music"] is None
        assert abs(r["duration"] - info.frames / 24000) < 1e-3
        assert r["source"].startswith("raw/lj/wavs/")
    assert {r["split"] for r in rows} == {"train", "val"}
    report = json.loads((ds / "report.json").read_text())
    assert report["summary"]["hours"] > 0 and report["summary"]["clips"] == 5


def test_ljspeech_folder_with_speakers_stereo_flac_44k_is_downmixed_and_split_per_speaker(tmp_path):
    src = tmp_path / "multi"
    lines = []
    for i in range(24):
        a, sr = sf.read(str(speech(tmp_path / "tmp" / f"{i}.wav", i, "am+f2" if i % 2 else "am")))
        stereo = np.stack([a, 0.5 * a], axis=1)
        sf.write(str(src / "wavs" / f"s{i:02d}.flac") if (src / "wavs").mkdir(parents=True, exist_ok=True) is None else "",
                 stereo, sr)
        lines.append(f"s{i:02d}|{'hana' if i % 2 else 'abebe'}|{SENTS[i % len(SENTS)]}")
    (src / "metadata.csv").write_text("\n".join(lines), encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "multi", src)
    rows = load_manifest(ws, "multi")
    assert summary["speakers"] == 2 and len(rows) == 24
    assert {r["speaker"] for r in rows} == {"hana", "abebe"}
    for spk in ("hana", "abebe"):  # every speaker with >= 10 clips gets validation rows
        assert any(r["split"] == "val" for r in rows if r["speaker"] == spk)
    assert all(sf.info(str(ws.dataset_dir("multi") / r["audio"])).channels == 1 for r in rows)


@pytest.mark.parametrize("encoding,sep,suffix", [("utf-16", "\t", ".tsv"), ("utf-8-sig", ";", ".csv"),
                                                 ("utf-8", ",", ".csv")])
def test_csv_in_any_encoding_and_separator_is_read_and_missing_audio_is_named(tmp_path, encoding, sep, suffix):
    src = tmp_path / "csvset"
    rows = ["path" + sep + "transcript" + sep + "speaker"]
    for i in range(3):
        speech(src / "clips" / f"c{i}.wav", i)
        rows.append(f"clips/c{i}.wav{sep}{SENTS[i]}{sep}tigist")
    rows.append(f"clips/missing.wav{sep}{SENTS[5]}{sep}tigist")
    (src / f"list{suffix}").write_text("\n".join(rows) + "\n", encoding=encoding)
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "csv", src)
    assert summary["clips"] == 3 and summary["format"] == "csv" and summary["speakers"] == 1
    assert {r["text"] for r in load_manifest(ws, "csv")} == set(SENTS[:3])
    errors = load_report(ws, "csv")["errors"]
    assert any("missing.wav" in e["message"] and "row 5" in e["message"] for e in errors)


def test_ambiguous_csv_asks_for_columns_then_prepares_with_the_chosen_ones(tmp_path):
    src = tmp_path / "amb"
    lines = []
    for i in range(2):
        speech(src / f"a{i}.wav", i)
        lines.append(f"a{i}.wav,{SENTS[i]},{SENTS[i + 5]}")  # two text-like columns, no header
    (src / "data.csv").write_text("\n".join(lines), encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    with pytest.raises(StudioError, match="choose the audio and text columns .*--audio-column and --text-column"):
        run(ws, "amb", src)
    summary = run(ws, "amb", src, columns={"audio": "column 1", "text": "column 3"})
    assert summary["clips"] == 2
    assert {r["text"] for r in load_manifest(ws, "amb")} == {SENTS[5], SENTS[6]}
    # the command line had no way to choose: a dead end
    done = cli("prepare", str(src / "data.csv"), "--name", "amb2", "--workspace", str(ws.root), "--audio-column",
               "column 1", "--text-column", "column 2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert {r["text"] for r in load_manifest(ws, "amb2")} == {SENTS[0], SENTS[1]}


def test_lone_csv_brings_its_referenced_audio_into_raw(tmp_path):
    src = tmp_path / "outside"
    speech(src / "w" / "x.wav", 0)
    (src / "list.csv").write_text(f"audio,text\nw/x.wav,{SENTS[0]}\n../../etc/passwd,{SENTS[1]}\n", encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "lone", src / "list.csv")
    assert summary["clips"] == 1
    assert (ws.dataset_dir("lone") / "raw" / "outside" / "w" / "x.wav").exists()
    assert any("passwd" in e["message"] and "outside" in e["message"] for e in load_report(ws, "lone")["errors"])


def test_audio_and_txt_pairs_in_mp3_ogg_flac_with_orphans_reported(tmp_path):
    src = tmp_path / "pairs"
    for i, fmt in enumerate(["MP3", "OGG", "FLAC"]):
        a, sr = sf.read(str(speech(tmp_path / "t" / f"{i}.wav", i)))
        ext = {"MP3": ".mp3", "OGG": ".ogg", "FLAC": ".flac"}[fmt]
        src.mkdir(exist_ok=True)
        sf.write(str(src / f"p{i}{ext}"), a, 48000 if fmt != "MP3" else sr, format=fmt) if fmt != "MP3" else \
            sf.write(str(src / f"p{i}{ext}"), a, sr, format="MP3")
        (src / f"p{i}.txt").write_text(SENTS[i] + "\n", encoding="utf-8")
    speech(src / "notext.wav", 4)
    (src / "lonely.txt").write_text(SENTS[5], encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "pairs", src)
    rows = {r["id"]: r for r in load_manifest(ws, "pairs")}
    assert set(rows) == {"p0", "p1", "p2", "notext"} and summary["format"] == "pairs"
    assert rows["p1"]["text"] == SENTS[1] and not rows["p1"]["excluded"]
    assert "missing_text" in rows["notext"]["flags"] and rows["notext"]["excluded"]
    assert any("lonely.txt" in e["message"] and "no audio" in e["message"] for e in load_report(ws, "pairs")["errors"])


def test_ids_with_dots_of_their_own_find_their_audio_and_their_transcript(tmp_path):
    """spk1.utt0 in metadata.csv named no file (".utt0" was taken for its extension), and spk1.utt0.wav's
    transcript was looked for in spk1.txt."""
    lj, pairs = tmp_path / "lj", tmp_path / "pairs"
    for i in range(2):
        speech(lj / "wavs" / f"spk1.utt{i}.wav", i)
        speech(pairs / f"spk1.utt{i}.wav", i)
        (pairs / f"spk1.utt{i}.txt").write_text(SENTS[i], encoding="utf-8")
    (lj / "metadata.csv").write_text("".join(f"spk1.utt{i}|{SENTS[i]}\n" for i in range(2)), encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    for name, src in (("lj", lj), ("pairs", pairs)):
        run(ws, name, src)
        rows = {r["id"]: r for r in load_manifest(ws, name)}
        assert {i: r["text"] for i, r in rows.items()} == {"spk1.utt0": SENTS[0], "spk1.utt1": SENTS[1]}, name
        assert load_report(ws, name)["errors"] == [], name


def test_long_recording_with_srt_is_cut_at_cue_times_refined_by_vad(tmp_path):
    src = tmp_path / "talk"
    rec, times = recording_with_pauses(src / "talk.wav", tmp_path)
    # cues deliberately 0.2 s late at the start and early at the end: VAD moves the edges to the speech
    cues = [f"{i + 1}\n{srt_time(s + 0.2)} --> {srt_time(e - 0.2)}\n{SENTS[i]}\n" for i, (s, e) in enumerate(times)]
    (src / "talk.srt").write_text("\n".join(cues), encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "talk", src)
    rows = load_manifest(ws, "talk")
    assert summary["format"] == "subtitles" and [r["text"] for r in rows] == SENTS[:3]
    for r, (s, e) in zip(rows, times):
        assert abs(r["duration"] - (e - s)) < 0.45  # the whole sentence, not the late/early cue
        assert r["source"].startswith("raw/talk/talk.wav#t=")
    # prepared again: the recording is not cut again, nor its clips made again
    events = list(prepare(ws, "talk", None, workers=1))
    assert not [e for e in events if e.stage == "segment"]
    assert any("3 clip(s) already made" in e.message for e in events)
    assert load_manifest(ws, "talk") == rows


@pytest.mark.parametrize("layout", ["ljspeech", "csv"])
def test_subtitles_beside_a_transcript_table_cut_their_recording_and_unused_ones_are_named(tmp_path, layout):
    """A zip of transcribed clips with a lecture and its subtitles in a folder of their own (issue 46, item 1): the
    lecture is cut by its cues as when uploaded alone, not kept whole as one clip with no text."""
    src = ljspeech(tmp_path / "lj", 2)
    if layout == "csv":  # the same clips listed in a table of paths and texts
        (src / "metadata.csv").unlink()
        (src / "clips.csv").write_text("file,text\n" + "".join(f"wavs/utt{i:03d}.wav,{SENTS[i]}\n" for i in (0, 1)),
                                       encoding="utf-8")
    _, times = recording_with_pauses(src / "long" / "lecture_01.wav", tmp_path)
    cues = [f"{i + 1}\n{srt_time(s)} --> {srt_time(e)}\n{SENTS[i]}\n" for i, (s, e) in enumerate(times)]
    (src / "long" / "lecture_01.srt").write_text("\n".join(cues), encoding="utf-8")
    (src / "long" / "lecture_02.srt").write_text(cues[0], encoding="utf-8")  # its recording was left out
    archive = tmp_path / "upload.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(src.rglob("*")):
            zf.write(p, p.relative_to(src).as_posix())
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "mixed", archive, fmt="auto" if layout == "ljspeech" else layout)
    rows = {r["id"]: r for r in load_manifest(ws, "mixed")}
    assert summary["format"] == layout
    assert set(rows) == {"utt000", "utt001", "lecture_01-0001", "lecture_01-0002", "lecture_01-0003"}
    assert [rows[f"lecture_01-{i:04d}"]["text"] for i in (1, 2, 3)] == SENTS[:3]
    assert not any(r["excluded"] for r in rows.values())
    assert any(e["message"].startswith("raw/upload/long/lecture_02.srt: subtitles with no recording")
               for e in load_report(ws, "mixed")["errors"])
    if layout == "csv":  # left to find the format: the subtitles win, and the table left unread is named
        found = discover(ws.dataset_dir("mixed"))
        assert found.format == "subtitles" and any(e["message"].startswith("raw/upload/clips.csv: a transcript, not "
                                                                           "read") for e in found.errors)


def test_vtt_subtitles_are_parsed(tmp_path):
    vtt = tmp_path / "a.vtt"
    vtt.write_text("WEBVTT\n\nNOTE hi\n\n1\n00:00.500 --> 00:02.000 align:start\n<v Abebe>ሰላም</v>\n\n"
                   "00:00:03.000 --> 00:00:04.250\nደህና\nነህ\n", encoding="utf-8")
    cues = parse_subtitles(vtt)
    assert [(c.start, c.end, c.text) for c in cues] == [(0.5, 2.0, "ሰላም"), (3.0, 4.25, "ደህና ነህ")]


def test_long_recording_without_text_is_cut_by_vad_into_clips_for_transcription(tmp_path):
    src = tmp_path / "untranscribed"
    recording_with_pauses(src / "radio.wav", tmp_path, n=3, pause=1.2)
    ws = Workspace.open(tmp_path / "ws")
    summary = run(ws, "radio", src, fmt="long")
    rows = load_manifest(ws, "radio")
    assert summary["format"] == "long" and len(rows) >= 1
    assert all("missing_text" in r["flags"] and r["text"] == "" for r in rows)
    assert sum(r["duration"] for r in rows) > 3.0


# ------------------------------------------------------------------------- cache, resume, split
def test_features_are_vocos_mels_cached_by_content_and_config(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "f", ljspeech(tmp_path / "lj", 2))
    row = load_manifest(ws, "f")[0]
    ds = ws.dataset_dir("f")
    cfg = FeatureConfig()
    cached = ds / "features" / cfg.key() / f"{row['sha1'][:16]}.npy"
    assert cached.exists()  # precomputed during prepare
    mel = features(ws, "f", row, cfg)
    audio, _ = load_audio(ds / row["audio"])
    np.testing.assert_allclose(mel, log_mel(audio, cfg).numpy(), atol=1e-4)
    assert mel.shape == (100, cfg.frames(len(audio))) and mel.dtype == np.float32
    other = FeatureConfig(n_mels=80)
    assert features(ws, "f", row, other).shape[0] == 80
    assert (ds / "features" / other.key() / f"{row['sha1'][:16]}.npy").exists()
    # a different file at the same path gets a different entry (keyed by content, not path)
    write_wav(ds / row["audio"], tone(1.0), 24000)
    assert features(ws, "f", row, cfg).shape[1] == cfg.frames(24000)


def test_a_new_process_finds_the_clips_digests_without_hashing_the_audio_again(tmp_path, monkeypatch):
    """What a training start (or a loader worker) does: one stat per clip, no reading of the audio, while a
    clip replaced by hand is still recognised by its new size/mtime and hashed."""
    import importlib

    feat = importlib.import_module("utils.datasets.features")  # the module (the package exports a function of that name)

    ws = Workspace.open(tmp_path / "ws")
    run(ws, "d", ljspeech(tmp_path / "lj", 3))
    rows, cfg = load_manifest(ws, "d"), FeatureConfig()
    for memo in ("_DIGESTS", "_FRAMES", "_READ"):  # a fresh process
        monkeypatch.setattr(feat, memo, {})
    opened = []
    monkeypatch.setattr(feat.np, "load", lambda *a, **kw: opened.append(a[0]))  # no mel is read either,
    monkeypatch.setattr(feat.np.lib.format, "read_magic", lambda f: opened.append(f.name))  # not even its header
    hashed = []
    monkeypatch.setattr(feat, "file_digest", lambda path: hashed.append(Path(path).name) or "0" * 40)
    frames = [feat.feature_frames(ws, "d", r, cfg) for r in rows]
    assert hashed == [] and opened == []
    monkeypatch.undo()
    assert frames == [features(ws, "d", r, cfg).shape[-1] for r in rows]
    for memo in ("_DIGESTS", "_FRAMES", "_READ"):
        monkeypatch.setattr(feat, memo, {})
    monkeypatch.setattr(feat, "file_digest", lambda path: hashed.append(Path(path).name) or "0" * 40)
    write_wav(ws.dataset_dir("d") / rows[0]["audio"], tone(1.0), 24000)  # replaced outside the app
    features(ws, "d", rows[0], cfg)
    assert hashed == [Path(rows[0]["audio"]).name]


def test_rerun_skips_finished_clips_and_cancel_stops_then_resumes(tmp_path):
    import threading

    ws = Workspace.open(tmp_path / "ws")
    src = ljspeech(tmp_path / "lj", 4)
    cancel = threading.Event()
    events = []
    for ev in prepare(ws, "r", src, workers=1, cancel=cancel):
        events.append(ev)
        if ev.stage == "discover" and ev.level == "info":
            cancel.set()
    assert events[-1].stage == "cancelled" and "r" not in ws.list_datasets()
    assert run(ws, "r", None)["clips"] == 4
    (ws.dataset_dir("r") / "audio" / "utt002.wav").unlink()
    events = list(prepare(ws, "r", None, workers=1))
    assert any("3 clip(s) already made" in e.message for e in events)
    assert events[-1].result["clips"] == 4 and (ws.dataset_dir("r") / "audio" / "utt002.wav").exists()
    made = [e.message for e in events if e.stage == "clips" and e.done == 4]
    assert " of audio done, " in made[-1] and "left" not in made[-1]  # the one clip made again, and no time left


def test_a_long_preparation_says_hours_done_rate_and_time_left(monkeypatch):
    import importlib
    import itertools

    module = importlib.import_module("utils.datasets.prepare")  # the module, not the function of that name
    clock = itertools.chain([100.0], itertools.repeat(160.0))  # made at 100 s; 60 s later, 30 of 120 clips (each
    # 6 s of audio) are done
    monkeypatch.setattr(module.time, "perf_counter", lambda: next(clock))
    pace = module.Pace(120)
    for _ in range(30):
        pace.step(6.0)
    assert pace.said() == "3 min 0 s of audio done, 3.0 times as fast as it plays, about 3 min left"
    from utils.datasets.prepare import as_fast

    assert (as_fast(150.0), as_fast(0.5)) == ("150 times as fast as it plays", "2.0 times slower than it plays")


def test_a_tiny_dataset_says_its_minutes_and_seconds_not_zero_hours():
    """A dataset under six minutes was summed up as "0.00 of 0.00 h" (the amounts: utils.training.speed.say_hours)."""
    from utils.datasets.prepare import describe

    summary = {"usable_clips": 2, "clips": 3, "speakers": 1, "train_clips": 1, "val_clips": 1, "flags": {},
               "errors": 0}
    tiny = {**summary, "usable_hours": round(252 / 3600, 4), "hours": round(303 / 3600, 4)}  # as the report rounds
    assert describe(tiny).startswith("2 usable of 3 clip(s), 4 min 12 s of 5 min 3 s, 1 speaker(s)")
    assert ", 8 s of 9 s, " in describe({**summary, "usable_hours": 8 / 3600, "hours": 9 / 3600})
    assert ", 1.5 h of 200.0 h, " in describe({**summary, "usable_hours": 1.5, "hours": 200})


def test_process_pool_gives_the_same_clips_as_one_process(tmp_path, monkeypatch):
    import sys

    pipeline = sys.modules["utils.datasets.prepare"]  # the module (the package exports the function)
    monkeypatch.setattr(pipeline, "POOL_MIN_TASKS", 1)  # use the workers even for 4 clips
    src = ljspeech(tmp_path / "lj", 4)
    ws = Workspace.open(tmp_path / "ws")
    run(ws, "one", src, workers=1)
    run(ws, "two", src, workers=2)
    one = {r["id"]: r["sha1"] for r in load_manifest(ws, "one")}
    two = {r["id"]: r["sha1"] for r in load_manifest(ws, "two")}
    assert one == two and len(one) == 4


def test_split_is_stable_and_stratified_by_speaker():
    rows = [{"id": f"{s}{i}", "speaker": s} for s in "ab" for i in range(40)]
    assign_split(rows, 0.1)
    first = {r["id"]: r["split"] for r in rows}
    assert sum(v == "val" for k, v in first.items() if k.startswith("a")) == 4
    assert sum(v == "val" for k, v in first.items() if k.startswith("b")) == 4
    shuffled = list(reversed([dict(r) for r in rows]))
    assign_split(shuffled, 0.1)
    assert {r["id"]: r["split"] for r in shuffled} == first


def test_a_copy_of_a_held_out_clip_is_held_out_with_it():
    """A 48 kHz copy of a clip (same sentence, other audio) or a second take in training lets the model have heard
    what its quality is measured on; a dataset made of repeats keeps its training rows."""
    long = "ሰላም ለሁላችሁ ይሁን ዛሬ"
    rows = [{"id": f"r{i}", "speaker": "a", "text": f"ዓረፍተ ነገር ቁጥር {i}", "sha1": f"s{i}"} for i in range(40)]
    assign_split(rows, 0.05)
    held = [r for r in rows if r["split"] == "val"]
    assert len(held) == 2
    rows += [{"id": "take2", "speaker": "a", "text": held[0]["text"], "sha1": "other"},
             {"id": "resampled", "speaker": "a", "text": "", "sha1": held[1]["sha1"]},
             {"id": "short", "speaker": "a", "text": "ዓረፍተ ነገር", "sha1": "x"}]  # a short line said again is fine
    assign_split(rows, 0.05)
    split = {r["id"]: r["split"] for r in rows}
    assert split["take2"] == split["resampled"] == "val" and split["short"] == "train"
    assert sum(v == "val" for v in split.values()) == 4
    repeats = [{"id": f"p{i}", "speaker": "a", "text": long, "sha1": f"q{i}"} for i in range(12)]
    assign_split(repeats, 0.05)
    assert sum(r["split"] == "train" for r in repeats) == 11


def test_a_big_dataset_holds_out_at_most_500_clips_shared_among_its_speakers():
    """5 % of 200 hours would be 10 hours of speech never trained on."""
    rows = [{"id": f"{s}{i}", "speaker": s} for s, n in (("a", 15000), ("b", 5000)) for i in range(n)]
    assign_split(rows, 0.05)
    held = [r["speaker"] for r in rows if r["split"] == "val"]
    assert (held.count("a"), held.count("b")) == (375, 125)
    small = [{"id": f"c{i}", "speaker": "c"} for i in range(2000)]
    assign_split(small, 0.05)
    assert sum(r["split"] == "val" for r in small) == 100  # under the cap: the fraction, as before


def test_cli_prepare_prints_summary_and_exits_nonzero_only_when_nothing_usable(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    src = ljspeech(tmp_path / "lj", 2)
    cmd = [sys.executable, str(root / "app.py"), "prepare", "--workspace", str(tmp_path / "ws")]
    env = {**os.environ, "AMHARIC_TTS_WORKERS": "1"}
    ok = subprocess.run(cmd + [str(src), "--name", "cli", "--format", "ljspeech"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "2 usable of 2 clip(s)" in ok.stdout and (tmp_path / "ws" / "datasets" / "cli" / "report.json").exists()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.wav").write_text("not audio at all")
    bad = subprocess.run(cmd + [str(tmp_path / "junk"), "--name", "junk"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "notes.wav" in bad.stdout + bad.stderr
    assert "No clip could be made from junk, so no dataset was made" in bad.stderr


def test_batch_feature_pass_matches_the_on_demand_cache(tmp_path):
    """The GPU pass (run here on the CPU device) writes the same entries `features` computes."""
    from utils.datasets.features import cache_path, precompute_gpu

    ws = Workspace.open(tmp_path / "ws")
    run(ws, "g", ljspeech(tmp_path / "lj", 3), feature_cfg=None)  # no mels during prepare
    rows, ds, cfg = load_manifest(ws, "g"), ws.dataset_dir("g"), FeatureConfig()
    assert not list(ds.glob("features/*/*.npy"))  # no mel entries yet (the digest index is there)
    progress = list(precompute_gpu(ds, rows, cfg, "cpu"))
    assert progress[-1] == (3, 3)
    for r in rows:
        stored = np.load(cache_path(ds, r["sha1"], cfg))
        audio, _ = load_audio(ds / r["audio"])
        np.testing.assert_allclose(stored, log_mel(audio, cfg).numpy(), atol=1e-4)
        cache_path(ds, r["sha1"], cfg).unlink()
    list(precompute_gpu(ds, rows, cfg, "cpu", half=True))  # a dataset prepared with the mel cache at half precision
    for r in rows:
        half = np.load(cache_path(ds, r["sha1"], cfg))
        audio, _ = load_audio(ds / r["audio"])
        assert half.dtype == np.float16 and np.abs(half - log_mel(audio, cfg).numpy()).max() < 0.01


def test_a_source_that_does_not_exist_is_refused_before_anything_is_estimated_or_made(tmp_path, capsys):
    """`prepare --name x missing.zip` said it would take 0 bytes and began copying 1 upload before saying the file
    was not there."""
    import app

    ws = Workspace.open(tmp_path / "ws")
    assert app.main(["prepare", "--workspace", str(ws.root), "--name", "gone", str(tmp_path / "nonexist.zip")]) == 2
    said = capsys.readouterr()
    assert "nonexist.zip: not found: give a zip, a folder or files that exist" in said.err
    assert "Preparing will take" not in said.out + said.err and "upload(s)" not in said.out + said.err
    assert not ws.dataset_dir("gone").exists()


# ---------------------------------------------------------------------------- adding to a dataset
def pairs(folder: Path, ids: list[str], first: int = 0) -> Path:
    """Audio + .txt pairs of the fixture's sentences, one a clip."""
    for i, uid in enumerate(ids, first):
        speech(folder / f"{uid}.wav", i)
        (folder / f"{uid}.txt").write_text(SENTS[i % len(SENTS)], encoding="utf-8")
    return folder


def test_a_second_days_recordings_say_how_many_clips_were_added_to_the_dataset(tmp_path, monkeypatch, capsys):
    """Preparing more recordings into a dataset said only the totals: not how many clips were new."""
    import app

    monkeypatch.setenv("AMHARIC_TTS_WORKERS", "1")
    ws = Workspace.open(tmp_path / "ws")
    first = list(prepare(ws, "abebe", ljspeech(tmp_path / "day1", 3), workers=1))
    assert first[-1].message.startswith("3 usable of 3 clip(s)")  # a first import says what it always said
    assert re.match(r"3 usable of 3 clip\(s\), (\d+ min )?\d+ s of (\d+ min )?\d+ s, ", first[-1].message)
    assert "new_clips" not in first[-1].result
    day2 = tmp_path / "day2"
    for i, uid in ((3, "b0"), (4, "b1")):
        speech(day2 / "wavs" / f"{uid}.wav", i)
    (day2 / "metadata.csv").write_text(f"b0|{SENTS[3]}\nb1|{SENTS[4]}\n", encoding="utf-8")
    assert app.main(["prepare", "--workspace", str(ws.root), "--name", "abebe", str(day2)]) == 0  # the CLI
    said = capsys.readouterr().out
    assert "2 new clip(s) added to abebe (3 before, 5 now); 5 usable of 5 clip(s)" in said
    assert '"new_clips": 2' in said and '"clips_before": 3' in said
    again = list(prepare(ws, "abebe", None, workers=1))[-1]  # the tab's Prepare on what raw/ holds: nothing new
    assert again.message.startswith("0 new clip(s) added to abebe (5 before, 5 now); ")
    assert again.result["new_clips"] == 0 and again.result["clips"] == 5
    # the first day's recordings again (a transcript file corrected): their clips repeat, and how to replace is said
    fixed = list(prepare(ws, "abebe", ljspeech(tmp_path / "fixed", 3), workers=1))[-1]
    assert fixed.result["new_clips"] == 3 and "all of the new clips repeat recordings it already had" in fixed.message
    assert "python app.py delete-dataset abebe) and prepare the upload again" in fixed.message


def test_an_edited_csv_export_put_back_as_an_upload_is_named_and_not_read_as_rows(tmp_path):
    """A dataset's rows exported as a CSV, edited and uploaded again under its name were silently skipped (beside a
    metadata.csv) or read as a transcript table that took its text alone and changed the format (beside pairs)."""
    from utils.datasets import export_rows
    from webui.dataset import run_prepare, summary_markdown

    ws = Workspace.open(tmp_path / "ws")
    run(ws, "abebe", pairs(tmp_path / "day1", ["a0", "a1", "a2"]))
    rows = load_manifest(ws, "abebe")
    export = export_rows(ws, "abebe", tmp_path / "abebe.csv")
    export.write_text(export.read_text(encoding="utf-8-sig").replace(rows[0]["text"], "ሰላም ነው"), encoding="utf-8-sig")
    given = export.read_bytes()
    log = list(run_prepare(ws, [str(export)], "", "abebe", "auto", "phoneme", None, None, None))[-1]  # the tab
    ds = ws.dataset_dir("abebe")
    assert ("raw/abebe.csv: looks like the studio's CSV export of abebe's rows (its columns are the export's), so it "
            "was not read back as rows and its edits are not in the dataset") in log
    assert f"`python app.py export-dataset abebe abebe.jsonl`), edit that file and put it in {ds} as manifest.jsonl" in log
    assert "0 new clip(s) added to abebe (3 before, 3 now)" in log
    assert "raw/abebe.csv: looks like the studio's CSV export" in summary_markdown(ws, "abebe")  # stays in the summary
    assert load_manifest(ws, "abebe") == rows and load_report(ws, "abebe")["summary"]["format"] == "pairs"
    assert (ds / "raw" / "abebe.csv").read_bytes() == given and export.read_bytes() == given  # nothing lost or changed
    # a dataset made from a CSV before prepare.json named its tables: its table may be such an export, read as before
    from utils.datasets.prepare import exports_put_back

    last = {k: v for k, v in read_json(ds / "prepare.json").items() if k != "tables"}
    assert exports_put_back(ds, {**last, "format": "pairs"}) == (ds / "raw" / "abebe.csv",)
    assert exports_put_back(ds, {**last, "format": "csv"}) == ()




def test_a_pairs_dataset_an_old_version_switched_to_csv_is_prepared_again_from_its_pairs(tmp_path):
    """A pairs dataset whose prepare.json an older version set to csv (an export of its rows put back beside the
    recordings was read as its table) read the export's text alone on a re-run from raw/, and failed once the export
    was gone ("No .csv or .tsv file was found in the upload")."""
    from utils.datasets import export_rows
    from utils.workspace import atomic_write_json

    ws = Workspace.open(tmp_path / "ws")
    run(ws, "abebe", pairs(tmp_path / "day1", ["a0", "a1", "a2"]))
    ds, rows = ws.dataset_dir("abebe"), load_manifest(ws, "abebe")
    export = export_rows(ws, "abebe", ds / "raw" / "abebe.csv")
    export.write_text(export.read_text(encoding="utf-8-sig").replace(rows[0]["text"], "ሰላም ነው"), encoding="utf-8-sig")
    old_bug = {k: v for k, v in read_json(ds / "prepare.json").items() if k != "tables"} | {"format": "csv"}
    files = lambda: {p: p.read_bytes() for p in (ds / "raw").rglob("*") if p.is_file()}
    for export_there in (True, False):
        if not export_there:
            export.unlink()
        given = files()
        atomic_write_json(ds / "prepare.json", old_bug)
        events = list(prepare(ws, "abebe", None, workers=1))
        said = "\n".join(e.message for e in events)
        assert (f"{ds / 'prepare.json'} said abebe is read from a CSV table, but raw/ holds 3 recording(s) with a .txt "
                "transcript") in said
        assert ("raw/abebe.csv: looks like the studio's CSV export" in said) == export_there
        assert events[-1].message.startswith("0 new clip(s) added to abebe (3 before, 3 now); 3 usable of 3 clip(s)")
        assert load_manifest(ws, "abebe") == rows and read_json(ds / "prepare.json")["format"] == "pairs"
        assert files() == given  # nothing the curator gave is changed or lost

def test_an_export_with_a_column_deleted_or_reordered_is_still_the_export_and_a_transcript_table_is_not(tmp_path):
    """An export saved back by a spreadsheet with one column deleted ("flags", "messages") was taken for a new table
    of clips: every export column had to be in the header."""
    from utils.datasets.manifest import EXPORT_COLUMNS, is_export_csv

    def table(name: str, header: list[str] | None, sep: str = ",", bom: bool = True) -> Path:
        lines = ([sep.join(header)] if header is not None else []) + ["a0|ሰላም ነው"]
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8-sig" if bom else "utf-8")
        return tmp_path / name

    for gone in ("flags", "messages", "review", "id", "audio"):
        assert is_export_csv(table(f"no-{gone}.csv", [c for c in EXPORT_COLUMNS if c != gone])), gone
    assert is_export_csv(table("reordered.csv", [f'"{c}"' for c in reversed(EXPORT_COLUMNS)], sep=";", bom=False))
    assert is_export_csv(table("two-gone.csv", [c for c in EXPORT_COLUMNS if c not in ("flags", "messages")]))
    ordinary = {"file_text.csv": ["file", "text"], "path_transcript.csv": ["path", "transcript", "speaker"],
                "metadata.csv": None,  # LJSpeech: no header
                "speakers.tsv": ["audio", "text", "speaker"],
                "a_manifest.csv": ["id", "audio", "text", "normalized", "phonemes", "duration", "speaker", "split"],
                "its_own_flags.csv": ["id", "audio", "text", "flags"]}
    for name, header in ordinary.items():
        assert not is_export_csv(table(name, header, sep="\t" if name.endswith(".tsv") else ",")), name

def test_a_day_two_recording_under_a_day_one_id_does_not_take_its_decisions(tmp_path):
    """Same-named files in two uploads got their ids in the order of the folders' names: day two's `alpha/u0` took the
    id u0 from day one's `zeta/u0`, whose Exclude then fell on the new recording (and the old one became u0-dup2)."""
    from utils.datasets.curate import apply_edits

    ws = Workspace.open(tmp_path / "ws")
    run(ws, "abebe", pairs(tmp_path / "zeta", ["u0", "u1"]))
    first = {r["id"]: r for r in load_manifest(ws, "abebe")}
    apply_edits(ws, "abebe", [{"id": "u0", "action": "exclude"}])
    run(ws, "abebe", pairs(tmp_path / "alpha", ["u0"], first=5))
    rows = {r["id"]: r for r in load_manifest(ws, "abebe")}
    assert rows["u0"]["source"] == first["u0"]["source"] == "raw/zeta/u0.wav"
    assert rows["u0"]["excluded"] and rows["u0"]["review"] == "exclude"  # the decision stays with its recording
    new = rows["alpha_u0"]  # named after its folder, and trained on: not a duplicate left out
    assert new["source"] == "raw/alpha/u0.wav" and not new["review"] and not new["excluded"]
    assert new["text"] == SENTS[5 % len(SENTS)]


def test_a_summary_of_rows_brought_without_a_preparation_names_no_format(tmp_path):
    """Rows made without the importer (a helper, a manifest put in place) have no format: the summary said "format
    None"; a prepared dataset still names its own."""
    from tests.helpers import make_dataset
    from webui.dataset import summary_markdown

    ws = make_dataset(tmp_path / "ws", name="brought", n_train=3, n_val=1, max_chars=30)
    said = summary_markdown(ws, "brought")
    assert "**4** of 4 clips" in said and "format" not in said.split("\n")[1]
    run(ws, "abebe", pairs(tmp_path / "day1", ["a0", "a1"]))
    assert summary_markdown(ws, "abebe").split("\n")[1].endswith(" · format pairs")


def test_deleting_a_dataset_names_its_runs_first_then_leaves_its_runs_and_voices_speaking(tiny_runs, tmp_path):
    from utils import inference
    from webui import dataset as tab

    ws = tiny_runs
    copy = Workspace.open(tmp_path / "copy")  # a copy of the module's workspace: the other tests keep theirs
    shutil.rmtree(copy.root)
    shutil.copytree(ws.root, copy.root, ignore=shutil.ignore_patterns("all-excluded"))
    inference.export_voice(copy, "one", "kept", vocoder="griffin-lim")
    shutil.copytree(copy.run_dir("one"), copy.run_dir("am-transcript-check"))  # as a transcript check leaves it

    proc = cli("delete-dataset", "am", "--workspace", str(copy.root))
    assert proc.returncode == 2 and "Runs trained on it: " in proc.stderr and "--yes" in proc.stderr
    assert {"one", "f5"} <= set(proc.stderr.split("Runs trained on it: ")[1].split(".")[0].split(", "))
    assert copy.dataset_dir("am").is_dir()  # nothing gone without the yes
    with serve_tab(tab, copy, "Dataset") as client:
        said, picker, tick = client.predict("am", False, api_name="/dataset_delete")
        assert "Not done" in said and "one" in said and copy.dataset_dir("am").is_dir()
        said, picker, tick = client.predict("am", True, api_name="/dataset_delete")
    assert said.startswith("Deleted dataset am") and tick is False
    assert not copy.dataset_dir("am").exists() and "am" not in copy.list_datasets()
    assert not copy.run_dir("am-transcript-check").exists()  # the check's own run went with its dataset
    assert copy.run_dir("one").is_dir() and copy.run_dir("f5").is_dir() and copy.voice_dir("kept").is_dir()
    for voice in ("kept", "runs/f5/checkpoints/step-1"):  # the exported Matcha voice; the F5 one carries its prompt
        wave, sr, info = inference.synthesize(copy, voice, "ሰላም ነው።", steps=2, vocoder="griffin-lim")
        assert len(wave) > 0.1 * sr and np.isfinite(wave).all(), voice
