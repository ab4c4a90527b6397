"""What preparing a dataset will write to disk, known before anything is written.

A 200-hour dataset takes tens of GB; a disk that fills up half way loses hours of preparation. So the
need is worked out from the uploads alone, part by part (see DESIGN.md, "The workspace on disk"):

    raw/       the uploads as received: a hard link (no new space) when on the workspace's disk, else a
               copy; a zip is kept and also extracted, so its members are new bytes either way
    decoded/   formats libsndfile cannot read (M4A, WebM, AMR...) decoded once by ffmpeg to 16-bit FLAC
    audio/     the clips: mono 16-bit WAV at the model rate, 2 bytes a sample
    features/  the mel cache: float32 [n_mels, frames], frames = samples // hop + 1, one .npy per clip
    records    manifest, report, resume log and indexes: about a line of JSON each per clip

Durations come from file headers (WAV and FLAC parsed here, a few hundred bytes each; other formats
through soundfile, which reads only the header), never from decoding. Clips and mels are counted from
the whole recordings; trimming the silence at their edges only makes them smaller, so the estimate
errs on the large side (about 10 % for espeak speech, which ends in silence).

    est = estimate(["/data/corpus.zip"], ws.root)
    print(describe(est))
"""
from __future__ import annotations

import os
import shutil
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import soundfile as sf

from utils.audio import FFMPEG_SUFFIXES, FeatureConfig, needs_ffmpeg, short_reason
from utils.datasets.config import AUDIO_SUFFIXES, PrepareConfig
from utils.datasets.safezip import entry_name
from utils.events import StudioError

BLOCK = 4096               # bytes; a file's last block is half empty on average, and `du` counts whole blocks
RECORD_BYTES = 2048        # bytes per clip of manifest row, report entry, resume-log line, digest and frames lines
                           # (measured: about 1.7 KB for espeak clips with phonemes)
GUESS_BITRATE = 64_000     # bit/s assumed for audio whose header gives no length (M4A, AMR, some MP3): phone voice
                           # memos are 64-128 kbit/s, and the lower rate gives the longer (safer) guess
DECODED_RATE = 48_000      # Hz assumed for what ffmpeg decodes (phones record at 44.1 or 48 kHz), mono...
FLAC_RATIO = 0.6           # ...and 16-bit FLAC keeps about 60 % of the PCM bytes of speech
LONG_CLIP_SECONDS = 7.5    # a long recording is cut into clips of 1-15 s; the mean, for counting clips
# left free after preparing, too little to train: a run keeps a few checkpoints with its optimizer's state (about
# 1 GB in all for Matcha base, several GB each for F5) and a pretrained base is a 1-3 GB download. An absolute size: a share
# of the disk called 24 GB free of 270 GB "little room" for a 16 MB dataset
TRAINING_ROOM = 10e9
HEAD = 1024                # bytes read from each WAV/FLAC file or zip member to find its length
GB = 1e9


@dataclass
class Scan:
    """What the uploads hold, as far as headers and sizes tell."""
    dev: int                      # the workspace's disk: a file already on it is hard-linked into raw/, not copied
    clip_max: float = 20.0        # s; a longer file is a recording, cut into clips of a few seconds
    seconds: float = 0.0          # audio in all readable files (guessed lengths included)
    clips: float = 0.0            # clips preparation will make of them
    raw_bytes: int = 0            # new bytes the import writes into raw/
    linked_bytes: int = 0         # bytes brought in as hard links instead
    linked_zip: bool = False      # a zip among them (kept as received, beside its unpacked files)
    in_place_bytes: int = 0       # bytes of folders read where they are (the owner's data folders)
    decoded_seconds: float = 0.0  # of `seconds`, in formats ffmpeg decodes first
    guessed: list[str] = field(default_factory=list)     # length guessed from the size
    unreadable: list[str] = field(default_factory=list)  # "name (why)": no clip will come of it


# ------------------------------------------------------------------------------- audio headers
def header_seconds(head: bytes, size: int) -> float | None:
    """Length of a PCM WAV or FLAC from its first bytes and its size; None when the header is another kind."""
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return _wav_seconds(head, size)
    if head[:4] == b"fLaC" and len(head) >= 26 and head[4] & 0x7F == 0:  # STREAMINFO comes first
        bits = int.from_bytes(head[18:26], "big")
        rate, frames = bits >> 44, bits & ((1 << 36) - 1)
        return frames / rate if rate and frames else None
    return None


