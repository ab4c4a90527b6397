"""Extract a zip without trusting it: no paths outside the target, no links, bounded size and count.

Every refused entry becomes a message naming it; the rest is extracted. Limits are checked from the
central directory before anything is written, and again while streaming (a zip may lie about sizes).
"""
from __future__ import annotations

import shutil
import stat
import time
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from utils.datasets.config import AUDIO_SUFFIXES
from utils.events import StudioError

CHUNK = 1 << 20


def entry_name(info: zipfile.ZipInfo) -> str:
    """An entry's name as its maker wrote it. A name not flagged UTF-8 is read as the old DOS code page, but macOS's
    Archive Utility and others write UTF-8 without the flag: ድምፅ_01.wav came out as ßëÇßê_01.wav (and metadata.csv
    found no audio for it). Read as UTF-8 when its bytes are valid UTF-8."""
    if info.flag_bits & 0x800:
        return info.filename
    try:
        return info.filename.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return info.filename


def _entry_problem(info: zipfile.ZipInfo) -> str | None:
    name = entry_name(info).replace("\\", "/")
    pure = PurePosixPath(name)
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in pure.parts:
        return "path with '..'"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if "\x00" in name:
        return "bad name"
    return None


def safe_extract(zip_path: Path, target: Path, max_bytes: int, max_entries: int, max_ratio: int,
                 replaced: list[dict] | None = None) -> tuple[list[Path], list[str]]:
    """Extract `zip_path` into `target`. Returns (files written, messages about refused entries). A file already
    there of the entry's size is taken as extracted before (an interrupted run); with `replaced` (a dataset's zip
    given again) its bytes must match the entry's CRC too, and one that differs is set aside (`set_aside`)."""
    zip_path, target = Path(zip_path), Path(target).resolve()
    label = zip_path.name
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise StudioError(f"{label}: not a readable zip file ({exc}).") from exc
    written, messages = [], []
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if not infos:
            raise StudioError(f"{label}: the zip is empty; it holds no files.")
        if len(infos) > max_entries:
            raise StudioError(f"{label}: {len(infos)} entries, more than the limit of {max_entries} "
                              "(a zip bomb guard); split the dataset into several zips.")
        declared = sum(i.file_size for i in infos)
        if declared > max_bytes:
            raise StudioError(f"{label}: would unpack to {declared / 1e9:.1f} GB, more than the limit of "
                              f"{max_bytes / 1e9:.1f} GB (a zip bomb guard).")
        total = 0
        for info in infos:
            problem = _entry_problem(info)
            if problem:
                messages.append(f"{label}: entry {entry_name(info)!r} skipped ({problem}).")
                continue
            if info.compress_size and info.file_size / max(info.compress_size, 1) > max_ratio and info.file_size > 10 * CHUNK:
                messages.append(f"{label}: entry {entry_name(info)!r} skipped: it expands {info.file_size // max(info.compress_size, 1)}x "
                                "(a zip bomb guard).")
                continue
            dest = (target / entry_name(info).replace("\\", "/")).resolve()
            if not dest.is_relative_to(target):
                messages.append(f"{label}: entry {entry_name(info)!r} skipped (it points outside the dataset).")
                continue
            if dest.exists() and dest.stat().st_size == info.file_size and (replaced is None or _same_crc(dest, info)):
                written.append(dest)  # extracted by an earlier, interrupted run, or the same file in a zip given again
                total += info.file_size
                continue
            if dest.exists() and replaced is not None:  # another version of it in a zip given again
                set_aside(dest, entry_name(info), replaced)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.part")
            size = 0
            try:
                with zf.open(info) as src, open(tmp, "wb") as out:
                    while block := src.read(CHUNK):
                        size += len(block)
                        total += len(block)
                        if size > info.file_size or total > max_bytes:
                            raise StudioError(f"{label}: entry {entry_name(info)!r} is larger than declared or the "
                                              "total exceeds the limit (a zip bomb guard); extraction stopped.")
                        out.write(block)
                tmp.replace(dest)
                written.append(dest)
            except StudioError:
                tmp.unlink(missing_ok=True)
                raise
            except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as exc:  # corrupt, encrypted
                tmp.unlink(missing_ok=True)
                messages.append(f"{label}: entry {entry_name(info)!r} could not be extracted ({exc}).")
    return written, messages


def _same_crc(path: Path, info: zipfile.ZipInfo) -> bool:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            crc = zlib.crc32(block, crc)
    return crc == info.CRC


def copy_tree(src: Path, dest: Path, replaced: list[dict] | None = None) -> tuple[list[Path], list[str]]:
    """Copy a folder (hard links when on the same disk), skipping symlinks with a message; `replaced`: as copy_file."""
    src, dest = Path(src), Path(dest)
    written, messages = [], []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_symlink():
            messages.append(f"{src.name}/{rel}: skipped (symbolic link; copy the real file in).")
            continue
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        try:
            written.append(copy_file(path, dest / rel, replaced))
        except StudioError as exc:  # one changed file: said, and the rest of the folder still comes in
            messages.append(str(exc))
    return written, messages


def same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes: a transcript fixed without changing its length is another file."""
    import filecmp

    return a.stat().st_size == b.stat().st_size and (a.samefile(b) or filecmp.cmp(a, b, shallow=False))


def set_aside(dest: Path, name: str, replaced: list[dict] | None = None) -> Path:
    """Move the file the dataset held at `dest` beside it as a hidden `.NAME.before-TIME` (discovery skips hidden
    files; nothing the user gave is lost) and tell `replaced` of it, when given: the import says it, and a recording's
    clip is made again from the new one. Returns where the old one went."""
    stem = f".{dest.name}.before-{time.strftime('%Y%m%d-%H%M%S')}"
    before = next(b for k in range(1, 1000) if not (b := dest.with_name(stem + (f"-{k}" if k > 1 else ""))).exists())
    dest.replace(before)
    suffix = dest.suffix.lower()
    what = "recording" if suffix in AUDIO_SUFFIXES else "transcript" if suffix in TEXT_SUFFIXES else "file"
    why = {"transcript": " (a row whose transcript you fixed here keeps your fix)",
           "recording": " (its clip is made again from this one; a Keep/Exclude that judged the old one is cleared)"}
    if replaced is not None:
        replaced.append({"source": name, "path": str(dest), "level": "info", "kind": what,
                         "message": f"{name}: replaces the {'recording' if what == 'recording' else 'version'} "
                                    f"imported before, which is kept as {before.name} beside it{why.get(what, '')}."})
    return before


# Transcripts and tables
TEXT_SUFFIXES = (".txt", ".csv", ".tsv", ".srt", ".vtt")


def copy_file(src: Path, dest: Path, replaced: list[dict] | None = None) -> Path:
    """Byte-exact copy; a hard link when possible (free for large uploads already in the workspace). A file the
    dataset already holds is kept. Another file under its name (a corrected transcript, a recording made again, a zip
    exported again) replaces the one read before when `replaced` is given, which is told of it (`set_aside`);
    without it (a recording a lone table names) it is refused with what to do."""
    src, dest = Path(src), Path(dest)
    if dest.exists():
        if same_bytes(src, dest):
            return dest
        if replaced is None:
            raise StudioError(f"{src.name}: not read: this dataset already holds another file of this name, "
                              "imported before, and keeps it. To replace it, give the folder that holds the table and "
                              "its recordings (or a zip of it); give new recordings new names.")
        set_aside(dest, src.name, replaced)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        dest.hardlink_to(src)
    except OSError:
        tmp = dest.with_name(f".{dest.name}.part")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
    return dest
