"""Bring an upload into `raw/` byte for byte, then find the utterances in it, format by format.

Formats: LJSpeech (`metadata.csv` + `wavs/`), CSV/TSV (audio path and text columns), audio + `.txt`
pairs, long recordings + `.srt`/`.vtt`, and long recordings alone (cut later by VAD). Subtitles cut their
recording in any layout (a lecture beside a metadata.csv too). Every problem, and every file left unused, becomes
a message naming the file or row; discovery never stops at the first one.
"""
from __future__ import annotations

import csv
import io
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pandas as pd

from utils.datasets.config import AUDIO_SUFFIXES, SUBTITLE_SUFFIXES, PrepareConfig
from utils.datasets.safezip import copy_file, copy_tree, safe_extract
from utils.datasets.subtitles import read_text_file
from utils.events import StudioError

FORMATS = ("auto", "ljspeech", "csv", "pairs", "subtitles", "long")
DEFAULT_SPEAKER = "default"
_AUDIO_NAMES = ("audio", "path", "file", "filename", "file_name", "wav", "audio_path", "audio_file", "audio_filepath", "clip")
_TEXT_NAMES = ("text", "transcript", "transcription", "sentence", "utterance", "normalized_text", "raw_text")
_SPEAKER_NAMES = ("speaker", "speaker_id", "spk", "client_id", "voice")
_HEADER_WORDS = frozenset(_AUDIO_NAMES + _TEXT_NAMES + _SPEAKER_NAMES + (
    "id", "utt_id", "utterance_id", "name", "normalized", "normalized_transcription", "normalised", "label"))


@dataclass
class Item:
    """One utterance to prepare (or one long recording to cut into utterances)."""
    id: str
    audio: Path                 # absolute path of the raw file
    source: str                 # "raw/..." relative to the dataset folder (+ "#t=start,end" for cuts)
    text: str = ""
    speaker: str = DEFAULT_SPEAKER
    start: float | None = None  # s; None = whole file
    end: float | None = None
    kind: str = "clip"          # clip | long | subtitled
    subtitles: Path | None = None
    notes: dict[str, str] = field(default_factory=dict)  # flag -> message, found while reading


@dataclass
class Discovery:
    format: str
    items: list[Item]
    errors: list[dict]  # {"source", "message"}
    notes: list[str] = field(default_factory=list)  # how the files were read, said at info level (not errors)


# ------------------------------------------------------------------------------ import into raw/
def import_source(sources: list[Path], raw: Path, cfg: PrepareConfig, in_place: tuple = ()) -> list[dict]:
    """Copy (or safely extract) each upload into `raw/`; a folder inside one of `in_place` (the owner's data
    folders: a mounted drive) is linked there instead and read where it is. Returns messages about skipped parts, and
    (level info, with the file's `path` and `kind`) the files given again that replace the ones read before."""
    errors, replaced = [], []
    for src in sources:
        src = Path(src)
        if src.is_symlink():
            errors.append({"source": src.name, "message": f"{src.name}: skipped (symbolic link)."})
            continue
        if not src.exists():
            raise StudioError(f"{src}: not found.")
        try:
            if src.is_dir() and any(src.resolve().is_relative_to(Path(d).resolve()) for d in in_place):
                link_folder(src, raw / src.name)
                msgs = []
            elif src.is_dir():
                _, msgs = copy_tree(src, raw / src.name, replaced)
            elif src.suffix.lower() == ".zip":
                before = len(replaced)
                kept = copy_file(src, raw / src.name, replaced)  # the same zip again: its files are those extracted
                _, msgs = safe_extract(kept, raw / src.stem, cfg.max_zip_bytes, cfg.max_zip_entries, cfg.max_zip_ratio,
                                       replaced if len(replaced) > before else None)
            else:
                copy_file(src, raw / src.name, replaced)
                msgs = []
                for sib in src.parent.glob(src.stem + ".*"):  # a recording's own subtitles / transcript
                    if sib != src and sib.suffix.lower() in SUBTITLE_SUFFIXES + (".txt",) and sib.is_file():
                        copy_file(sib, raw / sib.name, replaced)
        except StudioError as exc:  # this upload is unusable; the others go on
            errors.append({"source": src.name, "message": str(exc)})
            continue
        errors += [{"source": m.split(":")[0], "message": m} for m in msgs]
    return errors + replaced