def _wav_seconds(head: bytes, size: int) -> float | None:
    """Walk the RIFF chunks in `head` to 'fmt ' and 'data'; the data may run to the end of the file."""
    pos, byte_rate = 12, 0
    while pos + 8 <= len(head):
        tag, length = head[pos:pos + 4], struct.unpack_from("<I", head, pos + 4)[0]
        if tag == b"fmt " and pos + 24 <= len(head):
            fmt_tag, _, rate, _, align = struct.unpack_from("<HHIIH", head, pos + 8)
            if fmt_tag not in (1, 3, 0xFFFE):  # compressed WAV (ADPCM, GSM...): soundfile knows it
                return None
            byte_rate = rate * align
        elif tag == b"data":
            data = min(length, size - pos - 8) if length not in (0, 0xFFFFFFFF) else size - pos - 8
            return data / byte_rate if byte_rate else None
        pos += 8 + length + (length & 1)
    return None


def wav_cut_short(path: Path) -> tuple[float, float] | None:
    """(seconds its header promises, seconds it holds) of a WAV that ends early (a copy or a recording that did not
    finish: it read as a 0.07 s clip "too short", nothing saying the file was broken); None for a whole one."""
    with open(path, "rb") as f:
        head = f.read(HEAD)
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    promised, held = _wav_seconds(head, 1 << 62), _wav_seconds(head, Path(path).stat().st_size)
    if promised is None or held is None or promised - held <= max(0.1, 0.02 * promised):
        return None
    return promised, held


def file_seconds(path: Path, size: int) -> tuple[float | None, str]:
    """(seconds, how): from the header, else soundfile's header read, else a guess from the size;
    (None, why) when the file is not audio that preparation can read."""
    if size == 0:
        return None, "empty file"
    with open(path, "rb") as f:
        seconds = header_seconds(f.read(HEAD), size)
    if seconds is not None:
        return seconds, "header"
    if needs_ffmpeg(path):  # decoded by ffmpeg later; its header is not read here
        return size * 8 / GUESS_BITRATE, "guess"
    try:  # preparation reads these formats with soundfile too: what it cannot open now gives no clip then
        info = sf.info(str(path))
    except Exception as exc:  # soundfile raises several kinds for a file it cannot read
        return None, f"not readable audio: {short_reason(exc)}"
    if info.frames <= 0 or info.samplerate <= 0:
        return None, "no audio samples"
    return info.frames / info.samplerate, "header"


# ----------------------------------------------------------------------------------- the scan
def _add_audio(scan: Scan, name: str, suffix: str, seconds: float | None, how: str) -> None:
    if seconds is None:
        scan.unreadable.append(f"{name} ({how})")
        return
    scan.seconds += seconds
    scan.clips += 1 if seconds <= scan.clip_max else seconds / LONG_CLIP_SECONDS
    if how == "guess":
        scan.guessed.append(name)
    if suffix in FFMPEG_SUFFIXES or how == "guess":  # a guess is of a file ffmpeg decodes
        scan.decoded_seconds += seconds


def _add_file(scan: Scan, path: str, st: os.stat_result, name: str, in_place: bool = False) -> None:
    """One file copied (or linked, or read in place) into raw/; its audio counted."""
    if in_place:
        scan.in_place_bytes += st.st_size
    elif st.st_dev == scan.dev:
        scan.linked_bytes += st.st_size
        scan.linked_zip |= path.lower().endswith(".zip")
    else:
        scan.raw_bytes += st.st_size + BLOCK // 2
    suffix = os.path.splitext(path)[1].lower()
    if suffix in AUDIO_SUFFIXES:
        _add_audio(scan, name, suffix, *file_seconds(Path(path), st.st_size))


def _walk(folder: str):
    """(path, stat) of the files under `folder` as the import copies them: links and hidden names skipped.
    os.scandir rather than Path.rglob: one system call a file, which matters at 200,000 files."""
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            if entry.is_dir():
                yield from _walk(entry.path)
            elif entry.is_file():
                yield entry.path, entry.stat()


def _add_zip(scan: Scan, path: Path) -> None:
    """The zip is kept as received and extracted: its members are new bytes, their lengths read from
    the first bytes of each (a zip is never extracted to estimate it)."""
    _add_file(scan, str(path), path.stat(), path.name)
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                scan.raw_bytes += info.file_size + BLOCK // 2
                parts = entry_name(info).replace("\\", "/").split("/")
                suffix = os.path.splitext(parts[-1])[1].lower()
                if suffix in AUDIO_SUFFIXES and not any(p.startswith(".") or p == "__MACOSX" for p in parts):
                    _add_audio(scan, f"{path.name}:{entry_name(info)}", suffix, *_member_seconds(zf, info))
    except (zipfile.BadZipFile, OSError) as exc:
        scan.unreadable.append(f"{path.name} (not a readable zip: {exc})")


