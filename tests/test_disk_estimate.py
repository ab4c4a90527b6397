"""The disk a dataset will take, said before preparation: estimated from headers and sizes, checked against what
preparation really writes (espeak-ng Amharic), and a refusal before anything is written when the disk is short."""
from __future__ import annotations

import os
import shutil
import zipfile
from collections import namedtuple
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf

from tests.helpers import espeak_amharic, sentences, tone, write_wav
from utils.datasets import disk, prepare
from utils.datasets.config import PrepareConfig
from utils.events import StudioError, run_to_end
from utils.workspace import Workspace
from webui import dataset as tab
from webui.context import AppContext

SENTS = sentences(8)
TOLERANCE = 0.25  # clips and mels are counted from the whole recordings; trimming makes the real ones smaller
Usage = namedtuple("Usage", "total used free")


def ljspeech(folder: Path, n: int = 6) -> Path:
    for i in range(n):
        espeak_amharic(SENTS[i], folder / "wavs" / f"utt{i}.wav")
    (folder / "metadata.csv").write_text("".join(f"utt{i}|{SENTS[i]}\n" for i in range(n)), encoding="utf-8")
    return folder


def zipped(folder: Path, archive: Path, method=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(archive, "w", method) as zf:
        for p in sorted(folder.rglob("*")):
            zf.write(p, p.relative_to(folder).as_posix())
    return archive


def written(folder: Path) -> int:
    """Bytes on disk (whole blocks, as du counts) of the files under `folder` that preparation wrote: a hard link
    to an upload (several names, one file) took no new space and is left out."""
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            st = os.lstat(os.path.join(base, name))
            total += st.st_blocks * 512 if st.st_nlink == 1 else 0
    return total


def short_disk(monkeypatch, free: int, total: int = 100 * 10**9) -> None:
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: Usage(total, total - free, free))


def test_the_estimate_of_each_part_is_close_to_what_preparation_writes(tmp_path):
    archive = zipped(ljspeech(tmp_path / "lj"), tmp_path / "lj.zip")
    ws = Workspace.open(tmp_path / "ws")
    est = disk.estimate([archive], ws.root)
    run_to_end(prepare(ws, "lj", archive, workers=1))
    ds = ws.dataset_dir("lj")
    (mel_dir,) = [p for p in (ds / "features").iterdir() if p.is_dir()]
    real = {"raw": written(ds / "raw"), "clips": written(ds / "audio"), "mels": written(mel_dir)}

    assert est["clips"] == 6 and est["linked"] == archive.stat().st_size  # the zip itself is linked, not copied
    assert "(a zip as received, beside its unpacked files) take no more room" in disk.describe(est)
    for part, size in real.items():  # clips and mels: never under, at most a quarter over
        low = size if part != "raw" else size * (1 - TOLERANCE)
        assert low <= est["parts"][part] <= size * (1 + TOLERANCE), (part, est["parts"][part], size)
    assert abs(est["total"] - written(ds)) <= TOLERANCE * written(ds)


def test_zip_members_are_measured_from_their_first_bytes_without_extracting(tmp_path):
    up = tmp_path / "up"
    wav = espeak_amharic(SENTS[0], up / "a.wav")
    sf.write(str(up / "b.flac"), sf.read(str(wav))[0], 22050)
    (up / "c.mp3").write_bytes(b"\xff\xfb" + bytes(7998))  # 8000 bytes: a size, no length in the header read
    (up / "a.txt").write_text(SENTS[0], encoding="utf-8")
    archive = zipped(up, tmp_path / "up.zip", zipfile.ZIP_STORED)
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as zf:
        zf.write(wav, "deflated/d.wav")
    before = sorted(tmp_path.rglob("*"))

    est = disk.estimate([archive], tmp_path)
    seconds = sf.info(str(wav)).duration
    assert est["seconds"] == pytest.approx(3 * seconds + 8000 * 8 / disk.GUESS_BITRATE, rel=1e-6)
    assert est["clips"] == 4 and est["guessed"] == ["up.zip:c.mp3"] and not est["unreadable"]
    assert est["parts"]["raw"] >= sum(i.file_size for i in zipfile.ZipFile(archive).infolist())  # extracted anew
    assert "c.mp3" in disk.describe(est) and "guessed from their size" in disk.describe(est)
    assert sorted(tmp_path.rglob("*")) == before  # nothing was extracted


