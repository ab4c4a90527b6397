"""Deleting a dataset: refused while a run trains on it, and said in full (which runs were trained on it) before the
curator confirms.
"""
from __future__ import annotations

import shutil

from utils.events import StudioError
from utils.jobs import ACTIVE
from utils.runs.views import run_table
from utils.workspace import Workspace


def trained_on(ws: Workspace, name: str) -> list[str]:
    """The runs (acoustic and vocoder) whose config names dataset `name`, newest first."""
    return [r["run"] for r in run_table(ws) if r["dataset"] == name]


def delete_dataset(ws: Workspace, name: str, confirmed: bool = False, how_to_confirm: str = "confirm") -> str:
    """Remove datasets/<name>/ (its uploads, clips, features and reviews), once the curator confirmed it, having been
    told which runs were trained on it. Those runs and their exported voices stay and still speak (a checkpoint
    holds its model, symbols and speakers, an F5 voice its reference clip's mel); they cannot resume or evaluate
    again. Refused while a run on it is active or its transcript check runs; without `confirmed`, the refusal says
    what would go, and `how_to_confirm`."""
    from utils.jobs import read_status
    from utils.transcripts.scoring import check_run, one_check_at_a_time

    folder = ws.dataset_dir(name)
    if not folder.is_dir():
        raise StudioError(f"There is no dataset called {name!r}.")
    runs = trained_on(ws, name)
    busy = [r for r in runs if read_status(ws.run_dir(r)).get("state") in ACTIVE]
    if busy:
        raise StudioError(f"Run {busy[0]} is training on dataset {name!r}: stop it (Training tab) before deleting "
                          "the dataset.")
    if not confirmed:
        used = (f" Runs trained on it: {', '.join(runs)}. They keep their checkpoints, and they and their exported "
                "voices go on speaking, but they cannot resume or be evaluated again." if runs else
                " No run was trained on it.")
        raise StudioError(f"Deleting dataset {name!r} removes its uploads, clips and reviews from the workspace; it "
                          f"cannot be undone.{used} To delete it, {how_to_confirm}.")
    with one_check_at_a_time(ws, name):  # a running transcript check says so instead of losing its files
        shutil.rmtree(folder)
    shutil.rmtree(ws.run_dir(check_run(name)), ignore_errors=True)  # the check's own aligner, of no other use
    return f"Deleted dataset {name}" + (f"; runs {', '.join(runs)} keep their checkpoints." if runs else ".")
