"""Music removal over a dataset: gate and separate every clip, record the decision, accept or revert.

Reads and writes the dataset's rows (utils.datasets.manifest): a run writes back each batch of clips it did,
and only those, so a cancel or a reset keeps what was done.
Per row, `music` becomes {"score", "separated", "backend", "original"}; separated speech goes to
`separated/<id>.wav` at the clip's own rate. The curator's files (`raw/`, `audio/`) are never written.
"Accept" points each separated row's `audio` at `separated/<id>.wav`; "revert" points it back; both
update the row's `sha1` (the feature cache key) to the file it now points at.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from utils.audio import load_audio, save_audio
from utils.datasets.features import content_sha1
from utils.datasets.manifest import get_rows, load_manifest, store_query, update_rows
from utils.events import Event, StudioError, time_left
from utils.separation.api import backend_type, choose_backend, separate_verbose
from utils.training.speed import say_hours
from utils.separation.chunking import gate_scores
from utils.separation.gate import CLEAR, THRESHOLD, has_music
from utils.workers import POOL_MIN_TASKS, default_workers, run_tasks, spawn_pool
from utils.workspace import Workspace

SEPARATED = "separated"
SAVE_EVERY = 20  # clips between two saves of a run's results


def original_audio(row: dict) -> str:
    """The curator's clip for this row, even after an accept pointed `audio` at the separated file."""
    music = row.get("music") or {}
    return music.get("original") or (row["audio"] if not row["audio"].startswith(SEPARATED + "/")
                                     else f"audio/{row['id']}.wav")


def separated_audio(row: dict) -> str:
    return f"{SEPARATED}/{row['id']}.wav"


def process_dataset(ws: Workspace, name: str, backend: str = "auto", gate: bool = True,
                    threshold: float = THRESHOLD, should_stop: Callable[[], bool] | None = None,
                    redo: bool = False, workers: int | None = None) -> Iterator[Event]:
    """Gate and separate every clip not done before with the same backend and gate (all of them with `redo`); one
    event per clip, with the time left. The results are saved every SAVE_EVERY clips, so a run cut off (a cancel,
    a reset runtime) goes on where it stopped when started again. The gate runs over `workers` processes (default:
    every core, or $AMHARIC_TTS_WORKERS).

    Result: {"backend", "reason", "clips", "with_music", "separated", "errors": [str]}.
    """
    rows = load_manifest(ws, name)
    choice = choose_backend(backend)
    settings = {"backend": choice.name, "gate": bool(gate), "threshold": threshold}
    todo = [r for r in rows if redo or any((r.get("music") or {}).get(k) != v for k, v in settings.items())]
    workers = workers or default_workers()
    spread = f"; the detector runs on {workers} cores" if _spread(settings, workers, len(todo)) else ""
    reason = choice.reason.rstrip(".")
    yield Event("separate", 0, len(todo), f"backend {choice.name}: {reason}; " + _plan(rows, todo) + spread)
    errors: list[str] = []
    folder, done = ws.dataset_dir(name), []
    try:
        yield from _process_rows(ws, todo, folder, settings, should_stop, errors, done, workers)
    finally:  # the end, or the UI's cancel closing the generator: what was done so far is kept
        update_rows(ws, name, done)
    verdicts = [verdict(r) for r in rows]
    separated = sum((folder / separated_audio(r)).exists() for r in rows if (r.get("music") or {}).get("separated"))
    result = {"backend": choice.name, "reason": choice.reason, "clips": len(rows), "with_music": verdicts.count(MUSIC),
              "faint": verdicts.count(FAINT), "ungated": verdicts.count(UNGATED), "separated": separated,
              "errors": errors}
    yield Event("done", len(rows), len(rows), done_message(result), result=result)


def done_message(result: dict) -> str:
    """What a run over a dataset found, music and faint candidates told apart: only the clips with clear music
    are music; a faint score may be a steady voice or a hum, so those are separated only to be listened to."""
    if result["ungated"]:  # the detector was off: nothing was judged, everything was separated
        text = f"{result['ungated']} of {result['clips']} clips were separated (the music detector was off)"
        return text + (f"; {len(result['errors'])} could not be read" if result["errors"] else "")
    text = f"{result['with_music']} of {result['clips']} clips had music and were separated"
    if result["faint"]:
        text += (f"; {result['faint']} more had a faint score (perhaps quiet music, perhaps a steady voice or hum): "
                 "separated too, to listen to and pick, and left as they are unless picked")
    return text + (f"; {len(result['errors'])} could not be read" if result["errors"] else "")


