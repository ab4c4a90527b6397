"""Every name or path the UI (or the CLI) hands to the services stays inside the workspace: `../x`, an
absolute path, and a symbolic link inside the workspace that leads out are all refused, and nothing
outside is read, changed or deleted.

Names (dataset, run, voice) become folders; paths (a checkpoint to fine-tune, a voice or checkpoint
to speak with, a vocoder, the Dataset tab's "path inside the workspace") are resolved with links
followed. Deliberately not confined: the command line's input files (`prepare SOURCE`, `separate
INPUT OUTPUT`, `train-vocoder --init`), which are the local user's own files, read (or written) with
that user's rights, the same as `cp`; uploads through the browser are checked by Gradio (tested in
test_security.py)."""
from __future__ import annotations

import json

import pytest

from utils import datasets, inference, jobs
from utils.runs import control, views
from utils.events import StudioError
from utils.separation import dataset as separation
from utils.datasets.curate import convert_dataset
from utils.workspace import Workspace, atomic_write_json
from webui.dataset import _sources
from webui.transcripts import recognizer_source

ACOUSTIC = {"model": {}, "frontend": {"kind": "phoneme", "symbols": ["_"]}, "speakers": []}


def plausible_folder(folder):
    """Outside the workspace, a folder that looks like a dataset, a run, a voice and a checkpoint at once:
    were the services to follow a link into it, they would find something to read, change or delete."""
    folder.mkdir(parents=True)
    (folder / "manifest.jsonl").write_text(json.dumps({"id": "a", "audio": "audio/a.wav", "text": "ሰላም"}) + "\n")
    atomic_write_json(folder / "report.json", {"summary": {"clips": 1}, "rows": [], "errors": []})
    atomic_write_json(folder / "status.json", {"state": "finished", "created": 1})
    atomic_write_json(folder / "config.json", {**ACOUSTIC, "train": {"dataset": "am"}})
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    base = tmp_path_factory.mktemp("confine")
    ws = Workspace.open(base / "workspace")
    plausible_folder(base / "outside")
    for parent in ("datasets", "runs", "voices", "uploads"):  # a link in each place a name or path points
        (ws.root / parent / "link").symlink_to(base / "outside", target_is_directory=True)
    am = ws.dataset_dir("am")  # a real dataset and checkpoint inside, so only the bad argument can fail
    am.mkdir()
    (am / "manifest.jsonl").write_text("")
    ckpt = ws.runs / "good" / "checkpoints" / "step-1"
    ckpt.mkdir(parents=True)
    atomic_write_json(ckpt / "config.json", ACOUSTIC)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 16)
    return ws


GOOD_CHECKPOINT = "runs/good/checkpoints/step-1"

# (what the UI calls, which argument is bad, where its symbolic link lives)
CALLS = {
    "prepare dataset": (lambda ws, x: list(datasets.prepare(ws, x, [ws.root / "uploads"])), "name", "datasets"),
    "dataset report": (lambda ws, x: datasets.load_report(ws, x), "name", "datasets"),
    "dataset review table": (lambda ws, x: datasets.flagged_rows(ws, x), "name", "datasets"),
    "dataset re-check": (lambda ws, x: datasets.recheck(ws, x), "name", "datasets"),
    "dataset edit row": (lambda ws, x: datasets.apply_edits(ws, x, [{"id": "a", "action": "exclude"}]), "name",
                         "datasets"),
    "music removal": (lambda ws, x: list(separation.process_dataset(ws, x)), "name", "datasets"),
    "music accept": (lambda ws, x: separation.accept(ws, x), "name", "datasets"),
    "music revert": (lambda ws, x: separation.revert(ws, x), "name", "datasets"),
    "music clip table": (lambda ws, x: separation.summary(ws, x), "name", "datasets"),
    "music clip players": (lambda ws, x: separation.clip_paths(ws, x, "a"), "name", "datasets"),
    "g2p convert dataset": (lambda ws, x: list(convert_dataset(ws, x)), "name", "datasets"),
    "train on dataset": (lambda ws, x: control.start_training(ws, x, run="r1"), "name", "datasets"),
    "train run name": (lambda ws, x: control.start_training(ws, "am", run=x), "name", "runs"),
    "run view": (lambda ws, x: views.view(ws, x), "name", "runs"),
    "run delete": (lambda ws, x: control.delete(ws, x), "name", "runs"),
    "run resume": (lambda ws, x: control.resume_training(ws, x), "name", "runs"),
    "run stop": (lambda ws, x: jobs.stop(ws, x), "name", "runs"),
    "voice name to speak": (lambda ws, x: inference.resolve_voice(ws, x), "name", "voices"),
    "export voice name": (lambda ws, x: inference.export_voice(ws, GOOD_CHECKPOINT, x), "name", "voices"),
    "dataset path box": (lambda ws, x: _sources(ws, None, x), "path", "uploads"),
    "fine-tune from": (lambda ws, x: control.start_training(ws, "am", run="r2", init=x), "path", "uploads"),
    "checkpoint to speak": (lambda ws, x: inference.synthesize(ws, x, "ሰላም"), "path", "uploads"),
    "export from": (lambda ws, x: inference.export_voice(ws, x, "v1"), "path", "uploads"),
    "vocoder": (lambda ws, x: inference.vocoder_source(ws, x), "path", "uploads"),
    "recognizer folder": (lambda ws, x: recognizer_source(ws, x), "path", "uploads"),
}
BAD = {"dot-dot": lambda parent, kind: "../outside" if kind == "path" else "../link",
       "absolute": lambda parent, kind: "/etc/passwd",
       "symlink out": lambda parent, kind: "link" if kind == "name" else f"{parent}/link"}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("call", CALLS)