def test_an_unreadable_file_is_named_and_left_out_without_stopping_the_estimate(tmp_path):
    up = tmp_path / "up"
    good = write_wav(up / "good.wav", tone(2.0), 24000)
    (up / "broken.wav").write_bytes(b"this is not audio" * 100)
    (up / "empty.flac").write_bytes(b"")
    (up / "notes.txt").write_text("ሰላም", encoding="utf-8")

    est = disk.estimate([up, tmp_path / "missing.zip"], tmp_path)
    assert est["seconds"] == pytest.approx(sf.info(str(good)).duration) and est["clips"] == 1
    assert {u.split(" ")[0] for u in est["unreadable"]} == {"up/broken.wav", "up/empty.flac", "missing.zip"}
    said = disk.describe(est)
    assert "3 file(s) cannot be read and are not counted" in said and "up/broken.wav (not readable audio" in said


def test_preparation_refuses_before_writing_anything_when_the_disk_is_short(tmp_path, monkeypatch):
    src = ljspeech(tmp_path / "lj", 2)
    ws = Workspace.open(tmp_path / "ws")
    short_disk(monkeypatch, free=200_000)

    with pytest.raises(StudioError) as refused:
        run_to_end(prepare(ws, "lj", src, workers=1))
    said = str(refused.value)
    assert "Not enough free disk to prepare 'lj'" in said and "200 kB free" in said and "Nothing was written" in said
    need = disk.estimate([src], ws.root)["total"]
    assert f"needs about {disk._gb(need)}" in said and disk.HALF_MELS_CHOICE in said
    assert disk.DROP_UPLOADS_CHOICE not in said  # the uploads are linked, not copied: dropping them saves nothing
    assert not ws.dataset_dir("lj").exists()