def link_folder(src: Path, link: Path) -> None:
    """raw/<name> -> the folder, read in place (a re-import of the same folder keeps its link)."""
    if link.is_symlink() and link.resolve() == src.resolve():
        return
    if link.exists() or link.is_symlink():
        raise StudioError(f"{src.name}: raw/ already holds something of that name; prepare it under another "
                          "dataset name.")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(src.resolve(), target_is_directory=True)


def linked_folders(raw: Path) -> list[Path]:
    """The folders read in place: links directly in raw/ (only the import makes them: copies and zips skip links)."""
    return sorted(p for p in raw.iterdir() if p.is_symlink() and p.is_dir()) if raw.is_dir() else []


def raw_files(raw: Path) -> list[Path]:
    """Files under raw/ that are data (zips are kept as received but read through their extraction), those of the
    folders read in place included (links inside them are not followed)."""
    found = [p for p in raw.rglob("*") if p.is_file() and not p.is_symlink()]
    for link in linked_folders(raw):
        found += [Path(top) / f for top, _, names in os.walk(link) for f in names
                  if not os.path.islink(os.path.join(top, f))]
    return sorted(p for p in found if p.suffix.lower() != ".zip"
                  and not any(part.startswith(".") or part == "__MACOSX" for part in p.relative_to(raw).parts))


# --------------------------------------------------------------------------------------- discover
def discover(ds_dir: Path, fmt: str = "auto", columns: dict | None = None, origin: Path | None = None,
             set_aside: tuple[Path, ...] = (), owners: dict[str, str] | None = None) -> Discovery:
    """Find utterances under `ds_dir/raw`. `origin` is where a lone CSV came from (its audio is copied in);
    `set_aside`: files of raw/ that are not read (nor pick the format), the caller says why; `owners`: the dataset's
    rows so far, id -> source, so a recording keeps the id (and the decisions) it had."""
    raw = ds_dir / "raw"
    files = [p for p in raw_files(raw) if p not in set_aside]
    if not files:
        raise StudioError("Nothing usable was uploaded: no files found (an empty folder or zip?).")
    fmt = detect_format(files) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise StudioError(f"Unknown format {fmt!r}; use one of {', '.join(FORMATS)}.")
    items, errors = {"ljspeech": _ljspeech, "csv": _csv, "pairs": _pairs, "subtitles": _subtitles,
                     "long": _long}[fmt](ds_dir, files, columns or {}, origin)
    said = _dedupe_ids(items, owners or {})
    notes = [e["message"] for e in errors if e.get("level") == "info"] + said
    return Discovery(fmt, items, [e for e in errors if e.get("level") != "info"], notes)


def detect_format(files: list[Path]) -> str:
    suffixes = Counter(p.suffix.lower() for p in files)
    stems_audio = {p.with_suffix("") for p in files if p.suffix.lower() in AUDIO_SUFFIXES}
    if any(p.name.lower() == "metadata.csv" for p in files):
        return "ljspeech"
    if any(p.suffix.lower() in SUBTITLE_SUFFIXES and p.with_suffix("") in stems_audio for p in files):
        return "subtitles"
    if suffixes[".csv"] or suffixes[".tsv"]:
        return "csv"
    if any(p.suffix.lower() == ".txt" for p in files):
        return "pairs"
    return "long"


def _rel(ds_dir: Path, path: Path) -> str:
    return path.relative_to(ds_dir).as_posix()


def safe_id(text: str) -> str:
    """Ids become file names: keep letters (any script), digits, '-', '_' and '.'."""
    text = unicodedata.normalize("NFC", str(text).strip())
    text = re.sub(r"[^\w.-]+", "_", text).strip("._") or "utt"
    return text[:120]


def line_id(uid: str) -> str:
    """A metadata line's row id: a line that names its file (a.wav|...) gives the id a, as a CSV's file column does
    (the row was am003.wav and its clip am003.wav.wav); a dotted id (spk1.utt3) stays whole."""
    return safe_id(str(Path(uid).with_suffix("")) if Path(uid).suffix.lower() in AUDIO_SUFFIXES else uid)