def test_names_and_paths_that_leave_the_workspace_are_refused(ws, call, bad):
    fn, kind, parent = CALLS[call]
    outside = ws.root.parent / "outside"
    before = snapshot(outside)
    with pytest.raises(StudioError, match=r"outside the workspace|cannot be used|no prepared dataset"):
        fn(ws, BAD[bad](parent, kind))
    assert snapshot(outside) == before
    assert not any(r["run"] == "link" for r in views.run_table(ws))  # listings leave such links out too
    assert "link" not in ws.list_datasets()


def test_the_command_line_refuses_the_same(ws, capsys):
    import app

    outside = ws.root.parent / "outside"
    for argv, message in (
        (["train", "--dataset", "am", "--run", "r3", "--init", str(outside)], "outside the workspace"),
        (["train", "--dataset", "am", "--run", "r4", "--init", "uploads/link"], "outside the workspace"),
        (["train", "--dataset", "am", "--run", "r5", "--resume", "../outside"], "outside the workspace"),
        (["train", "--dataset", "../link", "--run", "r6"], "cannot be used"),
        (["train", "--dataset", "am", "--run", "../../escape"], "cannot be used"),
        (["prepare", str(ws.root / "uploads"), "--name", "/etc/passwd"], "cannot be used"),
        (["synth", "--voice", "/etc/passwd", "ሰላም", str(ws.root / "out.wav")], "outside the workspace"),
        (["synth", "--voice", "voices/link", "ሰላም", str(ws.root / "out.wav")], "outside the workspace"),
    ):
        assert app.main([argv[0], "--workspace", str(ws.root), *argv[1:]]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not (ws.root.parent / "escape").exists()


def test_the_mms_trainer_reads_only_the_datasets_own_audio(tmp_path):
    """The mel cache refused a row whose audio path leads out of the dataset; the MMS engine reads waveforms itself
    and followed any path an edited manifest gave. Now such rows are named and skipped, and the rest trains."""
    import os
    import shutil

    from tests.helpers import make_dataset
    from utils.mms.data import prepare_clips

    class Letters:  # what the base's uroman tokenizer answers: some ids for any text
        def encode(self, text, user_dict):
            return [1, 2, 3]

    ws = make_dataset(tmp_path / "w", n_train=4, n_val=0, max_chars=30)
    rows = datasets.load_manifest(ws, "am")
    outside = tmp_path / "secret.wav"
    shutil.copy(ws.dataset_dir("am") / rows[0]["audio"], outside)
    os.symlink(outside, ws.dataset_dir("am") / "audio" / "link.wav")
    rows[1] = {**rows[1], "audio": "../../../secret.wav"}
    rows[2] = {**rows[2], "audio": str(outside)}
    rows[3] = {**rows[3], "audio": "audio/link.wav"}
    said = []
    clips = prepare_clips(ws, "am", rows, Letters(), {}, said.append)
    assert [c.row["id"] for c in clips] == [rows[0]["id"]]
    assert all(c.path.is_relative_to(ws.dataset_dir("am").resolve()) for c in clips)
    assert len(said) == 3 and all("points outside the dataset" in s for s in said), said
    assert all(repr(r["id"]) in " ".join(said) for r in rows[1:])
