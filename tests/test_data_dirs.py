"""Folders outside the workspace that the owner names at start (--data-dir): the Dataset tab prepares from them by
path; nothing else outside the workspace can be read from the page."""
from __future__ import annotations

import os

import pytest

import app
from tests.helpers import espeak_amharic, sentences
from utils.events import StudioError
from utils.workspace import Workspace, readable
from webui import dataset as tab

SENTS = sentences(2)


def pairs(folder, n=2):
    for i in range(n):
        espeak_amharic(SENTS[i], folder / f"a{i}.wav")
        (folder / f"a{i}.txt").write_text(SENTS[i], encoding="utf-8")
    return folder


def test_a_named_data_folder_is_prepared_by_path_and_other_folders_are_refused(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    drive = tmp_path / "drive"
    corpus = pairs(drive / "corpus")
    with pytest.raises(StudioError, match="outside the workspace: copy it into the workspace, or start the app "
                                          "with --data-dir"):
        list(tab.run_prepare(ws, None, str(corpus), "d", "auto", "phoneme", None, None, None))
    logs = list(tab.run_prepare(ws, None, str(corpus), "d", "auto", "phoneme", None, None, None,
                                data_dirs=(drive,)))
    assert "2 usable of 2 clip(s)" in logs[-1]
    assert sorted(p.name for p in corpus.iterdir()) == ["a0.txt", "a0.wav", "a1.txt", "a1.wav"]  # left as it was
    assert tab.disk_line(ws, None, str(corpus), (drive,)).startswith("Preparing will take about")
    assert "start the app with --data-dir" in tab.disk_line(ws, None, str(corpus))  # without it: said, not read

    elsewhere = pairs(tmp_path / "private", 1)
    with pytest.raises(StudioError, match=f"outside the workspace or {drive}"):
        readable(ws, str(elsewhere), (drive,))
    (drive / "escape").symlink_to(elsewhere)  # a link inside the data folder that leads out of it
    with pytest.raises(StudioError, match="outside"):
        readable(ws, str(drive / "escape"), (drive,))
    assert readable(ws, "uploads", (drive,)) == ws.uploads  # relative: in the workspace


def test_data_folders_come_from_the_command_line_or_the_environment_and_must_exist(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    monkeypatch.setenv(app.DATA_DIRS_ENV, f"{a}{os.pathsep}{b}")
    args = app.build_parser().parse_args(["--data-dir", str(tmp_path)])
    assert app.data_folders(args.data_dir) == (a, b, tmp_path)
    with pytest.raises(StudioError, match="--data-dir .*nowhere: no such folder"):
        app.data_folders([str(tmp_path / "nowhere")])


def test_a_data_folder_is_read_in_place_prepared_again_and_left_whole(tmp_path):
    from utils.datasets import deletion
    from utils.datasets import load_manifest, prepare
    from utils.events import run_to_end

    ws = Workspace.open(tmp_path / "ws")
    drive = tmp_path / "drive"
    corpus = pairs(drive / "corpus")
    before = {p.name: p.read_bytes() for p in corpus.iterdir()}
    line = tab.disk_line(ws, None, str(corpus), (drive,))
    assert "read where they are, not copied" in line and "copy of the uploads" not in line
    logs = list(tab.run_prepare(ws, None, str(corpus), "d", "auto", "phoneme", None, None, None, data_dirs=(drive,)))
    assert "2 usable of 2 clip(s)" in logs[-1]
    link = ws.dataset_dir("d") / "raw" / "corpus"
    assert link.is_symlink() and link.resolve() == corpus.resolve()  # linked, not copied
    assert {r["source"] for r in load_manifest(ws, "d")} == {"raw/corpus/a0.wav", "raw/corpus/a1.wav"}
    (corpus / "a1.txt").write_text(SENTS[0], encoding="utf-8")  # the curator fixes a transcript on the drive
    assert run_to_end(prepare(ws, "d", None))["clips"] == 2  # prepared again: read through the link
    assert load_manifest(ws, "d")[1]["text"] == SENTS[0]
    (corpus / "a1.txt").write_bytes(before["a1.txt"])
    deletion.delete_dataset(ws, "d", confirmed=True)
    assert not ws.dataset_dir("d").exists() and {p.name: p.read_bytes() for p in corpus.iterdir()} == before


def test_a_link_inside_a_folder_read_in_place_is_not_followed(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    drive = tmp_path / "drive"
    corpus = pairs(drive / "corpus", 1)
    secret = pairs(tmp_path / "secret", 2)
    (corpus / "more").symlink_to(secret)  # would lead out of the data folder
    logs = list(tab.run_prepare(ws, None, str(corpus), "d", "auto", "phoneme", None, None, None, data_dirs=(drive,)))
    assert "1 usable of 1 clip(s)" in logs[-1]


def test_the_command_line_prepares_a_folder_in_place(tmp_path):
    ws_root, corpus = tmp_path / "ws", pairs(tmp_path / "drive" / "corpus")
    assert app.main(["prepare", str(corpus), "--name", "d", "--in-place", "--workspace", str(ws_root)]) == 0
    assert (ws_root / "datasets" / "d" / "raw" / "corpus").is_symlink()
