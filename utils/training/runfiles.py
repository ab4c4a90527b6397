"""What a run writes for people and for the UI: train.log, metrics.jsonl, TensorBoard events, and
status.json refreshed by a heartbeat thread every `HEARTBEAT_S` seconds (atomic writes)."""
from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from utils.workspace import append_jsonl, atomic_write_json, read_json

HEARTBEAT_S = 2.0


class RunFiles:
    def __init__(self, run_dir: Path, enabled: bool = True, tensorboard: bool = True, echo: bool = True):
        """`echo`: log lines go to stdout too (a caller that prints the loop's events says False)."""
        self.dir = Path(run_dir)
        self.enabled = enabled
        self.log = logging.getLogger(f"train.{self.dir.name}.{id(self)}")
        self.log.setLevel(logging.INFO)
        self.log.propagate = False
        self._status: dict = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self.tb = None
        if not enabled:
            self.log.addHandler(logging.NullHandler())
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
        fh = logging.FileHandler(self.dir / "train.log", encoding="utf-8")
        fh.setFormatter(fmt)
        self.log.addHandler(fh)
        # stdout too, unless stdout *is* train.log (the job service redirects it there)
        if echo and not _same_file(sys.stdout, self.dir / "train.log"):
            sh = logging.StreamHandler(sys.stdout)
            sh.setFormatter(fmt)
            self.log.addHandler(sh)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(str(self.dir / "events"))

    # ------------------------------------------------------------------------------- logging
    def info(self, msg: str) -> None:
        self.log.info(msg)

    def metrics(self, row: dict) -> None:
        if not self.enabled:
            return
        append_jsonl(self.dir / "metrics.jsonl", row)
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and k not in ("step", "epoch"):
                    self.tb.add_scalar(k, v, row["step"])

    # -------------------------------------------------------------------------------- status
    def status(self, **fields) -> None:
        """Update status fields; written now and on every heartbeat."""
        with self._lock:
            self._status.update(fields)
        self._write()

    def progress(self, **fields) -> None:
        """Update fields that change every step (step, ETA): kept in memory and written by the next
        heartbeat, so a step never waits on a file write (slow on a Drive-mounted workspace)."""
        with self._lock:
            self._status.update(fields)

    def _write(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            path = self.dir / "status.json"
            merged = {**(read_json(path, default={}) or {}), **self._status, "heartbeat": time.time()}
            if merged.get("state") == "running" and (self.dir / "STOP").exists():
                merged["state"] = "stopping"  # Stop was pressed: the tab says so until the trainer has saved and ended
            atomic_write_json(path, merged)

    def start_heartbeat(self) -> None:
        if not self.enabled or self._thread is not None:
            return

        def beat():
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    self._write()
                except OSError:
                    pass

        self._thread = threading.Thread(target=beat, name="status-heartbeat", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.tb is not None:
            self.tb.close()
        for h in list(self.log.handlers):
            h.close()
            self.log.removeHandler(h)


def note_in_log(run_dir: Path, line: str) -> None:
    """A line for train.log written before the trainer starts (what the run's start did for it), as its lines are."""
    with open(Path(run_dir) / "train.log", "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def _same_file(stream, path: Path) -> bool:
    try:
        return path.exists() and os.path.samestat(os.fstat(stream.fileno()), os.stat(path))
    except (OSError, ValueError, AttributeError):
        return False


def disk_full_message(exc: BaseException, run_dir: Path, checkpoints: list[tuple[int, Path]]) -> str | None:
    """What to tell the user when a write failed because the disk is full (None for any other error)."""
    if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        return None
    try:
        usage = shutil.disk_usage(run_dir)
        space = f" ({usage.free / 2**20:.1f} MiB free of {usage.total / 2**30:.2f} GiB)"
    except OSError:
        space = ""
    kept = (f"The last complete checkpoint, {checkpoints[-1][1].name}, is kept: Resume continues from it."
            if checkpoints else "No checkpoint had been saved yet.")
    return (f"The disk is full: no space left on the disk holding {run_dir}{space}, so training stopped. {kept} "
            "Free space (delete old runs or datasets you no longer need, or move the workspace to a bigger disk), "
            "then press Resume.")
