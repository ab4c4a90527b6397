"""The workspace folder: every path the app reads or writes, and atomic writes.

Everything a user makes lives under one folder so a browser refresh, a dead share link or an app
restart loses nothing (see DESIGN.md for the layout).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from utils.events import StudioError

DEFAULT_WORKSPACE = Path(os.environ.get("AMHARIC_TTS_WORKSPACE", "workspace"))
# Ethiopic syllables (Ethiopic, its Supplement and Extended blocks); not its punctuation (፡ ። ፣), digits or marks
_ETHIOPIC = "\u1200-\u135A\u1380-\u138F\u2D80-\u2DDE\uAB01-\uAB2E\U0001E7E0-\U0001E7FE"
_NAME_RE = re.compile(rf"^[A-Za-z0-9{_ETHIOPIC}][A-Za-z0-9{_ETHIOPIC}._-]{{0,99}}$")


def check_name(name: str, what: str = "name") -> str:
    """Dataset, run and voice names become folder, zip and URL path names: letters (Latin or Amharic), digits and
    three marks, which every file system, zip reader and browser keeps as they are (UTF-8 names on Linux, macOS,
    Windows and in zips)."""
    name = (name or "").strip()
    if not name:
        raise StudioError(f"Type or pick a {what} first.")
    if not _NAME_RE.match(name) or ".." in name:
        raise StudioError(
            f"The {what} {name!r} cannot be used: use Latin or Amharic letters, digits, '-', '_' or '.' (no spaces "
            "or other marks), start with a letter or digit, at most 100 characters."
        )
    return name


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def open(cls, root: str | Path | None = None) -> "Workspace":
        ws = cls(Path(root or DEFAULT_WORKSPACE).expanduser().resolve())
        if ws.root.exists() and not ws.root.is_dir():
            raise StudioError(f"The workspace {ws.root} is a file, not a folder: give a folder (--workspace), new or "
                              "one the studio made.")
        for sub in ("datasets", "runs", "voices", "uploads"):
            (ws.root / sub).mkdir(parents=True, exist_ok=True)
        return ws

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def voices(self) -> Path:
        return self.root / "voices"

    @property
    def uploads(self) -> Path:
        return self.root / "uploads"

    @property
    def pronunciations(self) -> Path:
        """The user's pronunciation dictionary (word<TAB>IPA segments), shared by training and inference."""
        return self.root / "pronunciations.tsv"

    def dataset_dir(self, name: str) -> Path:
        return self._named(self.datasets, name, "dataset name")

    def run_dir(self, name: str) -> Path:
        return self._named(self.runs, name, "run name")

    def voice_dir(self, name: str) -> Path:
        return self._named(self.voices, name, "voice name")

    def _named(self, parent: Path, name: str, what: str) -> Path:
        """parent/name for a plain name; a symbolic link there that leads out of the workspace is refused."""
        folder = parent / check_name(name, what)
        self.inside(folder)
        return folder

    def list_datasets(self) -> list[str]:
        return sorted(p.name for p in self.datasets.iterdir()
                      if self.holds(p) and any((p / f).exists() for f in ("manifest.sqlite", "manifest.jsonl")))

    def newest_dataset(self) -> str | None:
        """The dataset prepared (or changed) last: what a picker shows before the curator picks, rather than the
        first by name (a recording without text yet, named before the dataset just prepared)."""
        def changed(name: str) -> float:
            folder = self.dataset_dir(name)
            return max((folder / f).stat().st_mtime for f in ("manifest.sqlite", "manifest.jsonl", "prepare.json")
                       if (folder / f).exists())

        return max(self.list_datasets(), key=changed, default=None)

    def list_runs(self) -> list[str]:
        return sorted(p.name for p in self.runs.iterdir() if p.is_dir() and self.holds(p))

    def holds(self, path: str | Path) -> bool:
        """Whether `path` (links followed) is inside the workspace."""
        return Path(path).resolve().is_relative_to(self.root)

    def inside(self, path: str | Path) -> Path:
        """Resolve `path` (relative to the workspace or absolute, links followed) and refuse anything outside it."""
        p = Path(path)
        p = (p if p.is_absolute() else self.root / p).resolve()
        if not p.is_relative_to(self.root):
            raise StudioError(f"{path} is outside the workspace {self.root}; copy it into the workspace first.")
        return p


def readable(ws: Workspace, path: str | Path, data_dirs: Iterable[Path] = ()) -> Path:
    """A path a page may read from: inside the workspace, or inside a data folder the machine's owner named when
    starting the app (a share link can read nothing else on the machine). Relative paths are in the workspace."""
    p = Path(path).expanduser()
    p = (p if p.is_absolute() else ws.root / p).resolve()
    allowed = [ws.root, *(Path(d).resolve() for d in data_dirs)]
    if not any(p.is_relative_to(a) for a in allowed):
        where = "the workspace" + (" or " + ", ".join(str(d) for d in allowed[1:]) if len(allowed) > 1 else "")
        raise StudioError(f"{path} is outside {where}: copy it into the workspace, or start the app with "
                          f"--data-dir naming its folder (for example --data-dir {p.parent}).")
    return p


def stamped_name(stem: str, suffix: str) -> str:
    """stem-YYYYmmdd-HHMMSS-xxxx+suffix: when it was made, and its own (two Speaks ending in the same second, in two
    browser tabs, wrote one file: the second took the first's place)."""
    import secrets
    import time

    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}{suffix}"


def file_mode() -> int:
    """The mode a file this user writes gets (0644 under the usual umask), read without changing the umask (os.umask
    would, for every thread at once). For writers that make 0600 files (mkstemp, safetensors): an exported voice
    or a dataset is then readable by whoever the curator shares the folder with."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o644


def temp_beside(path: Path, suffix: str = ".tmp") -> tuple[int, str]:
    """(fd, name) of a new hidden file in `path`'s folder, to be renamed onto `path` once whole, with the mode of
    any file this user writes (mkstemp makes it 0600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=suffix)
    os.fchmod(fd, file_mode())
    return fd, tmp


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, flush, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def update_json(path: Path, change, default: Any = None) -> Any:
    """Read, change and write a JSON file as one step for every thread and process (a lock file beside it): two
    quick edits from the browser would otherwise both read the old file and the second write lose the first."""
    import fcntl

    path = Path(path)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            new = change(read_json(path, default=default))
            atomic_write_json(path, new)
            return new
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSON-lines file; a torn last line (a writer killed mid-append) is ignored."""
    rows = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return rows
    for line in lines:
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def read_jsonl_from(path: Path, offset: int) -> tuple[list[dict], int]:
    """The rows appended to a JSON-lines file since byte `offset`, and the offset to read on from. A line
    still being written waits for the next call; a torn line (a writer killed mid-append) is skipped.
    Lets a reader follow a growing file (metrics, indexes) without parsing it whole every time."""
    try:
        size = Path(path).stat().st_size
    except FileNotFoundError:
        return [], 0
    if size < offset:  # a new file under the same name
        offset = 0
    if size == offset:
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size - offset)
    whole = data[: data.rfind(b"\n") + 1]
    rows = []
    for line in whole.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, offset + len(whole)


def append_jsonl_rows(path: Path, rows: list[dict]) -> None:
    """Append rows in one write call: other processes appending to the same file never split a line."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def append_jsonl(path: Path, row: dict) -> None:
    """Append one line (metrics logs): a single write call so readers see whole lines."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
