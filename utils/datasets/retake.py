"""A new take of one row: the recording a clip was made of replaced by another (recorded in the browser, or uploaded),
the old one kept hidden beside it, and the dataset prepared again, which makes that clip again and clears a
Keep/Exclude that judged the old recording (utils.datasets.prepare notices the changed recording by its stamp).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import soundfile as sf

from utils.audio import FeatureConfig, decode_with_ffmpeg, load_audio, needs_ffmpeg
from utils.datasets.config import PrepareConfig
from utils.datasets.manifest import get_rows
from utils.datasets.prepare import prepare
from utils.datasets.safezip import copy_file, same_bytes, set_aside
from utils.events import Event, StudioError
from utils.workspace import Workspace, read_json

# the format a take of another format is written in, by the old recording's suffix (libsndfile writes these)
WRITTEN_AS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG", ".oga": "OGG", ".mp3": "MP3", ".aif": "AIFF",
              ".aiff": "AIFF"}


def replace_recording(ws: Workspace, name: str, row_id: str, take: str | Path, cancel=None) -> Iterator[Event]:
    """Put `take` in the place of the recording row `row_id` of dataset `name` was made of, then prepare the dataset
    again with the settings it was prepared with; yields the preparation's events (the last carries its summary).
    Refused, with what to do, for a row cut from a long recording, a recording read where it lies (a data folder), a
    dataset that kept no copy of its uploads, and a take that is not audio."""
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
    before = set_aside(old, take.name, [])
    try:
        how = _put_in_place(take, old)
    except BaseException:
        old.unlink(missing_ok=True)
        before.replace(old)  # as it was
        raise
    yield Event("import", message=f"Row {row_id}: the new take replaces its recording {row['source']}, which is kept "
                f"as {before.name} beside it; its clip is made again from the take, and a Keep/Exclude that judged "
                f"the old one is cleared.{how}")
    features = meta.get("features")
    yield from prepare(ws, name, fmt=meta.get("format") or "auto", columns=meta.get("columns"),
                       frontend=meta.get("frontend", "phoneme"), cfg=cfg,
                       feature_cfg=FeatureConfig.from_dict(features) if features else None, cancel=cancel)
    if row_id not in get_rows(ws, name, [row_id]) and not (cancel is not None and cancel.is_set()):
        raise StudioError(f"Row {row_id} could not be made from the take (the log above says why). The recording it "
                          f"had is kept as {before.name} beside {old.name}: to bring the row back, record or upload "
                          "another take of it in that folder under its name, or give the dataset's folder again.")


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