def _dedupe_ids(items: list[Item], owners: dict[str, str]) -> list[str]:
    """Several recordings under one id: the one that held it before (`owners`: id -> source) keeps it, else the first
    found. One in another folder takes that folder's name too (Day2/001.wav is Day2_001: sessions numbered alike are
    all trained on); the others are renamed id-dup2, id-dup3, ... and flagged. A day-two folder that sorts before day
    one's would otherwise take the id, and day one's review (an Exclude, a fixed text) would land on the new
    recording. Returns what was said of the renamed by folder."""
    holder = {}
    for it in items:
        if owners.get(it.id) == it.source:
            holder.setdefault(it.id, it)
    taken = {it.id for it in items}
    renamed: Counter = Counter()
    by_folder: list[str] = []
    for it in items:
        if holder.setdefault(it.id, it) is it:
            continue
        folder = _own_folder(it.source, holder[it.id].source)
        qualified = safe_id(f"{folder}_{it.id}")
        if folder and qualified not in taken:
            by_folder.append(f"{it.id} → {qualified}")
            taken.add(qualified)
            holder[qualified] = it
            it.id = qualified
            continue
        renamed[it.id] += 1
        n = renamed[it.id] + 1
        it.notes["duplicate_id"] = (
            f"id {it.id!r} is given to the same recording again, with this text: kept as row {it.id}-dup{n}, "
            f"beside row {it.id} with the first text; keep the row whose text is right and exclude the other"
            if holder[it.id].source == it.source else
            f"id {it.id!r} is given to {n} or more recordings; this one is renamed {it.id}-dup{n}")
        it.id = f"{it.id}-dup{n}"
    if not by_folder:
        return []
    shown = ", ".join(by_folder[:5]) + (f" and {len(by_folder) - 5} more" if len(by_folder) > 5 else "")
    return [f"{len(by_folder)} recording(s) share a name with one in another folder: each takes its folder's name "
            f"({shown})."]


def _own_folder(source: str, other: str) -> str:
    """The first folder of `source`'s path that is not `other`'s (Day2 of raw/days/Day2/001.wav beside
    raw/days/Day1/001.wav, spk2 of raw/spk2/wavs/001.wav beside raw/spk1/wavs/...); "" when both lie in one folder."""
    mine, theirs = PurePosixPath(source).parent.parts, PurePosixPath(other).parent.parts
    if mine == theirs:
        return ""
    return next((a for a, b in zip(mine, theirs) if a != b), mine[-1] if mine else "")


@dataclass
class AudioIndex:
    """The upload's audio files by lower-case name and stem (a reference by file name alone), and by their path
    (a reference relative to its table, found without asking the disk: 7 resolves a row were 62 % of a preparation
    run again on 1,113 clips)."""
    by_name: dict[str, list[Path]]
    by_path: dict[str, Path]


def _audio_index(files: list[Path]) -> AudioIndex:
    index = AudioIndex({}, {})
    for p in files:
        if p.suffix.lower() in AUDIO_SUFFIXES:
            index.by_name.setdefault(p.name.lower(), []).append(p)
            index.by_name.setdefault(p.stem.lower(), []).append(p)
            index.by_path[os.path.normpath(p)] = p
    return index


def _find_audio(value: str, bases: list[Path], index: AudioIndex, raw: Path, origin: Path | None) -> Path | None:
    """Resolve an audio reference: relative to each base, with or without suffix, then by file name. A path the
    index holds is taken from it; only a reference it does not hold (a link, a '..', a file not found) asks the disk."""
    value = value.strip().replace("\\", "/")
    if not value:
        return None
    named = Path(value).suffix.lower() in AUDIO_SUFFIXES  # an id may hold dots of its own (spk1.utt3)
    candidates = [value] + ([] if named else [value + s for s in (".wav", ".flac", ".mp3", ".ogg")])
    tried = (os.path.normpath(os.path.join(base, sub + cand)) for base in map(str, bases) for cand in candidates
             for sub in ("", "wavs/", "clips/", "audio/"))
    if (known := next((index.by_path[t] for t in tried if t in index.by_path), None)) is not None:
        return known
    linked = [(link, link.resolve()) for link in linked_folders(raw)]
    for base in bases:
        for cand in candidates:
            for sub in ("", "wavs/", "clips/", "audio/"):
                p = (base / (sub + cand)).resolve()
                if p.is_relative_to(raw) and p.is_file():
                    return p
                for link, target in linked:  # a folder read in place: the path as it lies under raw/
                    if p.is_relative_to(target) and p.is_file():
                        return link / p.relative_to(target)
    if origin is not None:  # a CSV given alone: its audio lies next to it, outside the dataset
        for cand in candidates:
            p = (origin / cand).resolve()
            if p.is_relative_to(origin.resolve()) and p.is_file() and not p.is_symlink():
                return copy_file(p, raw / origin.name / p.relative_to(origin.resolve()))
    hits = index.by_name.get(Path(value).name.lower()) or index.by_name.get(Path(value).stem.lower()) or []
    return hits[0] if len(hits) == 1 else None


