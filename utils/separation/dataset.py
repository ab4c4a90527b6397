"""Music removal over a dataset: gate and separate every clip, record the decision, accept or revert.

Reads and writes `datasets/<name>/manifest.jsonl` (utils.workspace.read_jsonl / write_jsonl, atomic).
Per row, `music` becomes {"score", "separated", "backend", "original"}; separated speech goes to
`separated/<id>.wav` at the clip's own rate. The curator's files (`raw/`, `audio/`) are never written.
"Accept" points each separated row's `audio` at `separated/<id>.wav`; "revert" points it back; both
update the row's `sha1` (the feature cache key) to the file it now points at.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from utils.audio import load_audio, save_audio
from utils.datasets.features import content_sha1
from utils.events import Event, StudioError
from utils.separation.api import choose_backend, separate_verbose
from utils.separation.gate import CLEAR, THRESHOLD
from utils.workspace import Workspace, read_jsonl, write_jsonl

SEPARATED = "separated"


def manifest_path(ws: Workspace, name: str) -> Path:
    path = ws.dataset_dir(name) / "manifest.jsonl"
    if not path.exists():
        raise StudioError(f"Dataset {name!r} has no manifest.jsonl; prepare it on the Dataset tab first.")
    return path


def original_audio(row: dict) -> str:
    """The curator's clip for this row, even after an accept pointed `audio` at the separated file."""
    music = row.get("music") or {}
    return music.get("original") or (row["audio"] if not row["audio"].startswith(SEPARATED + "/")
                                     else f"audio/{row['id']}.wav")


def separated_audio(row: dict) -> str:
    return f"{SEPARATED}/{row['id']}.wav"


def process_dataset(ws: Workspace, name: str, backend: str = "auto", gate: bool = True,
                    threshold: float = THRESHOLD, should_stop: Callable[[], bool] | None = None) -> Iterator[Event]:
    """Gate and separate every clip; one event per clip. The manifest is saved every 20 clips and at the end.

    Result: {"backend", "reason", "clips", "with_music", "separated", "errors": [str]}.
    """
    path = manifest_path(ws, name)
    folder = path.parent
    rows = read_jsonl(path)
    choice = choose_backend(backend)
    yield Event("separate", 0, len(rows), f"backend {choice.name}: {choice.reason}")
    errors: list[str] = []
    try:
        yield from _process_rows(ws, rows, folder, choice.name, gate, threshold, should_stop, errors)
    except GeneratorExit:  # the UI's cancel closes the generator: keep what was done so far
        write_jsonl(path, rows)
        raise
    write_jsonl(path, rows)
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


def _process_rows(ws: Workspace, rows: list[dict], folder: Path, backend: str, gate: bool, threshold: float,
                  should_stop: Callable[[], bool] | None, errors: list[str]) -> Iterator[Event]:
    path = folder / "manifest.jsonl"
    for i, row in enumerate(rows):
        if should_stop is not None and should_stop():
            write_jsonl(path, rows)
            raise StudioError(f"Cancelled after {i} of {len(rows)} clips; their results are saved.")
        source = original_audio(row)
        try:
            audio, sr = load_audio(ws.inside(folder / source))
            result = separate_verbose(audio, sr, backend, gate=gate, threshold=threshold)
        except StudioError as exc:
            errors.append(f"row {row.get('id')}: {exc}")
            yield Event("separate", i + 1, len(rows), f"{row.get('id')}: {exc}", level="warning")
            continue
        music = bool(result.separated)
        in_use = row["audio"] == separated_audio(row)  # accepted earlier
        if music:
            save_audio(folder / separated_audio(row), result.speech, sr)
        else:  # clean clip: nothing to accept, and a stale result from an earlier run must not linger
            (folder / separated_audio(row)).unlink(missing_ok=True)
            row["audio"] = source if in_use else row["audio"]
        if in_use:
            _rehash(row, folder)
        score = None if result.music_score != result.music_score else round(result.music_score, 4)  # nan -> None
        row["music"] = {"score": score, "separated": music, "backend": backend, "original": source}
        if (i + 1) % 20 == 0:
            write_jsonl(path, rows)
        verdict = "music: separated" if music else "clean: passed through"
        yield Event("separate", i + 1, len(rows), f"{row['id']} {verdict} (score {score})")


