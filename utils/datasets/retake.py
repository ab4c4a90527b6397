"""A new take of one row: the recording a clip was made of replaced by another (recorded in the browser, or uploaded),
the old one kept hidden beside it, and that one clip made again as a preparation makes it (decoded, cleaned, checked,
its mels cached), its row judged afresh. Only that row is read and written: a take costs the same at 200 rows and
at 200k (a whole preparation again took 2 s an audio hour, 6 min at 200 h).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import soundfile as sf

from utils.audio import FeatureConfig, decode_with_ffmpeg, load_audio, needs_ffmpeg
from utils.datasets import checks, store
from utils.datasets.clips import process_clip
from utils.datasets.config import PrepareConfig
from utils.datasets.curate import report_again
from utils.datasets.features import record_digests
from utils.datasets.manifest import get_rows, manifest_folder, update_rows
from utils.datasets.prepare import STATE_DIR, clip_key, decoded_of, describe, finish_row, source_stamp
from utils.datasets.safezip import copy_file, same_bytes, set_aside
from utils.datasets.sources import Item
from utils.events import Event, StudioError
from utils.text.lexicon import dictionary_stamp, load_user_dict
from utils.workspace import Workspace, append_jsonl_rows, read_json

# the format a take of another format is written in, by the old recording's suffix (libsndfile writes these)
WRITTEN_AS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG", ".oga": "OGG", ".mp3": "MP3", ".aif": "AIFF",
              ".aiff": "AIFF"}


def replace_recording(ws: Workspace, name: str, row_id: str, take: str | Path) -> Iterator[Event]:
    """Put `take` in the place of the recording row `row_id` of dataset `name` was made of and make its clip again;
    yields what was done (the last event carries the dataset's summary). Refused, with what to do and nothing moved,
    for a row cut from a long recording, a recording read where it lies (a data folder), a dataset that kept no copy of
    its uploads, a run training on the dataset, and a take that could not make a clip."""
    ds_dir, take = ws.dataset_dir(name), Path(take)
    row = get_rows(ws, name, [row_id]).get(row_id)
    if row is None:
        raise StudioError(f"Dataset {name!r} has no row {row_id!r}: pick a row of its table first.")
    old = recording_of(ds_dir, row)
    _not_while_training(ws, name)
    meta = read_json(ds_dir / "prepare.json", default={}) or {}
    cfg = PrepareConfig.from_dict(meta.get("config"))
    _usable(take, cfg)
    if same_bytes(take, old):
        raise StudioError(f"{take.name}: this take is the recording row {row_id} already has; nothing was changed.")
    before = set_aside(old, take.name)
    try:
        how = _put_in_place(take, old)
        res = _make_clip(ws, name, row, old, cfg, meta)
    except BaseException:  # as it was: the old recording back, and no decoding of the take left to be read for it
        old.unlink(missing_ok=True)
        before.replace(old)
        decoded_of(ds_dir, old).unlink(missing_ok=True)
        raise
    yield Event("import", message=f"Row {row_id}: the new take replaces its recording {row['source']}, which is kept "
                f"as {before.name} beside it.{how}")
    yield from _update_row(ws, name, row, res, cfg, meta)


def recording_of(ds_dir: Path, row: dict) -> Path:
    """The file under raw/ a row's clip was made of, or why a take cannot replace it."""
    source, rid = str(row.get("source") or ""), row["id"]
    if "#t=" in source:
        raise StudioError(f"Row {rid} was cut from the long recording {source.split('#')[0].removeprefix('raw/')}: "
                          "one of its clips cannot be replaced alone. Exclude the row, or give the whole recording "
                          "again (a recording given again under its name replaces the old one).")
    if (read_json(ds_dir / "prepare.json", default={}) or {}).get("uploads_dropped"):
        raise StudioError(f"Row {rid}: this dataset kept no copy of its uploads (Keep a copy of the uploads was "
                          "unticked), so a recording of it cannot be replaced; prepare the recordings again with it "
                          "ticked.")
    path = ds_dir / source
    raw = ds_dir / "raw"
    if not source.startswith("raw/") or not path.is_file():
        raise StudioError(f"Row {rid}: its recording ({source or 'none named'}) is not in the dataset's raw/ folder "
                          "any more, so there is nothing to replace; prepare the dataset again from its recordings.")
    linked = next((p for p in path.relative_to(raw).parents if (raw / p).is_symlink()), None)
    if linked is not None:
        raise StudioError(f"Row {rid}: its recording is read where it lies, in your folder {(raw / linked).resolve()}"
                          f" (it was not copied in). Save the new take over {path.name} there, then press Prepare "
                          "again: a recording changed where it lies is made again.")
    return path


KEPT_NOTES = ("duplicate_id", "duplicate_text")  # a row's notes that do not depend on its audio


def _make_clip(ws: Workspace, name: str, row: dict, recording: Path, cfg: PrepareConfig, meta: dict) -> dict:
    """The row's clip made again from `recording` as a preparation makes it (a phone's format decoded by ffmpeg
    first), its mels cached; written to done.jsonl under the key a preparation looks for, so the next one keeps it."""
    ds_dir = ws.dataset_dir(name)
    src = decode_with_ffmpeg(recording, decoded_of(ds_dir, recording)) if needs_ffmpeg(recording) else recording
    features = FeatureConfig.from_dict(meta["features"]) if meta.get("features") else None
    user_dict = load_user_dict(ws)
    task = {"id": row["id"], "src": str(src), "source": row["source"], "start": None, "end": None,
            "out": str(ds_dir / "audio" / f"{row['id']}.wav"), "text": row.get("text") or "", "cfg": cfg.to_dict(),
            "dictionary": (str(ws.pronunciations), dictionary_stamp(user_dict)),
            **({"mel_dir": str(ds_dir / "features" / features.key()), "mel_cfg": features.to_dict(),
                "mel_half": cfg.half_mels} if features else {})}
    res = process_clip(task)
    if "error" in res:
        raise StudioError(res["error"])
    if not row.get("text_fixed"):  # the files' text is the row's: the key a preparation will compute for it
        item = Item(row["id"], src, row["source"], text=row.get("text") or "")
        append_jsonl_rows(ds_dir / STATE_DIR / "done.jsonl", [{"key": clip_key(item, cfg),
                                                                 "result": {**res, "stamp": source_stamp(src)}}])
    return res


def _update_row(ws: Workspace, name: str, row: dict, res: dict, cfg: PrepareConfig, meta: dict) -> Iterator[Event]:
    """The row as its new clip makes it: measured, its text checked, undecided, no music removal (done on the old
    clip), its speaking rate against the table's; only it is written, then the report."""
    ds_dir = ws.dataset_dir(name)
    new = {**row, "audio": f"audio/{row['id']}.wav", "duration": res["duration"], "sha1": res["sha1"],
           "normalized": res["normalized"], "phonemes": res["phonemes"], "metrics": res["metrics"], "music": None,
           "review": None, "flags": [],
           "notes": {**{k: v for k, v in (row.get("notes") or {}).items() if k in KEPT_NOTES}, **res["notes"]}}
    new["flags"] = checks.flags_of(new["notes"])
    finish_row(new, cfg, store.rate_median(manifest_folder(ws, name)))
    update_rows(ws, name, [new])
    record_digests(ds_dir, [(ds_dir / new["audio"], new["sha1"])])
    yield Event("clips", 1, 1, f"{row['source']}: made again from the take, {res['duration']:.1f} s")
    if row.get("review") or row.get("music"):
        what = " and ".join(w for w, had in (("your " + str(row.get("review")).capitalize(), row.get("review")),
                                              ("its music removal", row.get("music"))) if had)
        yield Event("check", message=f"{what} of row {row['id']} went with the old recording: listen to the new "
                    "clip, and decide again.")
    summary = report_again(ws, name, meta)
    said = ", ".join(new["flags"]) or "none"
    yield Event("done", 1, 1, f"Row {row['id']}: {res['duration']:.1f} s, flags: {said}"
                f"{' (left out of training)' if new['excluded'] else ''}. {describe(summary, name)}",
                result={"name": name, **summary})


def _not_while_training(ws: Workspace, name: str) -> None:
    """A run training on the dataset reads its clips as it goes (the held-out ones at each quality check, MMS's and
    the vocoder's audio when first met): a clip made again under it would change its data midway. One queued has
    not read them yet."""
    from utils.runs.control import training_on

    busy = training_on(ws, name)
    if busy and busy[1].get("state") != "queued":
        raise StudioError(f"Run {busy[0]} is training on dataset {name!r} and reads its clips as it goes: replace the "
                          "recording when it has finished, or stop it first (Training tab).")


def _usable(take: Path, cfg: PrepareConfig) -> None:
    """Refuse, before anything is moved, a take that could not make a clip: not audio, empty, or longer than a clip
    may be (its row would be dropped by the preparation)."""
    if not take.is_file():
        raise StudioError("Record or upload the new take first.")
    try:
        if needs_ffmpeg(take):
            with tempfile.TemporaryDirectory() as tmp:
                audio, rate = load_audio(decode_with_ffmpeg(take, Path(tmp) / "take.flac"))
        else:
            audio, rate = load_audio(take)
    except StudioError:
        raise
    except Exception as exc:
        from utils.audio import unreadable

        raise StudioError(unreadable(take.name, exc)) from exc
    if not len(audio):
        raise StudioError(f"{take.name}: the take holds no audio samples: record it again.")
    if len(audio) / rate > cfg.max_clip_file:
        from utils.training.speed import say_time

        raise StudioError(f"{take.name}: {say_time(len(audio) / rate)} long, longer than a clip may be "
                          f"({say_time(cfg.max_clip_file)}): record the row's sentence alone.")


def _put_in_place(take: Path, old: Path) -> str:
    """The take under the old recording's name (a row's table names its file, suffix included): its bytes as they are
    when its format is the old one's, else decoded and written in the old one's format, or as FLAC where the studio
    cannot write that (M4A, Opus: both readers go by the content). Returns what to add to the message about it."""
    if take.suffix.lower() == old.suffix.lower():
        copy_file(take, old)
        return ""
    fmt = WRITTEN_AS.get(old.suffix.lower(), "FLAC")
    with tempfile.TemporaryDirectory() as tmp:
        decoded = decode_with_ffmpeg(take, Path(tmp) / "take.flac") if needs_ffmpeg(take) else take
        audio, rate = load_audio(decoded, mono=False)
        written = Path(tmp) / f"take.{fmt.lower()}"
        sf.write(written, np.clip(audio.T, -1.0, 1.0), rate, format=fmt,
                 subtype="PCM_16" if fmt in ("WAV", "FLAC", "AIFF") else None)
        shutil.move(written, old)
    return "" if old.suffix.lower() in WRITTEN_AS else (f" The take is written as FLAC under that name: the studio "
                                                        f"cannot write {old.suffix} files.")