# -------------------------------------------------------------------------------------- LJSpeech
def _ljspeech(ds_dir, files, columns, origin):
    raw = ds_dir / "raw"
    metas = [p for p in files if p.name.lower() == "metadata.csv"]
    if not metas:
        raise StudioError("LJSpeech layout needs a metadata.csv (lines 'id|text' or 'id|speaker|text').")
    index = _audio_index(files)
    items, errors, used = [], [], set()
    for meta in metas:
        numbered = [(n, l) for n, l in enumerate(read_text_file(meta).replace("\r", "").split("\n"), 1) if l.strip()]
        lines, line_numbers = [l for _, l in numbered], [n for n, _ in numbered]  # a blank line still counts
        rows, sep, how = _split_metadata(lines)
        if sep != "|":
            errors.append({"source": _rel(ds_dir, meta), "level": "info",
                           "message": f"{_rel(ds_dir, meta)} separates its columns with {SEPARATOR_NAMES[sep]}, not "
                                      f"'|' as LJSpeech does: read as {how}"})
        if rows and _is_header(rows[0], lambda uid: _find_audio(uid, [meta.parent], index, raw, None)):
            errors.append({"source": _rel(ds_dir, meta), "level": "info",
                           "message": f"{_rel(ds_dir, meta)} line {line_numbers[0]} read as a header "
                                      f"({lines[0][:60]!r}), not a clip."})
            rows, lines, line_numbers = rows[1:], lines[1:], line_numbers[1:]
        three = [r for r in rows if len(r) >= 3]
        # id|speaker|text when the middle column looks like a label (few distinct short values, no spaces)
        middle = [r[1].strip() for r in three]
        speaker_col = bool(middle) and all(" " not in m and len(m) <= 40 for m in middle) and \
            len(set(middle)) <= max(1, len(middle) // 2)
        for n, line, r in zip(line_numbers, lines, rows):
            where = f"{_rel(ds_dir, meta)} line {n}"
            if len(r) < 2:
                errors.append({"source": where, "message": f"{where}: expected 'id|text', found {line[:60]!r}."})
                continue
            uid = r[0].strip()
            speaker = r[1].strip() if speaker_col and len(r) >= 3 else DEFAULT_SPEAKER
            text = (r[2] if speaker_col and len(r) >= 3 else r[1]).strip()
            audio = _find_audio(uid, [meta.parent], index, raw, None)
            if audio is None:
                errors.append({"source": where, "message": f"{where}: transcript for {uid!r} has no audio "
                               f"(expected {_expected_audio(uid)})."})
                continue
            used.add(audio)
            items.append(Item(line_id(uid), audio, _rel(ds_dir, audio), text, speaker or DEFAULT_SPEAKER))
    subtitled, ignored = _subtitled(ds_dir, files, used)
    items += subtitled + _orphans(ds_dir, files, used)
    return items, errors + ignored


SEPARATOR_NAMES = {"|": "'|'", "\t": "tabs", ";": "semicolons", ",": "commas"}


def _split_metadata(lines: list[str]) -> tuple[list[list[str]], str, str]:
    """(rows, separator, how the columns were read): LJSpeech's '|'; a metadata.csv written with tabs, semicolons (a spreadsheet's export where
    the comma is the decimal mark) or commas, a common slip, where no line holds a '|' and every line holds the
    other. Semicolons and commas are read as a spreadsheet writes them (quotes around a text that holds one); each
    row becomes id + text (_spreadsheet_rows)."""
    if lines and not any("|" in l for l in lines):
        for sep in ("\t", ";", ","):
            if all(sep in l for l in lines):
                if sep == "\t":
                    return [l.split(sep) for l in lines], sep, f"id{sep}text"
                rows, how = _spreadsheet_rows(lines, sep)
                return rows, sep, how
    return [l.split("|") for l in lines], "|", "id|text"


def _spreadsheet_rows(lines: list[str], sep: str) -> tuple[list[list[str]], str]:
    """Rows of a metadata.csv a spreadsheet wrote, as [id, text], and how they were read. LJSpeech's three columns
    (id, text, normalized text) give the text column: named so by a header, or found in every row (a normalized copy
    was appended to the text, every transcript said twice). Otherwise more fields are a text holding the separator
    unquoted."""
    rows = list(csv.reader(lines, delimiter=sep))
    header = [f.strip().lower() for f in rows[0]] if rows else []
    named = len(header) >= 2 and all(h in _HEADER_WORDS for h in header)
    body = rows[1:] if named else rows
    text_at = next((header.index(n) for n in _TEXT_NAMES + ("label",) if n in header), 1) if named else 1
    # unnamed, three fields in every row are LJSpeech's columns when the third mostly repeats the second (one comma
    # in the text of a file's few rows is not)
    columns = len(header) if named else (3 if body and all(len(r) == 3 for r in body)
                                         and 2 * sum(r[1].strip() == r[2].strip() for r in body) >= len(body) else 0)
    picked = [[r[0], r[text_at]] if columns >= 3 and len(r) == columns else
              [r[0], sep.join(r[1:])] if len(r) >= 2 else r for r in body]
    how = (f"{sep.join(header[:columns]) if named else f'id{sep}text{sep}normalized'}, its text from the column "
           f"{header[text_at] if named else 'text'}" if columns >= 3 else
           f"id{sep}text (a {SEPARATOR_NAMES[sep][:-1]} later in a line is part of its text)")
    return ([rows[0]] if named else []) + picked, how


def _is_header(fields: list[str], find_audio) -> bool:
    """A first line of column names (id|text) is no transcript: every field is a header word and its id names no
    audio (a clip really called text.wav keeps its row)."""
    names = [f.strip().lower() for f in fields]
    return len(names) >= 2 and all(n in _HEADER_WORDS for n in names) and find_audio(fields[0].strip()) is None


def _expected_audio(uid: str) -> str:
    """The path a curator should look for: wavs/<id>.wav for an id, the named file for a line that names one
    (missing.wav, not missing.wav.wav)."""
    name = uid if Path(uid).suffix.lower() in AUDIO_SUFFIXES else f"{uid}.wav"
    return name if "/" in name else f"wavs/{name}"


def _orphans(ds_dir, files, used) -> list[Item]:
    """Audio that no transcript mentions: kept, flagged as missing text (to transcribe later)."""
    return [Item(safe_id(p.stem), p, _rel(ds_dir, p), "") for p in files
            if p.suffix.lower() in AUDIO_SUFFIXES and p not in used]


# ------------------------------------------------------------------------------------------- CSV
def read_table(path: Path) -> pd.DataFrame:
    """A CSV/TSV of strings: encoding from the BOM (UTF-8, UTF-16) and separator sniffed. Its index is the row's
    number in the file less one: a blank line is dropped but counted, so a row is named by the line it is on."""
    text = read_text_file(path)
    sample = "\n".join(text.splitlines()[:20])
    if path.suffix.lower() == ".tsv":
        sep = "\t"
    else:
        try:
            sep = csv.Sniffer().sniff(sample, delimiters=",\t|;").delimiter
        except csv.Error:
            sep = max(",\t|;", key=sample.count)
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, header=None, dtype=str, keep_default_na=False,
                            skip_blank_lines=False, engine="python", quoting=csv.QUOTE_MINIMAL)
        frame = frame[~(frame.fillna("").astype(str).apply(lambda c: c.str.strip()) == "").all(axis=1)]
    except Exception as exc:
        raise StudioError(f"{path.name}: cannot be read as a table ({exc}).") from exc
    if frame.empty:
        raise StudioError(f"{path.name}: the table is empty.")
    first = [str(v).strip() for v in frame.iloc[0]]
    looks_header = not any(v.lower().endswith(AUDIO_SUFFIXES) for v in first) and (
        any(v.lower() in _AUDIO_NAMES + _TEXT_NAMES + _SPEAKER_NAMES for v in first)
        or (len(frame) > 1 and any(str(v).lower().endswith(AUDIO_SUFFIXES) for v in frame.iloc[1])))
    if looks_header:
        frame = frame.iloc[1:]
        frame.columns = [v or f"column {i + 1}" for i, v in enumerate(first)]
    else:
        frame.columns = [f"column {i + 1}" for i in range(frame.shape[1])]
    return frame


