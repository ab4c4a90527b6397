"""The preparation pipeline: import -> discover -> cut long recordings -> make clips -> check ->
split -> manifest + report -> mel features -> (BPE model).

    for event in prepare(ws, "my-voice", ["/data/upload.zip"]):
        print(event.format())

Clips, checks and (without a GPU) mels run in a process pool, one task per clip, so the pool keeps
every core busy on decode/resample/write; with a GPU the mels are computed there after the clips
exist. Every finished task is appended to `.prepare/done.jsonl`, so a re-run after a crash or a
cancel skips what is done. Curator decisions (keep, exclude, fixed text) survive a re-run.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator

from utils.audio import FeatureConfig, decode_with_ffmpeg, needs_ffmpeg
from utils.datasets import checks, store
from utils.datasets.clips import measure_in_use, process_clip, segment_recording
from utils.datasets.config import AUDIO_SUFFIXES, PrepareConfig
from utils.datasets.disk import check_space, describe as describe_disk
from utils.datasets.features import record_digests
from utils.datasets.manifest import is_export_csv, save_manifest, write_report
from utils.datasets.sources import DEFAULT_SPEAKER, Item, discover, import_source, raw_files
from utils.datasets.split import assign_split
from utils.events import Event, StudioError, time_left
from utils.datasets.manifest import record_read_with
from utils.text.lexicon import dictionary_stamp, load_user_dict
from utils.workers import POOL_MIN_TASKS, default_workers, run_tasks, spawn_pool
from utils.training.speed import say_hours
from utils.workspace import Workspace, atomic_write_json, read_json, read_jsonl

STATE_DIR = ".prepare"


class NoDataset(StudioError):
    """Nothing in the upload made a clip: no dataset is made (a new dataset's folder goes)."""


def _key(*parts) -> str:
    return hashlib.sha1(json.dumps(parts, ensure_ascii=False, default=str).encode()).hexdigest()


def prepare(ws: Workspace, name: str, sources: Iterable[str | Path] | str | Path | None = None,
            **options) -> Iterator[Event]:
    """Prepare dataset `name` from `sources` (files, folders or zips; None re-runs on what `raw/` holds).
    The last event's result is the report summary; options as for `_prepare`.

    An import that fails before any recording was found (an empty zip, no audio found, ambiguous columns), or
    that made no clip of what it found, takes away the dataset folder it created, so no half-made dataset is left behind under that name. Once recordings
    were found (prepare.json is written), a failure (a worker killed for memory, a full disk, a Drive I/O error)
    keeps the folder: raw/ may hold the only copy of an upload, and `.prepare/done.jsonl` the finished clips, from
    which a re-run goes on. A folder that was there before (an earlier import, its raw uploads) is never touched."""
    ds_dir = ws.dataset_dir(name)
    created = not ds_dir.exists()
    try:
        yield from _prepare(ws, name, sources, **options)
    except Exception as exc:
        found_recordings = (ds_dir / "prepare.json").exists()
        if created and ds_dir.exists() and (not found_recordings or isinstance(exc, NoDataset)):
            shutil.rmtree(ds_dir)
        raise


def _prepare(ws: Workspace, name: str, sources: Iterable[str | Path] | str | Path | None = None,
             fmt: str = "auto", columns: dict | None = None, frontend: str = "phoneme",
             cfg: PrepareConfig = PrepareConfig(), feature_cfg: FeatureConfig | None = FeatureConfig(),
             workers: int | None = None, cancel: threading.Event | None = None,
             device: str | None = None, in_place: tuple = ()) -> Iterator[Event]:
    """The pipeline itself, step by step. `feature_cfg=None` skips the mel cache; a folder inside one of
    `in_place` is read where it is (linked into raw/), not copied."""
    ds_dir = ws.dataset_dir(name)
    sources = [Path(s) for s in ([sources] if isinstance(sources, (str, Path)) else list(sources or []))]
    if missing := [str(s) for s in sources if not s.exists() and not s.is_symlink()]:
        raise StudioError(f"{missing[0]}: not found: give a zip, a folder or files that exist (nothing was prepared).")
    if sources:  # before anything is written: a disk that cannot hold the dataset is said now, not when full
        est = check_space(ds_dir, sources, ws.root, cfg=cfg, feature_cfg=feature_cfg, columns=columns,
                          in_place=in_place)
        yield Event("disk", message=describe_disk(est, markdown=False), level="warning" if est["tight"] else "info")
    (ds_dir / STATE_DIR).mkdir(parents=True, exist_ok=True)
    errors: list[dict] = []
    renewed: set[Path] = set()  # recordings given again under a name the dataset holds (the old one set aside)
    fmt, columns, exports = yield from _import(ds_dir, name, sources, fmt, columns, cfg, in_place, errors, renewed)
    old = {r["id"]: r for r in store.iter_rows(ds_dir)} if store.exists(ds_dir) else None  # None: a first import
    origin = sources[0].parent if len(sources) == 1 and sources[0].suffix.lower() in (".csv", ".tsv") else None
    found = yield from _discover(ws, name, sources, fmt, columns, origin, exports, old, errors)
    # from here on the folder is a dataset that a failure keeps (see prepare): written before any long work
    tables = [f.relative_to(ds_dir).as_posix() for f in raw_files(ds_dir / "raw")
              if f.suffix.lower() in (".csv", ".tsv") and f not in exports] if found.format == "csv" else []
    atomic_write_json(ds_dir / "prepare.json", {"format": found.format, "frontend": frontend, "columns": columns,
                                                "config": cfg.to_dict(), "tables": tables,
                                                "features": feature_cfg.to_dict() if feature_cfg else None})
    yield from decode_compressed(ds_dir, found, errors, renewed)
    user_dict = load_user_dict(ws)  # transcripts are read as training and speaking read them
    read_with = dictionary_stamp(user_dict)
    use_gpu_mels = feature_cfg is not None and (device or _device()) == "cuda"
    with _Work(ds_dir, cfg, read_with, str(ws.pronunciations), workers or default_workers(), cancel,
               renewed) as work:
        clips = [it for it in found.items if it.kind == "clip"]
        clips += yield from _cut_long_recordings(work, [it for it in found.items if it.kind != "clip"], errors)
        results = {} if work.cancelled() else (yield from _make_clips(work, clips, feature_cfg, use_gpu_mels))
    if work.cancelled():
        yield from _cancelled()
        return
    rows = _rows(clips, results, errors)
    if not rows:  # a dataset of no clip would be offered by every picker and fail every run: none is made
        raise NoDataset(nothing_usable(sources or sorted(p for p in (ds_dir / "raw").rglob("*") if p.is_file()),
                                       errors))
    kept = _carry_decisions(old or {}, rows, cfg, user_dict, work.remade)
    if kept:
        yield Event("check", message=kept)
    if music := _carry_music(ds_dir, old or {}, rows, work.made, cfg):
        yield Event("check", message=music)
    finish_rows(rows, cfg)
    save_manifest(ws, name, rows)
    # clips an earlier run made were read with the dictionary of then: whether all match is known, or not
    same = {results[r["id"]].get("read_with") for r in rows} == {read_with}
    record_read_with(ds_dir, read_with if same else None)
    record_digests(ds_dir, [(ds_dir / r["audio"], r["sha1"]) for r in rows])  # training starts without hashing
    report = write_report(ws, name, errors, found.format, {"frontend": frontend})
    yield Event("check", len(rows), len(rows), f"{report['summary']['flagged_clips']} flagged row(s), "
                f"{len(errors)} file error(s); report in {ds_dir / 'report.json'}")
    yield from _after_the_rows(ds_dir, rows, cfg, feature_cfg, frontend, use_gpu_mels, work.cancelled)
    added, counts = what_was_added(name, old, rows, work.remade)
    yield Event("done", len(rows), len(rows), added + describe(report["summary"], name),
                result={"name": name, **report["summary"], **counts})


def _import(ds_dir: Path, name: str, sources: list[Path], fmt: str, columns: dict | None, cfg: PrepareConfig,
            in_place: tuple, errors: list[dict], renewed: set[Path]) -> Iterator[Event]:
    """Step 1: the uploads go into raw/ byte for byte (a lone CSV brings its audio along); with none, a re-run on
    what raw/ holds, with last time's format and columns unless told otherwise. Returns (format, columns, the
    studio's own exports found in raw/, which are set aside, not read as transcripts); the recordings that replaced
    others are added to `renewed`."""
    raw = ds_dir / "raw"
    last = read_json(ds_dir / "prepare.json", default={}) or {}
    if sources:
        how = "bringing" if in_place else "copying"  # a folder in a data folder is linked, read where it is
        yield Event("import", 0, len(sources), f"{how} {len(sources)} upload(s) into {raw}"
                    + (" (a folder inside a data folder is read where it is, not copied)" if in_place else ""))
        brought = import_source(sources, raw, cfg, in_place)
        errors += [e for e in brought if e.get("level") != "info"]
        for e in brought:
            if e.get("level") == "info":  # a corrected transcript, a recording made again, replaced the one before
                yield Event("import", message=e["message"])
                if e.get("kind") == "recording":
                    renewed.add(Path(e["path"]).resolve())
    elif last.get("uploads_dropped"):
        raise StudioError(f"Dataset {name!r} was prepared without keeping a copy of its uploads, so it cannot be "
                          "prepared again from them: give the recordings again (upload them, or their path).")
    elif not raw.exists():
        raise StudioError(f"Dataset {name!r} has nothing in raw/; give a zip, folder or files to prepare.")
    else:
        if fmt == "auto" and last.get("format") == "csv" and (said := pairs_taken_for_csv(ds_dir, name)):
            last = {**last, "format": "pairs", "tables": []}  # its exports are set aside, as beside any pairs
            yield Event("discover", message=said, level="warning")
        fmt = last.get("format", fmt) if fmt == "auto" else fmt
        columns = columns or last.get("columns")
    exports = exports_put_back(ds_dir, last)  # said, and not read as a transcript table
    errors += [{"source": f.relative_to(ds_dir).as_posix(), "message": export_not_read(ds_dir, f, name)}
               for f in exports]
    for e in errors:
        yield Event("import", message=e["message"], level="warning")
    return fmt, columns, exports


def _discover(ws: Workspace, name: str, sources: list[Path], fmt: str, columns: dict | None, origin: Path | None,
              exports: list[Path], old: dict | None, errors: list[dict]) -> Iterator[Event]:
    """Step 2: the utterances in raw/ (returned). Finding none is said in the report of a dataset that had no rows
    too, and raised with the import's errors, which often say why."""
    ds_dir = ws.dataset_dir(name)
    try:
        found = discover(ds_dir, fmt, columns, origin, exports, {i: r.get("source") for i, r in (old or {}).items()})
    except StudioError as exc:
        if not store.exists(ds_dir):
            write_report(ws, name, errors + [{"source": str(sources[0].name if sources else "raw"),
                                              "message": str(exc)}], fmt)
        if errors:
            raise StudioError(f"{exc} " + " ".join(e["message"] for e in errors[:5])) from exc
        raise
    errors += found.errors
    for e in found.errors:
        yield Event("discover", message=e["message"], level="warning")
    for note in found.notes:
        yield Event("discover", message=note, level="info")
    yield Event("discover", len(found.items), len(found.items), f"format {found.format}: {len(found.items)} item(s)")
    return found


class _Work:
    """What the long steps of one preparation share: the tasks an earlier run finished (`.prepare/done.jsonl`, one
    handle, whole lines flushed: a crash loses at most the line being written), the settings every task gets, and a
    process pool started only when a step is big enough to repay its start-up (torch import). `renewed`: recordings
    that replaced others in this import; `remade` gathers the ids whose clip is made again for a changed recording."""

    def __init__(self, ds_dir: Path, cfg: PrepareConfig, read_with: str, dictionary: str, workers: int,
                 cancel: threading.Event | None, renewed: set[Path] = frozenset()):
        self.ds_dir, self.cfg, self.workers, self.cancel = ds_dir, cfg, workers, cancel
        self.renewed, self.remade, self.made = renewed, set(), set()
        state = ds_dir / STATE_DIR
        self.done = {d["key"]: d["result"] for d in read_jsonl(state / "done.jsonl")}
        self.common = {"cfg": cfg.to_dict(), "dictionary": (dictionary, read_with)}
        self.pools: list[ProcessPoolExecutor] = []
        self.log = open(state / "done.jsonl", "a", encoding="utf-8")

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def finished(self, key: str, result: dict) -> None:
        if "error" not in result:
            self.log.write(json.dumps({"key": key, "result": result}, ensure_ascii=False) + "\n")
            self.log.flush()

    def pool_for(self, n_tasks: int) -> ProcessPoolExecutor | None:
        if self.workers <= 1 or n_tasks < POOL_MIN_TASKS:
            return self.pools[0] if self.pools else None
        if not self.pools:
            self.pools.append(spawn_pool(self.workers))
        return self.pools[0]

    def __enter__(self) -> "_Work":
        return self

    def __exit__(self, *exc) -> None:
        self.log.close()
        for pool in self.pools:
            pool.shutdown(wait=False, cancel_futures=True)  # idle workers exit on their own


def _cut_long_recordings(work: _Work, long_items: list[Item], errors: list[dict]) -> Iterator[Event]:
    """Step 3: long recordings -> utterances (subtitle times refined by VAD, or VAD alone), returned as clips in a
    stable order (by source). Nothing when cancelled."""
    cfg, tasks, results, waiting = work.cfg, [], [], []
    for it in long_items:
        st = it.audio.stat()
        key = _key("segment", it.source, st.st_size, st.st_mtime_ns, it.kind,
                   it.subtitles and it.subtitles.stat().st_mtime_ns, cfg.segment_min, cfg.segment_max)
        if key in work.done:
            results.append((it, work.done[key]))
            continue
        tasks.append({"id": it.id, "src": str(it.audio), "source": it.source, "kind": it.kind, "key": key,
                      "subtitles": str(it.subtitles) if it.subtitles else None, "_i": len(tasks), **work.common})
        waiting.append(it)
    for task, res in run_tasks(segment_recording, tasks, work.workers, work.cancelled,
                               work.pool_for(len(tasks) * 20)):  # a recording is many clips of work
        work.finished(task["key"], res)
        results.append((waiting[task["_i"]], res))
        yield Event("segment", len(results), len(long_items),
                    f"{task['source']}: {len(res.get('segments', []))} utterance(s)")
    if work.cancelled():
        return []
    clips = []
    for it, res in sorted(results, key=lambda r: r[0].source):
        if "error" in res:
            errors.append({"source": it.source, "message": res["error"]})
            yield Event("segment", message=res["error"], level="warning")
            continue
        errors += [{"source": it.source, "message": m} for m in res.get("messages", [])]
        clips += [Item(f"{it.id}-{i:04d}", it.audio, f"{it.source}#t={s:.2f},{e:.2f}", text, it.speaker, s, e,
                       notes=dict(it.notes)) for i, (s, e, text) in enumerate(res["segments"], 1)]
    return clips


def _make_clips(work: _Work, clips: list[Item], feature_cfg: FeatureConfig | None,
                use_gpu_mels: bool) -> Iterator[Event]:
    """Step 4: each clip decoded, resampled, trimmed, normalized, written, measured, its text checked (and its mels
    made, on a CPU); one made by an earlier run is kept. Returns {id: result}."""
    mel_dir = work.ds_dir / "features" / feature_cfg.key() if feature_cfg else None
    tasks, results, stamps = [], {}, {}
    for it in clips:
        key = clip_key(it, work.cfg)
        out = work.ds_dir / "audio" / f"{it.id}.wav"
        stamp = stamps[it.audio] if it.audio in stamps else stamps.setdefault(it.audio, source_stamp(it.audio))
        done = work.done.get(key)
        if done and out.exists() and (mel_dir is None or use_gpu_mels
                                      or (mel_dir / f"{done['sha1'][:16]}.npy").exists()):
            if not recorded_again(work, it.audio, done, stamp):
                results[it.id] = done
                continue
            work.remade.add(it.id)
        tasks.append({"id": it.id, "src": str(it.audio), "source": it.source, "start": it.start, "end": it.end,
                      "out": str(out), "text": it.text, "key": key, "stamp": stamp, **work.common,
                      **({"mel_dir": str(mel_dir), "mel_cfg": feature_cfg.to_dict(), "mel_half": work.cfg.half_mels}
                         if mel_dir and not use_gpu_mels else {})})
    work.made.update(t["id"] for t in tasks)
    if results:
        yield Event("clips", len(results), len(clips), f"{len(results)} clip(s) already made by an earlier run")
    if work.remade:
        yield Event("clips", message=f"{len(work.remade)} clip(s) made again: their recordings changed since they were "
                    f"made ({shown(sorted(work.remade))})")
    n, pace = len(results), Pace(len(tasks))
    for task, res in run_tasks(process_clip, tasks, work.workers, work.cancelled, work.pool_for(len(tasks))):
        n += 1
        work.finished(task["key"], {**res, "stamp": task["stamp"]})
        results[task["id"]] = res
        pace.step(res.get("duration") or 0.0)
        if n % 25 == 0 or n == len(clips) or "error" in res:
            yield Event("clips", n, len(clips), res.get("error", f"{task['source']} · {pace.said()}"),
                        level="warning" if "error" in res else "info")
    return results


def clip_key(it: Item, cfg: PrepareConfig) -> str:
    """The key of a clip's result in `.prepare/done.jsonl`: what it is cut from and read as, and how it is cleaned."""
    return _key("clip", it.source, it.start, it.end, it.id, it.text, cfg.processing_key())


def source_stamp(path: Path) -> list[int]:
    """What tells an edited recording from the one a clip was made of without reading it: size and modification
    time (a recording saved over in its folder changes the dataset's hard link to it too)."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def recorded_again(work: _Work, audio: Path, done: dict, stamp: list[int]) -> bool:
    """Whether a clip made earlier came from another recording than the one under its name now: one given again
    in this import, or one changed where it lies. A clip made before stamps were kept is trusted until it is made
    again (stamping each then would append a line per clip to done.jsonl: 145 MB at 200k clips)."""
    return done.get("stamp", stamp) != stamp or bool(work.renewed and audio.resolve() in work.renewed)


def shown(ids: list[str]) -> str:
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _rows(clips: list[Item], results: dict, errors: list[dict]) -> list[dict]:
    """Step 5: a manifest row for each clip made; a clip that failed is an error of its source."""
    rows = []
    for it in clips:
        res = results.get(it.id)
        if res is None:
            continue
        if "error" in res:
            errors.append({"source": it.source, "message": res["error"]})
            continue
        rows.append({"id": it.id, "audio": f"audio/{it.id}.wav", "text": it.text, "normalized": res["normalized"],
                     "phonemes": res["phonemes"], "duration": res["duration"], "speaker": it.speaker or DEFAULT_SPEAKER,
                     "split": "train", "flags": [], "excluded": False, "source": it.source, "sha1": res["sha1"],
                     "music": None, "notes": {**it.notes, **res["notes"]}, "metrics": res["metrics"], "review": None})
    return rows


def _after_the_rows(ds_dir: Path, rows: list[dict], cfg: PrepareConfig, feature_cfg: FeatureConfig | None,
                    frontend: str, use_gpu_mels: bool, cancelled) -> Iterator[Event]:
    """Steps 6-8: mel features on the GPU (a CPU made them with the clips), the SentencePiece model for the BPE
    frontend, and the copy of the uploads deleted when the curator chose not to keep it (a small disk)."""
    if use_gpu_mels:
        from utils.datasets.features import precompute_gpu

        for k, total in precompute_gpu(ds_dir, rows, feature_cfg, "cuda", cancelled, half=cfg.half_mels):
            yield Event("features", k, total, "mel features on the GPU")
    if frontend == "bpe":
        yield Event("tokenizer", message="training the SentencePiece (BPE) model on the transcripts")
        train_bpe(ds_dir, rows)
    if not cfg.keep_uploads and not cancelled() and (freed := drop_uploads(ds_dir)):
        yield Event("uploads", message=f"the copy of the uploads in raw/ ({freed / 1e9:.2f} GB) was deleted, as "
                    "asked: the clips are made; preparing again needs the recordings given again")


def what_was_added(name: str, old: dict[str, dict] | None, rows: list[dict],
                   remade: set[str] = frozenset()) -> tuple[str, dict]:
    """For a preparation into a dataset that had rows (`old`, by id; None for a first import): how many clips are new
    and how many it had and has, said first in the summary ("" for a first import), and the counts for the result.
    An id it had that now holds another recording, whose recording changed (`remade`), or that no recording made
    again, is said too."""
    if old is None:
        return "", {}
    now = {r["id"]: r for r in rows}
    new = [i for i in now if i not in old]
    other = [i for i in now if i in old and old[i].get("source") != now[i]["source"]]
    gone = [i for i in old if i not in now]
    said = f"{len(new)} new clip(s) added to {name} ({len(old)} before, {len(now)} now)"
    if other:
        said += f"; {len(other)} id(s) it had now hold another recording ({shown(other)})"
    if changed := sorted(i for i in remade if i in old and i in now):
        said += f"; {len(changed)} clip(s) made again from a changed recording ({shown(changed)})"
    if gone:
        said += f"; {len(gone)} row(s) it had were not made again ({shown(gone)})"
    had = {r.get("sha1") for r in old.values()} - {None}
    if repeats := [i for i in new if now[i]["sha1"] in had]:
        said += (f"; {'all' if len(repeats) == len(new) else len(repeats)} of the new clips repeat recordings it "
                 f"already had ({shown(repeats)}), so they are flagged as duplicates and left out of training: to "
                 f"replace what {name} holds with this upload (a corrected transcript file), delete the dataset "
                 f"(Delete dataset on the Dataset tab, or python app.py delete-dataset {name}) and prepare the upload "
                 "again under its name")
    return said + "; ", {"new_clips": len(new), "clips_before": len(old)}


def exports_put_back(ds_dir: Path, last: dict) -> tuple[Path, ...]:
    """CSV exports of rows (manifest.is_export_csv) in raw/ of a dataset that has rows: the export is not read back,
    so one uploaded again after an edit is set aside, with why (read as a transcript table it took its text alone and
    left the other recordings out; beside a metadata.csv it was skipped unsaid). A table a dataset was first made from
    (prepare.json's "tables" of a csv import) is read as before. `last`: prepare.json as it was."""
    if not store.exists(ds_dir) or ("tables" not in last and last.get("format") == "csv"):
        return ()  # a csv dataset prepared before "tables" was recorded: its table may be an export; read it as before
    made_from = set(last.get("tables") or [])
    return tuple(f for f in raw_files(ds_dir / "raw") if f.suffix.lower() in (".csv", ".tsv")
                 and f.relative_to(ds_dir).as_posix() not in made_from and is_export_csv(f))


def pairs_taken_for_csv(ds_dir: Path, name: str) -> str | None:
    """A pairs dataset that an older version switched to csv (prepare.json's format) when an export of its rows was
    put back in raw/ and read as its table: raw/ holds .txt transcripts beside their recordings and no table but the
    studio's exports. Says it is read as pairs again; None for a dataset made from a transcript table."""
    files = raw_files(ds_dir / "raw")
    tables = [f for f in files if f.suffix.lower() in (".csv", ".tsv")]
    audio = {f.with_suffix("") for f in files if f.suffix.lower() in AUDIO_SUFFIXES}
    pairs = [f for f in files if f.suffix.lower() == ".txt" and f.with_suffix("") in audio]
    if not pairs or not all(is_export_csv(t) for t in tables):
        return None
    shown = ", ".join(t.relative_to(ds_dir).as_posix() for t in tables)
    found = f"no table but the studio's export of its rows ({shown})" if tables else "no transcript table"
    return (f"{ds_dir / 'prepare.json'} said {name} is read from a CSV table, but raw/ holds {len(pairs)} recording(s) "
            f"with a .txt transcript and {found}: read as audio + .txt pairs, as the dataset was made (an older "
            "version took an export put back for its table); prepare.json now says pairs.")


def export_not_read(ds_dir: Path, path: Path, name: str) -> str:
    """Why an export put back as an upload was not read, and the way rows edited outside the studio come back."""
    return (f"{path.relative_to(ds_dir).as_posix()}: looks like the studio's CSV export of {name}'s rows (its columns "
            "are the export's), so it was not read back as rows and its edits are not in the dataset: the CSV is for "
            f"reading and sharing. To change rows outside the studio, export them as JSON lines (`python app.py "
            f"export-dataset {name} {name}.jsonl`), edit that file and put it in {ds_dir} as manifest.jsonl: it "
            "replaces the rows on next use. The CSV stays in raw/ as uploaded.")


EXPECTED = ("a dataset needs speech recordings with their transcripts: a zip or files in LJSpeech layout "
            "(metadata.csv + wavs/), a CSV/TSV with audio and text columns, audio files each with a .txt of the same "
            "name, or long recordings (with .srt/.vtt subtitles, or alone)")


def nothing_usable(sources: list[Path], errors: list[dict]) -> str:
    """Why an import made no clip, naming what was given and what a dataset needs (the errors say what went wrong
    with each file); the uploads themselves are left as they were."""
    given = ", ".join(Path(s).name for s in sources[:5]) + (f" and {len(sources) - 5} more" if len(sources) > 5 else "")
    problems = " ".join(e["message"] for e in errors[:3])
    return (f"No clip could be made from {given or 'the upload'}, so no dataset was made: {EXPECTED}."
            + (f" What was found: {problems}" if problems else ""))


def _device() -> str:
    try:
        from utils.hardware import device

        return device()
    except Exception:
        return "cpu"


def only_ffmpeg_reads(paths: set[Path]) -> list[Path]:
    """The files only ffmpeg decodes, by suffix or first bytes. Sixteen bytes of each file are read by 32 threads: on
    a Drive-mounted workspace a read waits ~10 ms, and 200,000 files one after another would take half an hour."""
    from concurrent.futures import ThreadPoolExecutor

    ordered = sorted(paths)
    with ThreadPoolExecutor(max_workers=32) as pool:
        return [p for p, needed in zip(ordered, pool.map(needs_ffmpeg, ordered)) if needed]


def decoded_of(ds_dir: Path, recording: Path) -> Path:
    """Where ffmpeg's decoding of a recording libsndfile cannot read is kept: decoded/<its path under raw/>.flac."""
    raw = ds_dir / "raw"
    rel = recording.relative_to(raw) if recording.is_relative_to(raw) else Path(recording.name)
    return ds_dir / "decoded" / rel.with_name(rel.name + ".flac")


def decode_compressed(ds_dir: Path, found, errors: list[dict], renewed: set[Path] = frozenset()) -> Iterator[Event]:
    """Audio that libsndfile cannot read (M4A from phones, WebM from video sites, ...) is decoded once by
    ffmpeg into decoded/<raw path>.flac and read from there; raw/ keeps the original. A file that cannot
    be decoded (no ffmpeg, a broken file) is one message, and its items are left out. Decoded again when the
    original is newer, or `renewed` (a recording given again keeps its own time, which may be older)."""
    raw = ds_dir / "raw"
    files = sorted(only_ffmpeg_reads({it.audio for it in found.items}))
    wanted = set(files)
    decoded: dict[Path, Path] = {}
    for i, src in enumerate(files, 1):
        rel = src.relative_to(raw) if src.is_relative_to(raw) else Path(src.name)
        target = decoded_of(ds_dir, src)
        try:
            if src.resolve() in renewed or not (target.exists() and target.stat().st_mtime_ns >= src.stat().st_mtime_ns):
                decode_with_ffmpeg(src, target)
            decoded[src] = target
            yield Event("decode", i, len(files), f"{rel}: decoded with ffmpeg")
        except StudioError as exc:
            errors.append({"source": f"raw/{rel}", "message": str(exc)})
            yield Event("decode", i, len(files), str(exc), level="warning")
    kept = []
    for it in found.items:
        if it.audio in wanted:
            if it.audio not in decoded:
                continue
            it.audio = decoded[it.audio]
        kept.append(it)
    found.items = kept


class Pace:
    """Hours of audio done, the rate and the time left of a long step, for its progress line: a curator with 200
    hours to prepare sees how far it is and when it ends (a run cut off goes on from the clips already made)."""

    def __init__(self, total: int):
        self.total, self.done, self.seconds, self.t0 = total, 0, 0.0, time.perf_counter()

    def step(self, audio_seconds: float) -> None:
        self.done += 1
        self.seconds += audio_seconds

    def said(self) -> str:
        wall = max(time.perf_counter() - self.t0, 1e-6)
        left = time_left(self.done, self.total, self.t0)
        return f"{say_hours(self.seconds / 3600)} of audio done, {as_fast(self.seconds / wall)}" + (
            f", about {left} left" if left else "")


def as_fast(ratio: float) -> str:
    """Seconds of audio a second, against the time the audio plays: "8 min 41 s a minute" was hard to read."""
    if ratio >= 1:
        return f"{ratio:.0f} times as fast as it plays" if ratio >= 10 else f"{ratio:.1f} times as fast as it plays"
    return f"{1 / max(ratio, 1e-9):.1f} times slower than it plays"


def drop_uploads(ds_dir: Path) -> int:
    """Delete raw/'s copies of the uploads and decoded/'s decodings of them, once the clips are made; links into
    the owner's data folders (read in place) are left, and what they point at is never touched. Notes the drop in
    prepare.json (a re-run from raw/ is then refused with why). Returns the bytes freed."""
    from utils.datasets.disk import folder_bytes

    freed = 0
    for top in (ds_dir / "raw", ds_dir / "decoded"):
        for entry in (sorted(top.iterdir()) if top.is_dir() else []):
            if entry.is_symlink():
                continue
            freed += folder_bytes(entry) if entry.is_dir() else entry.stat().st_size
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    if freed:
        meta = read_json(ds_dir / "prepare.json", default={}) or {}
        atomic_write_json(ds_dir / "prepare.json", {**meta, "uploads_dropped": True})
    return freed


def _cancelled() -> Iterator[Event]:
    yield Event("cancelled", message="Preparation cancelled; run it again to continue where it stopped.",
                level="warning", result={"cancelled": True})


def train_bpe(ds_dir: Path, rows: list[dict]) -> Path:
    from utils.text.tokenizers import make_tokenizer

    texts = [r["normalized"] or r["text"] for r in rows if not r["excluded"] and r["text"]]
    if not texts:
        raise StudioError("The BPE frontend needs transcripts; no usable row has text.")
    (ds_dir / "tokenizer").mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer("bpe", texts, ds_dir / "tokenizer")
    path = ds_dir / "tokenizer" / "tokenizer.json"
    atomic_write_json(path, tokenizer.to_dict())
    return path


def finish_rows(rows: list[dict], cfg: PrepareConfig) -> None:
    """Table checks, default exclusion (unless the curator decided), split."""
    for r in rows:
        _note_other_flags(r)
    checks.dataset_checks(rows, cfg)
    for r in rows:
        _decide(r)
    assign_split(rows, cfg.val_fraction)


def finish_row(row: dict, cfg: PrepareConfig, rate_median: float | None) -> None:
    """finish_rows for one edited row, the rest of the table as it is: a new text or decision changes the row's
    own speaking rate and exclusion, never which audio is duplicated nor the split (both ride on audio and id)."""
    _note_other_flags(row)
    checks.mark_rate(row, rate_median, cfg)
    row["flags"] = checks.flags_of(row["notes"])
    _decide(row)


def _note_other_flags(row: dict) -> None:
    """Flags set by other steps (e.g. music removal) are kept: each gets a note if it has none."""
    notes = row.setdefault("notes", {})
    for f in row.get("flags", []):
        if f not in notes and f not in checks.TABLE_FLAGS:
            notes[f] = f


def _decide(row: dict) -> None:
    review = row.get("review")
    row["excluded"] = review == "exclude" or (review != "keep" and checks.default_excluded(row["flags"]))


def _carry_decisions(old: dict[str, dict], rows: list[dict], cfg: PrepareConfig, user_dict: dict,
                     remade: set[str] = frozenset()) -> str | None:
    """A re-run keeps what the curator decided (`old`: the table's rows by id): keep/exclude and fixed transcripts (a
    fixed transcript wins over the text the files give now). A Keep/Exclude judged another recording: one whose clip
    was made again (`remade`) into other audio starts undecided. Returns what it kept and cleared, said so the
    curator knows (None: nothing)."""
    decided, fixed, cleared = 0, [], []
    for r in rows:
        prev = old.get(r["id"])
        if not prev:
            continue
        if prev.get("review") and r["id"] in remade and prev.get("sha1") != r["sha1"]:
            cleared.append(r["id"])
        else:
            r["review"] = prev.get("review")
        decided += bool(r["review"])
        if prev.get("text_fixed") and prev.get("text") != r["text"]:
            set_text(r, prev["text"], cfg, user_dict)
            fixed.append(r["id"])
    if not decided and not fixed and not cleared:
        return None
    said = f"Kept your earlier Keep/Exclude on {decided} row(s)" if decided else "Kept"
    if fixed:
        said += (f"{' and' if decided else ''} your fixed transcript of {len(fixed)} row(s), in place of the files' "
                 f"text ({shown(fixed)}): to use the files' text, type it in the row editor and press Save text")
    said = "" if said == "Kept" else said + ". "
    if cleared:
        said += (f"Your Keep/Exclude on {len(cleared)} row(s) whose recording changed was cleared, since it judged "
                 f"the old recording: listen to them again ({shown(cleared)}). ")
    return said.strip()


def _carry_music(ds_dir: Path, old: dict[str, dict], rows: list[dict], made: set[str], cfg: PrepareConfig) -> str:
    """A re-run keeps the music removal of each clip it did not make again (`made`: adding recordings to a dataset
    dropped every row's, and training went back to the clips with music under them): its result, and where the
    curator accepted it, the music-removed audio and its noise measure. A clip made again (a changed recording or
    cleaning setting) is not the clip it was separated from: its result goes, said. Returns what it kept and what
    went ("": nothing)."""
    checked, playing, gone = 0, 0, []
    for r in rows:
        prev = old.get(r["id"])
        if not prev or not prev.get("music"):
            continue
        if r["id"] in made:
            gone.append(r["id"])
            continue
        r["music"], checked = prev["music"], checked + 1
        if prev["audio"].startswith("separated/") and (ds_dir / prev["audio"]).is_file():
            r["audio"], r["sha1"], playing = prev["audio"], prev["sha1"], playing + 1
            measure_in_use(ds_dir, r, cfg)
    said = (f"Kept the music removal of {checked} row(s), {playing} of them playing their music-removed audio as you "
            "accepted." if checked else "")
    if gone:
        said += (f" {len(gone)} row(s) whose clip was made again lost the music removal done on their old clip "
                 f"({shown(gone)}): run Music removal again for them.")
    return said.strip()


def set_text(row: dict, text: str, cfg: PrepareConfig, user_dict: dict) -> None:
    """Replace a row's transcript (a curator's fix) and re-run the text checks on it."""
    row["text"] = " ".join((text or "").split())
    row["text_fixed"] = True
    check_row_text(row, cfg, user_dict)


def check_row_text(row: dict, cfg: PrepareConfig, user_dict: dict) -> None:
    """Normalize, phonemize (with the pronunciation dictionary `user_dict`) and re-flag a row's transcript (the
    audio flags stay)."""
    notes = row.setdefault("notes", {f: f for f in row.get("flags", [])})
    for flag in checks.TEXT_FLAGS:
        notes.pop(flag, None)
    result = checks.check_text(row["text"], cfg, user_dict)
    row["normalized"], row["phonemes"] = result["normalized"], result["phonemes"]
    notes.update(result["notes"])
    row["flags"] = checks.flags_of(notes)


def describe(summary: dict, name: str = "NAME") -> str:
    flags = ", ".join(f"{k} {v}" for k, v in summary.get("flags", {}).items()) or "none"
    split = (f"{summary['speakers']} speaker(s), {summary['train_clips']} train / {summary['val_clips']} val"
             if summary["usable_clips"] else "no usable clip yet" + untranscribed(summary, name))
    usable, total = (say_hours(summary[k]) for k in ("usable_hours", "hours"))
    return (f"{summary['usable_clips']} usable of {summary['clips']} clip(s), {usable} of {total}, {split}; "
            f"flags: {flags}; {summary['errors']} file error(s)")


def no_text_yet(summary: dict) -> bool:
    """Whether no clip has text (a long recording cut at pauses): none can train until text comes, whatever else."""
    return summary.get("flags", {}).get("missing_text") == summary["clips"]


def untranscribed(summary: dict, name: str) -> str:
    """Why none is usable when no clip has text, and where text comes from: the CLI prints only this line."""
    if not no_text_yet(summary):
        return ""
    unread = (f"{summary['errors']} line(s) or file(s) could not be read: if they hold the transcripts, fix them, "
              f"delete the dataset (python app.py delete-dataset {name}) and prepare again; otherwise "
              if summary.get("errors") else "")
    return (f" (no clip has text: {unread}get machine drafts with Draft missing transcripts on the Dataset tab or "
            f"`python app.py transcribe --dataset {name}`, or type each clip's text in the row editor)")
