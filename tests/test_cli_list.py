"""`python app.py list`: what the workspace holds, for a curator on the command line (it had to read the folders)."""
from __future__ import annotations

import json
import re

import app
from tests.test_training_live import fake_run
from utils.workspace import Workspace


def test_list_names_the_datasets_runs_and_voices_of_the_workspace(capsys, tmp_path):
    from tests.helpers import make_dataset

    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws.root, "am", n_train=3, n_val=1)
    fake_run(ws, "r1", state="finished", steps=40)
    assert app.main(["list", "--workspace", str(ws.root)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"datasets \(1\):\n  am  4 usable of 4 clips, \d+ s\n", out), out  # seconds, not "0.00 h"
    assert "runs (1):\n  r1  finished at step 40 of 1000 · dataset am, tiny" in out and "voices (0): -" in out
    assert "go on with it (Resume): python app.py train --run RUN --continue; stop it: python app.py stop RUN" in out

    assert app.main(["list", "--workspace", str(ws.root), "--json"]) == 0
    held = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in held["datasets"]] == ["am"] and held["runs"][0]["run"] == "r1"
    assert held["voices"] == [] and held["vocoders"] == []


def test_list_says_when_a_runs_dataset_was_deleted(capsys, tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    fake_run(ws, "orphan", state="finished", steps=40)  # trained on "am", which this workspace no longer has
    assert app.main(["list", "--workspace", str(ws.root)]) == 0
    assert "orphan  finished at step 40 of 1000 · dataset am (deleted), tiny" in capsys.readouterr().out


def test_list_of_an_empty_workspace_says_there_is_nothing(capsys, tmp_path):
    assert app.main(["list", "--workspace", str(tmp_path / "new")]) == 0
    assert capsys.readouterr().out.startswith("datasets (0):\nruns (0):\nvoices (0): -")


def test_a_running_run_says_what_it_does_while_its_step_stands_still(capsys, tmp_path):
    """A graph compiles for minutes on a small machine and the step counter stands still: the run list, the Training
    tab's summary and `app.py list` showed only the frozen counter (the message was shown only for ended runs)."""
    from utils.runs.views import view

    ws = Workspace.open(tmp_path / "ws")
    fake_run(ws, "warming", state="running", steps=0, message="compiling graph 3 of ~16 (encoder)")
    fake_run(ws, "steady", state="running", steps=40, message="training", eta_s=125)
    assert app.main(["list", "--workspace", str(ws.root)]) == 0
    out = capsys.readouterr().out
    assert "warming  running at step 0 of 1000: compiling graph 3 of ~16 (encoder) · dataset am" in out
    assert "steady  running at step 40 of 1000, about 2m05s left · dataset am"  # its ETA too in out
    assert "compiling graph 3 of ~16 (encoder)" in view(ws, "warming").summary()
    assert "\n\ntraining" not in view(ws, "steady").summary()  # plain training needs no words