def clearly_music(row: dict) -> bool:
    """The gate found music well above its threshold: separated audio is a safe default for this clip."""
    score = (row.get("music") or {}).get("score")
    return isinstance(score, (int, float)) and score >= CLEAR


MUSIC, FAINT, CLEAN, UNGATED = "music", "faint", "clean", "ungated"


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
    missing = picked - {r["id"] for r in read_jsonl(manifest_path(ws, name))}
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

    return _repoint(ws, name, target)


def revert(ws: Workspace, name: str) -> int:
    """Point every row back at the curator's original clip. Returns how many rows changed."""
    return _repoint(ws, name, lambda row, folder: original_audio(row)
                    if row.get("audio", "").startswith(SEPARATED + "/") else None)


def _rechecked(ws: Workspace, name: str, count: int) -> int:
    """After rows changed audio, their flags describe the audio they play now (a clip cleaned of its music is no
    longer noisy), and the Dataset tab's report says so."""
    if count:
        from utils.datasets.curate import recheck

        recheck(ws, name)
    return count


def _repoint(ws: Workspace, name: str, target) -> int:
    """Rewrite the manifest with `audio` = target(row) wherever it gives one, then the flags of what changed (a
    re-check); returns how many rows changed."""
    path = manifest_path(ws, name)
    rows = read_jsonl(path)
    count = 0
    for row in rows:
        audio = target(row, path.parent)
        if audio is not None:
            row["audio"] = audio
            _rehash(row, path.parent)
            count += 1
    write_jsonl(path, rows)
    return _rechecked(ws, name, count)


def _rehash(row: dict, folder: Path) -> None:
    """`sha1` is the hash of the audio the row points at: the feature cache is keyed by it."""
    if "sha1" in row:
        row["sha1"] = content_sha1(folder / row["audio"], folder)  # also recorded in the digest index


FOUND = {MUSIC: "yes, clearly", FAINT: "faint: listen, pick to use", CLEAN: "no", UNGATED: "not judged (detector off)",
         None: "not checked"}


def summary(ws: Workspace, name: str) -> list[dict]:
    """One line per clip for the UI: id, music score, had music, separated file, in use."""
    rows = read_jsonl(manifest_path(ws, name))
    return [{"id": row["id"], "music score": (row.get("music") or {}).get("score"), "music": FOUND[verdict(row)],
             "in use": "separated" if in_use(row) else "original"} for row in rows]


def in_use(row: dict) -> bool:
    """Whether training uses the row's music-removed audio (accepted)."""
    return row.get("audio", "").startswith(SEPARATED + "/")


def listening_order(ws: Workspace, name: str) -> list[dict]:
    """summary()'s lines in the order a curator listens: the clips with music first, strongest first, then the
    faint candidates, strongest first, then the rest as they come."""
    lines = summary(ws, name)
    rank = {FOUND[MUSIC]: 0, FOUND[FAINT]: 1}
    return sorted(lines, key=lambda r: (rank.get(r["music"], 2), -(r["music score"] or 0) if r["music"] in rank else 0))


def progress(ws: Workspace, name: str) -> dict | None:
    """How far music removal went on a dataset (for the Dataset tab's advice): None when it never ran, else
    {"music", "faint": clips of each verdict, "in_use": clips training on their music-removed audio, "waiting":
    clips with music still on their original}."""
    rows = read_jsonl(manifest_path(ws, name))
    verdicts = [verdict(r) for r in rows]
    if verdicts.count(None) == len(rows):
        return None
    return {"music": verdicts.count(MUSIC), "faint": verdicts.count(FAINT), "in_use": sum(map(in_use, rows)),
            "waiting": sum(v == MUSIC and not in_use(r) for v, r in zip(verdicts, rows))}


def after_label(ws: Workspace, name: str, clip_id: str) -> str:
    """What the After player of a clip holds, in words: the music-removed audio and whether training uses it, or
    nothing (no music found, or not checked yet)."""
    row = next((r for r in read_jsonl(manifest_path(ws, name)) if r["id"] == clip_id), None)
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
    rows = read_jsonl(manifest_path(ws, name))
    for row in rows:
        if row["id"] == clip_id:
            folder = ws.dataset_dir(name)
            sep = folder / separated_audio(row)
            return ws.inside(folder / original_audio(row)), (sep if sep.exists() else None)
    raise StudioError(f"Dataset {name!r} has no clip {clip_id!r}.")
