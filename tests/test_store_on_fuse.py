"""The dataset table on a FUSE mount, as Colab keeps the workspace on Google Drive's: two processes writing at
once lose no decision, a process killed mid-write leaves the table as it was, and a write leaves no file made and
deleted behind it (each would go to Drive's trash). The mount is tests/fuse_passthrough.py (fusepy over
libfuse2, no lock operation of its own); what Drive's daemon does beyond a FUSE file system is not tested here:
its upload of a file being written, and its trash."""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_dataset_store import kill_a_writer_mid_write, table_rows
from utils import datasets
from utils.datasets import store
from utils.workspace import Workspace

PASSTHROUGH = Path(__file__).with_name("fuse_passthrough.py")


@pytest.fixture
def drive(tmp_path):
    """A FUSE mount of a temporary folder; (mount point, the mount's log of files made, deleted and renamed)."""
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing: this test needs a machine that can mount FUSE (tests/run.sh installs "
                    "libfuse2; a container needs --device /dev/fuse)")
    backing, mount, log = tmp_path / "backing", tmp_path / "drive", tmp_path / "fuse.log"
    backing.mkdir(), mount.mkdir()
    daemon = subprocess.Popen([sys.executable, str(PASSTHROUGH), str(backing), str(mount), str(log)],
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not os.path.ismount(mount):
        assert daemon.poll() is None, f"the FUSE mount failed: {daemon.stderr.read()}"
        assert time.monotonic() < deadline, "the FUSE mount did not appear in 30 s"
        time.sleep(0.05)
    yield mount, log
    unmount = ["fusermount", "-u"] if shutil.which("fusermount") else ["umount"]  # root needs no fusermount
    subprocess.run([*unmount, str(mount)], check=False)
    daemon.wait(30)


def _decide(root: str, ids: list[str], action: str) -> None:
    ws = Workspace.open(Path(root))
    for row_id in ids:  # one write per decision, as the Dataset tab's clicks make them
        datasets.apply_edits(ws, "big", [{"id": row_id, "action": action}])


def table_files_touched(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if store.FILE in line]


def test_two_writers_on_a_fuse_mount_lose_nothing_and_leave_no_deleted_files(drive):
    mount, log = drive
    ws = Workspace.open(mount / "ws")
    datasets.save_manifest(ws, "big", table_rows(80))
    before = len(table_files_touched(log))
    ids = [r["id"] for r in datasets.load_manifest(ws, "big")]
    spawn = mp.get_context("spawn")
    writers = [spawn.Process(target=_decide, args=(str(ws.root), ids[i:40:2], action))
               for i, action in ((0, "exclude"), (1, "keep"))]
    for w in writers:
        w.start()
    for w in writers:
        w.join(300)
        assert w.exitcode == 0
    rows = {r["id"]: r for r in datasets.load_manifest(ws, "big")}
    assert [rows[i]["review"] for i in ids[:40]] == ["exclude", "keep"] * 20
    assert sum(r["excluded"] for r in rows.values()) == 20
    assert table_files_touched(log)[before:] == []  # 40 writes: no journal made and deleted for any of them


def test_a_process_killed_mid_write_on_a_fuse_mount_leaves_the_table_as_it_was(drive):
    mount, _ = drive
    ws = Workspace.open(mount / "ws")
    datasets.save_manifest(ws, "big", table_rows(30))
    folder = ws.dataset_dir("big")
    before = store.read_all(folder)
    kill_a_writer_mid_write(folder)
    assert store.read_all(folder) == before
    datasets.apply_edits(ws, "big", [{"id": before[0]["id"], "action": "keep"}])
    assert datasets.get_rows(ws, "big", [before[0]["id"]])[before[0]["id"]]["review"] == "keep"