def guess_columns(frame: pd.DataFrame) -> dict:
    """{"audio", "text", "speaker", "ambiguous": bool, "columns": [...]} from names, then from values."""
    cols = list(frame.columns)
    by_name = lambda names: next((c for c in cols if str(c).strip().lower() in names), None)
    audio, text, speaker = by_name(_AUDIO_NAMES), by_name(_TEXT_NAMES), by_name(_SPEAKER_NAMES)
    sample = frame.head(200)
    if audio is None:
        share = {c: sample[c].str.lower().str.strip().str.endswith(AUDIO_SUFFIXES).mean() for c in cols}
        best = max(share, key=share.get)
        audio = best if share[best] > 0.5 else None
    candidates = []
    if text is None:
        scores = {c: sample[c].map(lambda v: sum(0x1200 <= ord(ch) <= 0x139F or ch.isalpha() for ch in v)).mean()
                  for c in cols if c not in (audio, speaker)}
        candidates = [c for c, s in sorted(scores.items(), key=lambda kv: -kv[1]) if s > 3]
        text = candidates[0] if candidates else None
    ambiguous = audio is None or text is None or len(candidates) > 1
    return {"audio": audio, "text": text, "speaker": speaker, "ambiguous": ambiguous, "columns": cols}


def inspect_table(path: Path) -> dict:
    frame = read_table(Path(path))
    return {**guess_columns(frame), "rows": len(frame), "preview": frame.head(5)}