def _member_seconds(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[float | None, str]:
    if info.file_size == 0:
        return None, "empty file"
    try:
        with zf.open(info) as f:
            seconds = header_seconds(f.read(HEAD), info.file_size)
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError) as exc:  # corrupt or encrypted member
        return None, f"cannot be extracted: {exc}"
    return (seconds, "header") if seconds is not None else (info.file_size * 8 / GUESS_BITRATE, "guess")


def _add_table(scan: Scan, table: Path, columns: dict | None) -> None:
    """A CSV given alone brings the audio it names from its own folder."""
    from utils.datasets.sources import guess_columns, read_table

    _add_file(scan, str(table), table.stat(), table.name)
    try:
        frame = read_table(table)
    except StudioError as exc:
        scan.unreadable.append(f"{table.name} ({exc})")
        return
    column = (columns or {}).get("audio") or guess_columns(frame)["audio"]
    if column not in frame.columns:
        scan.unreadable.append(f"{table.name} (which column names the audio is not clear)")
        return
    for ref in frame[column]:
        ref = str(ref).strip().replace("\\", "/")
        tries = [ref] + ([ref + s for s in (".wav", ".flac", ".mp3", ".ogg")] if not Path(ref).suffix else [])
        found = next((table.parent / t for t in tries if ref and (table.parent / t).is_file()), None)
        if found is not None:
            _add_file(scan, str(found), found.stat(), ref)


def scan_sources(sources: Iterable[str | Path], where: Path, columns: dict | None = None,
                 cfg: PrepareConfig = PrepareConfig(), in_place: tuple = ()) -> Scan:
    """Walk the uploads as the import will (symbolic links and hidden files skipped), reading headers only."""
    scan = Scan(dev=os.stat(where).st_dev, clip_max=cfg.max_duration)
    sources = [Path(s) for s in sources]
    for src in sources:
        if src.is_symlink():
            continue
        if not src.exists():
            scan.unreadable.append(f"{src.name} (not found)")
        elif src.is_dir():
            cut, here = len(str(src)) + 1, any(src.resolve().is_relative_to(Path(d).resolve()) for d in in_place)
            for path, st in _walk(str(src)):
                _add_file(scan, path, st, f"{src.name}/{path[cut:]}", here)
        elif src.suffix.lower() == ".zip":
            _add_zip(scan, src)
        elif src.suffix.lower() in (".csv", ".tsv") and len(sources) == 1:
            _add_table(scan, src, columns)
        else:
            _add_file(scan, str(src), src.stat(), src.name)
    return scan


# ------------------------------------------------------------------------------------ estimate
def estimate(sources: Iterable[str | Path], where: str | Path, cfg: PrepareConfig = PrepareConfig(),
             feature_cfg: FeatureConfig | None = FeatureConfig(), columns: dict | None = None,
             in_place: tuple = ()) -> dict:
    """Bytes preparation will write for `sources` into a workspace at `where`, part by part, the
    choices that would shrink it, and the free space of the disk holding `where`."""
    where = Path(where)
    scan = scan_sources(sources, where, columns, cfg, in_place)
    clips = round(scan.clips)
    samples = scan.seconds * cfg.sample_rate
    per_file = BLOCK // 2
    parts = {
        "raw": scan.raw_bytes,
        "decoded": int(scan.decoded_seconds * DECODED_RATE * 2 * FLAC_RATIO),
        "clips": int(samples * 2) + clips * (44 + per_file),  # 16-bit mono WAV, 44-byte header
        "mels": (int((2 if cfg.half_mels else 4) * feature_cfg.n_mels * (samples / feature_cfg.hop_length + clips))
                 + clips * (128 + per_file) if feature_cfg is not None else 0),  # [n_mels, frames], .npy header
        "records": clips * RECORD_BYTES,
    }
    total = sum(parts.values())
    usage = shutil.disk_usage(where)
    uploads = parts["raw"] + parts["decoded"]  # deleted once prepared when they are not kept
    halving = 0 if cfg.half_mels or feature_cfg is None else (parts["mels"] - clips * (128 + per_file)) // 2
    return {"parts": parts, "total": total, "seconds": scan.seconds, "clips": clips,
            "mel_dtype": "float16" if cfg.half_mels else "float32", "keep_uploads": cfg.keep_uploads,
            "after": total - (0 if cfg.keep_uploads else uploads),  # what stays once prepared
            "alternatives": {"without_raw": total - uploads, "half_mels": total - halving,
                             "both": total - uploads - halving},
            "linked": scan.linked_bytes, "linked_zip": scan.linked_zip, "in_place": scan.in_place_bytes,
            "guessed": scan.guessed,
            "unreadable": scan.unreadable,
            "where": str(where), "free": usage.free, "disk": usage.total,
            "fits": total <= usage.free, "tight": usage.free - total < TRAINING_ROOM}