def test_the_command_line_says_the_estimate_first_and_refuses_on_a_short_disk(tmp_path, monkeypatch, capsys):
    import app

    src = write_wav(tmp_path / "rec.wav", tone(3.0), 24000)
    ws = tmp_path / "ws"
    short_disk(monkeypatch, free=1000)
    assert app.main(["prepare", "--workspace", str(ws), str(src), "--name", "r"]) == 2
    assert "Not enough free disk" in capsys.readouterr().err and not (ws / "datasets" / "r").exists()

    short_disk(monkeypatch, free=50 * 10**9)  # roomy, whatever the machine running the test has left
    monkeypatch.setenv("AMHARIC_TTS_WORKERS", "1")
    app.main(["prepare", "--workspace", str(ws), str(src), "--name", "r"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("disk Preparing will take about") and "free where the workspace is" in first


def test_a_disk_left_nearly_full_is_said_with_what_would_shrink_the_dataset(tmp_path, monkeypatch):
    write_wav(tmp_path / "up" / "rec.wav", tone(3.0), 24000)
    src = zipped(tmp_path / "up", tmp_path / "up.zip")  # its members are extracted: a copy that costs space
    need = disk.estimate([src], tmp_path)["total"]
    short_disk(monkeypatch, free=need + 10**6, total=10**9)  # fits, and leaves 1 MB of a 1 GB disk

    est = disk.estimate([src], tmp_path)
    said = disk.describe(est)
    assert est["fits"] and est["tight"] and "That leaves little room" in said
    short_disk(monkeypatch, free=need + 24 * 10**9, total=270 * 10**9)  # 9% of the disk: room for any run
    assert not disk.estimate([src], tmp_path)["tight"]
    alt, parts = est["alternatives"], est["parts"]
    half = disk.estimate([src], tmp_path, cfg=PrepareConfig(half_mels=True))
    assert alt["half_mels"] == half["total"] and half["parts"]["mels"] < 0.6 * parts["mels"]  # .npy headers stay
    assert alt["without_raw"] == est["total"] - parts["raw"] - parts["decoded"]
    assert disk.HALF_MELS_CHOICE in said and disk.DROP_UPLOADS_CHOICE in said
    assert "That does not fit" in disk.describe({**est, "fits": False})

    chosen = disk.estimate([src], tmp_path, cfg=PrepareConfig(half_mels=True, keep_uploads=False))
    assert chosen["after"] == alt["both"] and chosen["mel_dtype"] == "float16"
    said = disk.describe({**chosen, "tight": True})
    assert "mel cache (16-bit)" in said and "Once prepared, the copy of the uploads is deleted" in said
    assert disk.HALF_MELS_CHOICE not in said and disk.DROP_UPLOADS_CHOICE not in said  # both taken already


def test_the_dataset_tab_shows_the_estimate_once_files_are_chosen_or_a_path_typed(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    files = [str(espeak_amharic(SENTS[i], tmp_path / "up" / f"u{i}.wav")) for i in range(2)]
    shutil.copytree(tmp_path / "up", ws.uploads / "up")

    by_files, by_path = tab.disk_line(ws, files, ""), tab.disk_line(ws, None, "uploads/up")
    for line in (by_files, by_path):
        assert line.startswith("Preparing will take about **") and "up to 2 clips" in line  # a file without text or speech makes none
        assert f"free where the workspace is ({ws.root})" in line
    assert tab.disk_line(ws, None, "") == "" and "outside the workspace" in tab.disk_line(ws, None, "../up")
    with gr.Blocks() as demo:
        tab.build(AppContext(ws))
    assert "dataset_disk" in {getattr(fn, "api_name", None) for fn in demo.fns.values()}


def test_the_size_choices_halve_the_mel_cache_and_drop_the_uploads_copy_once_prepared(tmp_path, monkeypatch, capsys):
    import app
    from utils.audio import FeatureConfig, load_audio
    from utils.datasets import load_manifest
    from utils.datasets.features import features, mel_numpy

    monkeypatch.setenv("AMHARIC_TTS_WORKERS", "1")
    archive = zipped(ljspeech(tmp_path / "lj", 3), tmp_path / "lj.zip")
    ws = Workspace.open(tmp_path / "ws")
    assert app.main(["prepare", "--workspace", str(ws.root), str(archive), "--name", "small", "--half-mels",
                     "--drop-uploads"]) == 0
    said = capsys.readouterr().out
    assert "mel cache (16-bit)" in said and "copy of the uploads in raw/" in said and "was deleted" in said
    ds = ws.dataset_dir("small")
    assert not [p for p in (ds / "raw").rglob("*") if p.is_file()] and archive.exists()  # the user's zip stays
    cache = [p for p in (ds / "features").rglob("*.npy")]
    assert len(cache) == 3 and all(np.load(p).dtype == np.float16 for p in cache)
    row = load_manifest(ws, "small")[0]
    read = features(ws, "small", row)
    full = mel_numpy(load_audio(ds / row["audio"])[0], FeatureConfig())
    assert read.dtype == np.float32 and np.abs(read - full).max() < 0.01  # training reads it back as 32-bit

    with pytest.raises(StudioError, match="without keeping a copy of its uploads"):
        run_to_end(prepare(ws, "small"))  # a re-run from raw/ says why it cannot be, and what to do


def test_dropping_the_uploads_never_touches_a_data_folder_read_in_place(tmp_path):
    from utils.datasets.config import PrepareConfig

    drive = tmp_path / "drive"
    corpus = ljspeech(drive / "corpus", 2)
    before = sorted((p.relative_to(corpus), p.read_bytes()) for p in corpus.rglob("*") if p.is_file())
    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "d", corpus, in_place=(drive,), workers=1, cfg=PrepareConfig(keep_uploads=False)))
    assert sorted((p.relative_to(corpus), p.read_bytes()) for p in corpus.rglob("*") if p.is_file()) == before
    assert any(p.is_symlink() for p in (ws.dataset_dir("d") / "raw").iterdir())  # the link stays: it cost nothing
    run_to_end(prepare(ws, "d", workers=1))  # so the dataset can still be prepared again from it


def test_small_sizes_are_never_said_as_zero():
    """"0 kB of uploads are already on that disk and are linked": a few hundred bytes (a subtitle file) said as
    nothing."""
    from utils.datasets import disk

    assert disk._gb(300) == "300 bytes" and disk._gb(2_500) == "2 kB" and disk._gb(3e6) == "3 MB"
    assert disk._gb(2.5 * disk.GB) == "2.5 GB"


def test_uploads_copied_from_other_disks_and_linked_ones_are_told_apart(tmp_path):
    """"copy of the uploads 3 MB ... 2 MB of uploads are already on that disk and are linked, not copied": the
    curator read a copy, then that nothing was copied."""
    here = tmp_path / "ws" / "uploads" / "pairs"  # on the workspace's disk: linked
    espeak_amharic(sentences(1)[0], here / "a.wav")
    est = disk.estimate([here], tmp_path / "ws")
    est = {**est, "parts": {**est["parts"], "raw": 3_000_000}}  # and 3 MB uploaded from another disk
    said = disk.describe(est)
    assert "uploads unpacked or copied from other disks 3 MB" in said
    assert f"The {disk._gb(est['linked'])} of uploads already on the workspace's disk take no more room: the dataset " \
           "links to them." in said and "linked, not copied" not in said  # a folder: no zip to speak of


def test_the_system_tab_says_the_free_disk_in_the_dataset_tabs_unit(tmp_path, monkeypatch):
    """The System tab said 24.0 GiB free where the Dataset tab's estimate said 25.8 GB for the same disk: one unit
    (decimal GB, as disks are sold) and one figure in both places."""
    from utils import hardware
    from webui.system import hardware_card

    short_disk(monkeypatch, free=25_800_000_000, total=270 * 10**9)
    report = hardware.detect(tmp_path)
    assert "**Free disk** 25.8 GB" in hardware_card(report) and disk._gb(25_800_000_000) == "25.8 GB"
    assert "free disk: 25.8 GB" in hardware.describe(report)