def _plan(rows: list[dict], todo: list[dict]) -> str:
    """What a run will do, said before it starts: how many clips and hours of audio, and what it keeps."""
    hours = sum(r.get("duration") or 0.0 for r in todo) / 3600
    said = f"{len(todo)} of {len(rows)} clips to check ({say_hours(hours)} of audio)"
    if len(todo) < len(rows):
        said += (f"; {len(rows) - len(todo)} checked before with these settings are kept (to redo them: tick 'check "
                 "every clip again', or --redo on the command line)")
    return said


def _process_rows(ws: Workspace, rows: list[dict], folder: Path, settings: dict, should_stop: Callable[[], bool] | None,
                  errors: list[str], done: list[dict], workers: int) -> Iterator[Event]:
    """Each clip (in the order the gate finishes them when it runs in workers); the rows done are appended to
    `done`, and written back (then cleared) every SAVE_EVERY."""
    stopped = should_stop or (lambda: False)
    total_s, audio_s, t0, count = sum(r.get("duration") or 0.0 for r in rows), 0.0, time.perf_counter(), 0
    for row, gated in _gated(ws, rows, folder, settings, workers, stopped):
        if stopped():
            break
        count += 1
        try:
            score, music, speech, sr = _separate_row(ws, row, folder, settings, gated)
        except StudioError as exc:
            errors.append(f"row {row.get('id')}: {exc}")
            yield Event("separate", count, len(rows), f"{row.get('id')}: {exc}", level="warning")
            continue
        _record(row, folder, settings, score, music, speech, sr)
        done.append(row)
        if len(done) >= SAVE_EVERY:
            update_rows(ws, folder.name, done)
            done.clear()
        said = LOG_WORDS[verdict(row)]
        audio_s += row.get("duration") or 0.0
        left = time_left(audio_s, total_s, t0) if count < len(rows) else None
        yield Event("separate", count, len(rows), f"{row['id']} {said} (score {score}"
                    + (f"; about {left} left)" if left else ")"))
    if count < len(rows):
        raise StudioError(f"Cancelled after {count} of {len(rows)} clips; their results are saved.")


def _gated(ws: Workspace, rows: list[dict], folder: Path, settings: dict, workers: int,
           stopped: Callable[[], bool]) -> Iterator[tuple[dict, dict | None]]:
    """(row, what the gate found in a worker, or None: not gated yet). The gate is the whole cost for the clean clips
    that are most of a dataset (~20 s per audio hour in one process), so with enough clips it runs over `workers`
    processes and only the clips with music (or that a worker could not read) are separated here, on the GPU if any."""
    if not _spread(settings, workers, len(rows)):
        yield from ((row, None) for row in rows)
        return
    by_id, tasks = {r["id"]: r for r in rows}, []
    for row in rows:
        try:
            path = str(ws.inside(folder / original_audio(row)))
        except StudioError:
            path = None  # said when the row is separated here
        tasks.append({"id": row["id"], "source": original_audio(row), "path": path, "backend": settings["backend"],
                      "threshold": settings["threshold"]})
    pool = spawn_pool(workers)
    try:
        for task, found in run_tasks(gate_clip, tasks, workers, stopped, pool, job="music check"):
            yield by_id[task["id"]], found
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _spread(settings: dict, workers: int, clips: int) -> bool:
    """Whether the gate runs in worker processes: it is on, there are cores, and enough clips to repay their start."""
    return settings["gate"] and workers > 1 and clips >= POOL_MIN_TASKS


def gate_clip(task: dict) -> dict:
    """In a worker: {"clean": True, "score"} when no chunk of the clip has music, as separate_verbose's gate would
    find; anything else (music, an unreadable or empty clip) is left to the main process, which says why."""
    if task["path"] is None:
        return {"clean": False}
    try:
        audio, sr = load_audio(task["path"])
    except StudioError:
        return {"clean": False}
    x = np.asarray(audio, dtype=np.float32)
    x = x[None] if x.ndim == 1 else x
    if x.ndim != 2 or x.shape[-1] == 0:
        return {"clean": False}
    scores = gate_scores(x, sr, backend_type(task["backend"]))
    return {"clean": not any(has_music(s, task["threshold"]) for s in scores),
            "score": max((round(s, 4) for s in scores), default=0.0)}


def _separate_row(ws: Workspace, row: dict, folder: Path, settings: dict, gated: dict | None):
    """(score, music found, speech or None, rate) of one clip; a clip a worker found clean is not read again."""
    if gated is not None and gated.get("clean"):
        return gated["score"], False, None, None
    audio, sr = load_audio(ws.inside(folder / original_audio(row)))
    result = separate_verbose(audio, sr, settings["backend"], gate=settings["gate"], threshold=settings["threshold"])
    score = None if result.music_score != result.music_score else round(result.music_score, 4)  # nan -> None
    return score, bool(result.separated), result.speech, sr