def _csv(ds_dir, files, columns, origin):
    raw = ds_dir / "raw"
    tables = [p for p in files if p.suffix.lower() in (".csv", ".tsv")]
    if not tables:
        raise StudioError("No .csv or .tsv file was found in the upload (a table saved as .txt is read once it is "
                          "renamed .tsv).")
    index = _audio_index(files)
    items, errors, used = [], [], set()
    for table in tables:
        try:
            frame = read_table(table)
        except StudioError as exc:
            errors.append({"source": _rel(ds_dir, table), "message": str(exc)})
            continue
        guess = guess_columns(frame)
        pick = {k: columns.get(k) or guess[k] for k in ("audio", "text", "speaker")}
        for k, v in pick.items():
            if v is not None and v not in frame.columns:
                raise StudioError(f"{table.name}: no column {v!r}; the columns are {', '.join(map(str, frame.columns))}.")
        if pick["audio"] is None or pick["text"] is None or (guess["ambiguous"] and not columns.get("text")):
            raise StudioError(f"{table.name}: choose the audio and text columns (the header is ambiguous): the "
                              "Dataset tab's column pickers, or --audio-column and --text-column on the command line. "
                              f"Columns: {', '.join(map(str, frame.columns))}.")
        for n, row in frame.iterrows():
            where = f"{_rel(ds_dir, table)} row {n + 1}"
            ref = str(row[pick["audio"]])
            audio = _find_audio(ref, [table.parent], index, raw, origin)
            if audio is None:
                errors.append({"source": where, "message": f"{where}: names no audio file; fill in its "
                               f"{pick['audio']} column or delete the row." if not ref.strip() else
                               f"{where}: audio {ref!r} does not exist"
                               + (" (or points outside the dataset)." if ".." in ref or ref.startswith("/") else ".")})
                continue
            used.add(audio)
            speaker = str(row[pick["speaker"]]).strip() if pick["speaker"] else ""
            items.append(Item(safe_id(Path(ref).stem), audio, _rel(ds_dir, audio), str(row[pick["text"]]).strip(),
                              speaker or DEFAULT_SPEAKER))
    subtitled, ignored = _subtitled(ds_dir, files, used)
    return items + subtitled, errors + ignored + _not_in_tables(ds_dir, files, used, tables)


def _not_in_tables(ds_dir, files, used, tables) -> list[dict]:
    """Recordings of the upload that no row of its tables names: left out, said in one line (they went unsaid)."""
    left = [_rel(ds_dir, p) for p in files if p.suffix.lower() in AUDIO_SUFFIXES and p not in used]
    if not left:
        return []
    named = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    return [{"source": left[0], "level": "info", "message": f"{len(left)} recording(s) that no row of "
             f"{', '.join(p.name for p in tables)} names are left out: {named}; add rows for them to prepare them."}]