# ------------------------------------------------------------------------------ in plain words
def _gb(n: float) -> str:
    """Bytes in the unit a person reads; never "0 kB" for something that is there."""
    if n >= 0.1 * GB:
        return f"{n / GB:.1f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e3:.0f} kB" if n >= 1e3 else f"{int(n)} bytes"


def _names(items: list[str], k: int = 3) -> str:
    return ", ".join(items[:k]) + (f" and {len(items) - k} more" if len(items) > k else "")


HALF_MELS_CHOICE = "tick \"Mel cache at half precision\" (--half-mels)"
DROP_UPLOADS_CHOICE = "untick \"Keep a copy of the uploads\" (--drop-uploads)"


def shrink_note(est: dict) -> str:
    """The choices not taken yet that would make the dataset smaller, each with its size and where to make it;
    then what else frees room."""
    alt, p, said = est["alternatives"], est["parts"], []
    if est["mel_dtype"] == "float32" and p["mels"]:
        said.append(f"{HALF_MELS_CHOICE}: {_gb(alt['half_mels'])} in all")
    if est["keep_uploads"] and p["raw"] + p["decoded"]:  # linked uploads cost nothing: dropping them saves nothing
        said.append(f"{DROP_UPLOADS_CHOICE}: {_gb(alt['without_raw'])} stays once prepared (the copy is needed "
                    "while preparing, and to prepare again)")
    return ((f"To make it smaller, {'; or '.join(said)}. " if said else "")
            + "Or free space on that disk (delete old runs or datasets), or prepare fewer of the recordings.")


def describe(est: dict, markdown: bool = True) -> str:
    """One paragraph for a curator: the size, what it is made of, the free space, and any problem
    (Markdown for the Dataset tab, plain for the command line)."""
    b, p = "**" if markdown else "", est["parts"]
    copied = "uploads unpacked or copied from other disks" if est["linked"] else "copy of the uploads"
    named = [(copied, p["raw"]), ("decoded copies", p["decoded"]), ("clips", p["clips"]),
             (f"mel cache ({16 if est['mel_dtype'] == 'float16' else 32}-bit)", p["mels"]), ("records", p["records"])]
    audio = f"{est['seconds'] / 3600:.1f} h" if est["seconds"] >= 360 else f"{est['seconds'] / 60:.1f} min"
    text = (f"Preparing will take about {b}{_gb(est['total'])}{b} ({audio} of audio, up to {est['clips']} clips): "
            + ", ".join(f"{part} {_gb(size)}" for part, size in named if size or part == "clips")
            + f"; {_gb(est['free'])} free where the workspace is ({est['where']}).")
    if est["after"] < est["total"]:
        text += f" Once prepared, the copy of the uploads is deleted: {_gb(est['after'])} stays."
    if est["linked"]:
        text += (f" The {_gb(est['linked'])} of uploads already on the workspace's disk"
                 + (" (a zip as received, beside its unpacked files)" if est.get("linked_zip") else "")
                 + " take no more room: the dataset links to them.")
    if est.get("in_place"):
        text += f" {_gb(est['in_place'])} of recordings are read where they are, not copied."
    if est["guessed"]:
        text += (f" The length of {len(est['guessed'])} file(s) ({_names(est['guessed'])}) is guessed from their size "
                 f"({GUESS_BITRATE // 1000} kbit/s).")
    if est["unreadable"]:
        text += f" {len(est['unreadable'])} file(s) cannot be read and are not counted: {_names(est['unreadable'])}."
    if not est["fits"]:
        text += (f"\n\n{b}That does not fit{b}: about {_gb(est['total'])} is needed and {_gb(est['free'])} is free. "
                 + shrink_note(est))
    elif est["tight"]:
        text += (f"\n\n{b}That leaves little room{b}: {_gb(est['free'] - est['total'])} of the disk's "
                 f"{_gb(est['disk'])} would be free, too little for training's checkpoints. " + shrink_note(est))
    return text


# ------------------------------------------------------------------------------ the refusal
def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (a dataset made before: a re-run or a resume reuses them)."""
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                continue
    return total


def check_space(ds_dir: Path, sources: Iterable[str | Path], where: Path, **options) -> dict:
    """The estimate for preparing `sources` into `ds_dir`; a StudioError, before anything is written,
    when the disk clearly cannot hold it. What the dataset folder already holds (an interrupted run,
    a re-import) counts as done, so a resume on a nearly full disk is not refused."""
    est = estimate(sources, where, **options)
    need = est["total"] - (folder_bytes(ds_dir) if ds_dir.exists() else 0)
    if need > est["free"]:
        raise StudioError(f"Not enough free disk to prepare {ds_dir.name!r}: it needs about {_gb(need)} and the disk "
                          f"holding the workspace ({where}) has {_gb(est['free'])} free. Nothing was written. "
                          + shrink_note(est))
    return est