def _record(row: dict, folder: Path, settings: dict, score, music: bool, speech, sr) -> None:
    """The row's `music` result; the separated file written (music) or a stale one removed (clean)."""
    source = original_audio(row)
    in_use = row["audio"] == separated_audio(row)  # accepted earlier
    if music:
        save_audio(folder / separated_audio(row), speech, sr)
    else:  # clean clip: nothing to accept, and a stale result from an earlier run must not linger
        (folder / separated_audio(row)).unlink(missing_ok=True)
        row["audio"] = source if in_use else row["audio"]
    if in_use:
        _rehash(row, folder)
    row["music"] = {"score": score, "separated": music, "original": source, **settings}


def clearly_music(row: dict) -> bool:
    """The gate found music well above its threshold: separated audio is a safe default for this clip."""
    score = (row.get("music") or {}).get("score")
    return isinstance(score, (int, float)) and score >= CLEAR


MUSIC, FAINT, CLEAN, UNGATED = "music", "faint", "clean", "ungated"
# each clip's line in the run's log, in the verdict's own words: a faint score was logged "music: separated" while the
# clip stays as it is unless the curator picks it
LOG_WORDS = {MUSIC: "music: separated", FAINT: "faint: kept as is (separated only to listen to)",
             CLEAN: "clean: passed through", UNGATED: "separated (the music detector was off)"}


def verdict(row: dict) -> str | None:
    """The gate's decision on a clip, the one every count, table and list uses: MUSIC (clearly there), FAINT (over
    the gate's threshold, under CLEAR: separated to listen to, not used unless picked), CLEAN, UNGATED (separated
    with the detector off: no decision), or None (not checked yet)."""
    music = row.get("music")
    if not music:
        return None
    if not music.get("separated"):
        return CLEAN
    if music.get("score") is None:
        return UNGATED
    return MUSIC if clearly_music(row) else FAINT


def accept(ws: Workspace, name: str, ids: list[str] | None = None) -> int:
    """Point separated rows' `audio` at their separated file: the clips in `ids` (the curator's picks), else
    only those where music was clearly found; a faint score (between THRESHOLD and CLEAR) may be a steady
    voice, and its clip stays original until the curator listens and picks it. Returns how many rows changed."""
    picked = set(ids or [])
    missing = picked - set(get_rows(ws, name, sorted(picked)))
    if missing:
        raise StudioError(f"Dataset {name!r} has no clip {sorted(missing)[0]!r}: pick clips from its table.")

    def target(row: dict, folder: Path) -> str | None:
        music = row.get("music") or {}
        chosen = row["id"] in picked if picked else clearly_music(row)
        if chosen and music.get("separated") and (folder / separated_audio(row)).exists() \
                and row["audio"] != separated_audio(row):
            music.setdefault("original", original_audio(row))
            return separated_audio(row)
        return None

    candidates = sorted(picked) if picked else [i for (i,) in store_query(
        ws, name, "SELECT id FROM rows WHERE music_separated = 1 AND music_score >= ? ORDER BY pos", (CLEAR,))]
    return _repoint(ws, name, candidates, target)


def revert(ws: Workspace, name: str) -> int:
    """Point every row back at the curator's original clip. Returns how many rows changed."""
    playing_separated = [i for (i,) in store_query(ws, name, "SELECT id FROM rows WHERE audio LIKE ? ORDER BY pos",
                                                  (SEPARATED + "/%",))]
    return _repoint(ws, name, playing_separated, lambda row, folder: original_audio(row)
                    if row.get("audio", "").startswith(SEPARATED + "/") else None)


def _repoint(ws: Workspace, name: str, candidates: list[str], target) -> int:
    """`audio` = target(row) for each candidate row that gets one, with the flags of the audio it plays now (a clip
    cleaned of its music is no longer noisy) and the report's counts; only the candidates are read and only the
    rows that changed are written, so an accept costs the clips it moves, not the dataset. Returns how many."""
    from utils.datasets.curate import recheck_audio

    folder, changed = ws.dataset_dir(name), []
    found = get_rows(ws, name, candidates)
    for row in (found[i] for i in candidates if i in found):
        audio = target(row, folder)
        if audio is not None:
            row["audio"] = audio
            _rehash(row, folder)
            changed.append(row)
    if changed:
        recheck_audio(ws, name, changed)
    return len(changed)