# ----------------------------------------------------------------------------------------- pairs
def _pairs(ds_dir, files, columns, origin):
    audio = {p.with_suffix(""): p for p in files if p.suffix.lower() in AUDIO_SUFFIXES}
    items, errors = [], []
    for p in files:
        if p.suffix.lower() == ".txt" and p.with_suffix("") not in audio:
            errors.append({"source": _rel(ds_dir, p), "message": f"{_rel(ds_dir, p)}: " + (
                f"a table of transcripts (its columns are separated by tabs, as Excel's \"Unicode Text\" saves): "
                f"rename it {p.stem}.tsv and prepare again, and it is read as one." if _looks_like_table(p) else
                "transcript with no audio (expected an audio file with the same name).")})
    for stem, p in sorted(audio.items()):
        txt = stem.with_name(stem.name + ".txt")  # spk1.utt3.wav's is spk1.utt3.txt, not spk1.txt
        try:
            text = read_text_file(txt).strip() if txt.exists() else ""
        except StudioError as exc:
            errors.append({"source": _rel(ds_dir, txt), "message": str(exc)})
            continue
        items.append(Item(safe_id(p.stem), p, _rel(ds_dir, p), " ".join(text.split())))
    return items, errors


def _looks_like_table(path: Path) -> bool:
    """A .txt whose first line is columns separated by tabs, one of them audio (a name like wav, or a file name)."""
    try:
        first = read_text_file(path).lstrip().split("\n", 1)[0]
    except StudioError:
        return False
    fields = [f.strip().strip('"').lower() for f in first.split("\t")]
    return len(fields) >= 2 and any(f in _AUDIO_NAMES or f.endswith(AUDIO_SUFFIXES) for f in fields)


# ---------------------------------------------------------------------------- long recordings
def _subtitled(ds_dir, files, used: set) -> tuple[list[Item], list[dict]]:
    """Recordings cut by their own subtitles (`.srt`/`.vtt` of the same name, in any folder of the upload, whatever
    its layout), and a message for each subtitle file left unused, saying why. `used`: the recordings a transcript
    already names (they keep it); those taken here are added."""
    audio = {p.with_suffix(""): p for p in files if p.suffix.lower() in AUDIO_SUFFIXES}
    items, errors = [], []
    for p in files:
        if p.suffix.lower() not in SUBTITLE_SUFFIXES:
            continue
        rec, where = audio.get(p.with_suffix("")), _rel(ds_dir, p)
        if rec is None:
            why = "subtitles with no recording (expected an audio file with the same name)"
        elif rec in used:
            why = f"not used: {rec.name} already has its text (from a transcript table or other subtitles)"
        else:
            used.add(rec)
            items.append(Item(safe_id(rec.stem), rec, _rel(ds_dir, rec), kind="subtitled", subtitles=p))
            continue
        errors.append({"source": where, "message": f"{where}: {why}; ignored."})
    return items, errors


def _subtitles(ds_dir, files, columns, origin):
    used: set[Path] = set()
    items, errors = _subtitled(ds_dir, files, used)
    for p in files:  # recordings without subtitles: cut by VAD, transcribe later
        kind = p.suffix.lower()
        if kind in AUDIO_SUFFIXES and p not in used:
            items.append(Item(safe_id(p.stem), p, _rel(ds_dir, p), kind="long"))
        elif kind not in AUDIO_SUFFIXES + SUBTITLE_SUFFIXES:
            why = ("a transcript, not read in an upload of recordings with subtitles (choose Format csv or pairs to "
                   "read it)" if kind in (".csv", ".tsv", ".txt") else "not an audio or subtitle file")
            errors.append({"source": _rel(ds_dir, p), "message": f"{_rel(ds_dir, p)}: {why}; ignored."})
    return items, errors


def _long(ds_dir, files, columns, origin):
    """Recordings cut at pauses, their clips without text. A transcript beside them was read fine and is not used:
    said as such (it was "not an audio file", then counted among files that could not be read)."""
    items = [Item(safe_id(p.stem), p, _rel(ds_dir, p), kind="long") for p in files if p.suffix.lower() in AUDIO_SUFFIXES]
    errors = [{"source": _rel(ds_dir, p), "level": "info", "message": f"{_rel(ds_dir, p)}: a transcript, not used "
               "when recordings are cut at pauses (Format long): their clips get no text; draft or type it, or give "
               "the recording subtitles (.srt/.vtt) to keep its text."} if p.suffix.lower() in (".txt", ".csv", ".tsv")
              else {"source": _rel(ds_dir, p), "message": f"{_rel(ds_dir, p)}: not an audio file; ignored."}
              for p in files if p.suffix.lower() not in AUDIO_SUFFIXES]
    return items, errors
