"""What a long transcript check has done so far, kept on disk so that a check cut off (a closed page, a reset
runtime) goes on where it stopped: a 200-hour dataset takes hours to align on a CPU.

An append-only JSON-lines file: the first line is a header saying what the lines are valid for, each further line is
one clip's result. Lines are flushed and synced as each batch is appended; a line torn by a cut is ignored when read,
and the next append starts on a line of its own, so a cut loses at most the batch being written (not every result
after it, as when the next batch was glued to the torn tail and reading stopped there).

    log = Progress(path)
    log.start({"aligner": stamp})          # a fresh file (replaces any)
    log.append([{"id": ..., "key": ..., ...}, ...])
    header, lines = log.read()             # ({}, []) when there is none
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from utils.workspace import atomic_write_text


class Progress:
    def __init__(self, path: Path):
        self.path = Path(path)

    def start(self, header: dict) -> None:
        atomic_write_text(self.path, json.dumps(header, ensure_ascii=False) + "\n")

    def append(self, lines: list[dict]) -> None:
        if not lines:
            return
        torn = self._ends_torn()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(("\n" if torn else "") + "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> tuple[dict, list[dict]]:
        if not self.path.exists():
            return {}, []
        parsed = []
        with open(self.path, encoding="utf-8") as f:
            for text in f:
                try:
                    parsed.append(json.loads(text))
                except json.JSONDecodeError:
                    continue  # a line torn by a cut: the lines after it were appended after the cut
        return (parsed[0], parsed[1:]) if parsed else ({}, [])

    def _ends_torn(self) -> bool:
        """Whether the file's last line was cut short (no newline): what follows must start a line of its own."""
        try:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                return f.read(1) != b"\n"
        except OSError:  # missing or empty
            return False

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def stamp(path: Path) -> str:
    """Which version of a file or checkpoint folder this is (each file's size and modification time): a retrained
    aligner's is another."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return ";".join(f"{p.relative_to(path) if p != path else p.name}:{p.stat().st_mtime_ns}:{p.stat().st_size}"
                    for p in files)