def _rehash(row: dict, folder: Path) -> None:
    """`sha1` is the hash of the audio the row points at: the feature cache is keyed by it."""
    if "sha1" in row:
        row["sha1"] = content_sha1(folder / row["audio"], folder)  # also recorded in the digest index


FOUND = {MUSIC: "yes, clearly", FAINT: "faint: listen, pick to use", CLEAN: "no", UNGATED: "not judged (detector off)",
         None: "not checked"}


def summary(ws: Workspace, name: str) -> list[dict]:
    """One line per clip for the UI: id, music score, had music, separated file, in use."""
    return [_line(row) for row in load_manifest(ws, name)]


def _line(row: dict) -> dict:
    return {"id": row["id"], "music score": (row.get("music") or {}).get("score"), "music": FOUND[verdict(row)],
            "in use": "separated" if in_use(row) else "original"}


def in_use(row: dict) -> bool:
    """Whether training uses the row's music-removed audio (accepted)."""
    return row.get("audio", "").startswith(SEPARATED + "/")


LIST_ROWS = 500  # clips a list shows at once: at 200k clips a table or picker of every one would stall the page


def listening_order(ws: Workspace, name: str, limit: int | None = LIST_ROWS,
                    separated_only: bool = False) -> list[dict]:
    """summary()'s lines in the order a curator listens: the clips with music first, strongest first, then the
    faint candidates, strongest first, then the rest as they come; the first `limit` of them (separated_only: the
    clips that have music-removed audio). Sorted by SQLite on the table's columns."""
    rank = ("CASE WHEN music_separated = 1 AND music_score >= ? THEN 0 "
            "WHEN music_separated = 1 AND music_score < ? THEN 1 ELSE 2 END")
    found = store_query(ws, name, f"""SELECT id, audio, music_score, music_separated FROM rows
        {"WHERE music_separated = 1" if separated_only else ""}
        ORDER BY {rank}, CASE WHEN {rank} < 2 THEN -music_score ELSE 0 END, pos LIMIT ?""",
                        (CLEAR, CLEAR, CLEAR, CLEAR, -1 if limit is None else limit))
    return [_line({"id": i, "audio": audio, "music": None if sep is None else {"score": score, "separated": bool(sep)}})
            for i, audio, score, sep in found]


def progress(ws: Workspace, name: str) -> dict | None:
    """How far music removal went on a dataset (for the Dataset tab's advice): None when it never ran, else
    {"music", "faint": clips of each verdict, "in_use": clips training on their music-removed audio, "waiting":
    clips with music still on their original}. Counted by SQLite over the table's columns, as verdict() decides."""
    prefix = SEPARATED + "/"
    (checked, music, faint, used, waiting), = store_query(ws, name, """SELECT count(music_separated),
        coalesce(sum(music_separated = 1 AND music_score >= ?), 0),
        coalesce(sum(music_separated = 1 AND music_score < ?), 0), coalesce(sum(substr(audio, 1, ?) = ?), 0),
        coalesce(sum(music_separated = 1 AND music_score >= ? AND substr(audio, 1, ?) != ?), 0) FROM rows""",
        (CLEAR, CLEAR, len(prefix), prefix, CLEAR, len(prefix), prefix))
    return None if not checked else {"music": music, "faint": faint, "in_use": used, "waiting": waiting}


def after_label(ws: Workspace, name: str, clip_id: str) -> str:
    """What the After player of a clip holds, in words: the music-removed audio and whether training uses it, or
    nothing (no music found, or not checked yet)."""
    row = get_rows(ws, name, [clip_id]).get(clip_id)
    if row is None:
        raise StudioError(f"Dataset {name!r} has no clip {clip_id!r}.")
    found = verdict(row)
    if found is None:
        return "After: nothing yet (press Remove music)"
    if found == CLEAN:
        return "After: nothing (no music found in this clip; training uses it as it is)"
    use = "in use for training" if in_use(row) else \
        ("not in use: press Accept to use it" if found == MUSIC else "not in use unless you pick it under Clips to accept")
    why = {FAINT: "faint score, ", UNGATED: "detector off, "}.get(found, "")
    return f"After: music removed ({why}{use})"


def clip_paths(ws: Workspace, name: str, clip_id: str) -> tuple[Path, Path | None]:
    """(original, separated or None) files of one clip."""
    row = get_rows(ws, name, [clip_id]).get(clip_id)
    if row is None:
        raise StudioError(f"Dataset {name!r} has no clip {clip_id!r}.")
    folder = ws.dataset_dir(name)
    sep = folder / separated_audio(row)
    return ws.inside(folder / original_audio(row)), (sep if sep.exists() else None)
