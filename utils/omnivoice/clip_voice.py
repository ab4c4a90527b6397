"""A voice from one clip with no training: the one call behind the Inference tab's OmniVoice section and `app.py
clip-voice`. The clip is a dataset row's (its transcript comes with it) or any audio file with a typed transcript.
Everything the curator can get wrong is checked before the 3.3 GB base is fetched (the packages, the voice's name,
the clip's length and sound, the transcript), then the base (the licence's yes before its one download), then the
voice folder (speech.make_voice). Nothing given is changed: the clip is only read.

    run_to_end(make_clip_voice(ws, "tigist", dataset="am", row="am-004"), print)      # -> voices/tigist/
    run_to_end(make_clip_voice(ws, "abebe", clip="abebe.wav", text="ሰላም ነው። ...", accept_licence=True), print)
"""
from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Callable, Iterator

from utils.events import Event, StudioError
from utils.omnivoice.about import GOOD_PROMPT_SECONDS, HUB_ID
from utils.workspace import Workspace

CENTRE_S = 8.0   # suggested rows nearest this first: mid of the 5-15 s OmniVoice clones best from, one even take
SUGGESTED = 40   # rows offered at most (a picker, not a table)
STAGE = "clip voice"


# ------------------------------------------------------------------------------ which row
def suggest_rows(ws: Workspace, dataset: str, limit: int = SUGGESTED) -> list[dict]:
    """The rows that suit a reference clip best, as {id, duration, text}: kept rows with a transcript that last
    5-15 s, rows without a check's flag first, nearest 8 s first. SQLite orders the light columns; only the
    rows offered are read whole (for their text)."""
    from utils.datasets.manifest import get_rows, store_query

    low, high = GOOD_PROMPT_SECONDS
    found = store_query(ws, dataset, "SELECT id, duration FROM rows WHERE excluded = 0 AND has_text = 1 AND duration "
                        "BETWEEN ? AND ? ORDER BY flags != '', abs(duration - ?), pos LIMIT ?",
                        (low, high, CENTRE_S, int(limit)))
    rows = get_rows(ws, dataset, [i for i, _ in found])
    return [{"id": i, "duration": float(d), "text": (rows[i].get("text") or "").strip()} for i, d in found if i in rows]


def no_row_here(ws: Workspace, dataset: str) -> str:
    """Why a dataset offers no row for a clip, with the lengths its rows have: the picker stayed empty and Make voice
    said only "Give the clip the voice copies"."""
    from utils.datasets.manifest import store_query

    low, high = GOOD_PROMPT_SECONDS
    (shortest, longest), = store_query(ws, dataset, "SELECT min(duration), max(duration) FROM rows WHERE excluded = 0 "
                                       "AND has_text = 1")
    span = f"{shortest:.1f} s" if shortest is not None and f"{shortest:.1f}" == f"{longest:.1f}" else \
        f"{shortest or 0:.1f} to {longest or 0:.1f} s"
    lengths = f" (its kept clips with text last {span})" if shortest is not None else " (none of its kept clips has text)"
    return (f"Dataset {dataset} has no kept clip of {low:g}-{high:g} s with a transcript{lengths}: use an audio file "
            f"of {low:g}-{high:g} s and type what is said in it.")


def row_clip(ws: Workspace, dataset: str, row_id: str) -> tuple[Path, str]:
    """(the row's clip, its transcript), refused by row when the dataset lacks it or its clip is gone."""
    from utils.datasets.manifest import get_rows

    row = get_rows(ws, dataset, [row_id]).get(row_id)
    if row is None:
        best = ", ".join(f"{r['id']} ({r['duration']:.1f} s)" for r in suggest_rows(ws, dataset, limit=5))
        raise StudioError(f"Dataset {dataset!r} has no row {row_id!r}: pick one of its rows"
                          + (f"; these suit a clip best: {best}." if best else "."))
    clip = ws.inside(ws.dataset_dir(dataset) / row["audio"])
    if not clip.is_file():
        raise StudioError(f"Row {row_id} of dataset {dataset}: its clip {row['audio']} is missing. Prepare the "
                          "dataset again on the Dataset tab, or pick another row.")
    return clip, (row.get("text") or "").strip()


def _clip_and_text(ws: Workspace, dataset: str, row: str, clip, text: str | None) -> tuple[Path, str, str]:
    """(clip, transcript, where it came from) of a row (a typed transcript over the row's) or of a file."""
    if (dataset or row) and clip:
        raise StudioError("Give either a dataset row or an audio file for the voice, not both.")
    if clip:
        path = Path(clip).expanduser()
        if not path.is_file():
            raise StudioError(f"{clip}: no such audio file. Give the path of a WAV, FLAC or MP3 of 5-15 s.")
        return path, (text or "").strip(), path.name
    if dataset and not row:
        raise StudioError(no_row_here(ws, dataset) if not suggest_rows(ws, dataset, limit=1) else
                          f"Pick the row of dataset {dataset} whose clip the voice copies.")
    if not row:
        raise StudioError("Pick a dataset and the row whose clip the voice copies, or use an audio file and type "
                          "what is said in it.")
    path, row_text = row_clip(ws, dataset, row)
    return path, (text or "").strip() or row_text, f"dataset {dataset}, row {row}"


# ------------------------------------------------------------------------------ the checks and the base
def check_before_download(ws: Workspace, name: str, clip: Path, text: str) -> float:
    """Refuse what would fail after the base's download (no packages, a name in use, a bad clip or no transcript);
    the clip's seconds when it will do."""
    from utils.omnivoice.runtime import installed, missing_message
    from utils.omnivoice.speech import read_prompt

    if not installed():
        raise StudioError(missing_message())
    if ws.voice_dir(name).exists():
        raise StudioError(f"A voice called {name} exists already; pick another name.")
    return read_prompt(clip, text)[1]


def base_for_voice(ws: Workspace, accept_licence: bool, log=print) -> Path:
    """The base on this machine, else its download after the licence's yes; offline, the one thing to do instead."""
    from utils.omnivoice.base import base_folder, find_base, obtainable, refusal

    if find_base(ws) is None and not accept_licence:
        ready, why = obtainable(ws)
        raise StudioError(refusal() if ready else why)
    return base_folder(ws, HUB_ID, accept_licence=accept_licence, log=log)


def logged(work: Callable, stage: str) -> Iterator[Event]:
    """Run `work(log)` in a thread and yield each line it logs as an Event as it comes (a download or a pip
    install says what it does while it does it); returns what `work` returned, or raises what it raised, here."""
    lines: queue.Queue = queue.Queue()
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = work(lambda line: lines.put(str(line)))
        except BaseException as exc:  # handed to the generator's thread and raised there
            outcome["error"] = exc
        finally:
            lines.put(None)

    threading.Thread(target=run, daemon=True, name=stage).start()
    while (line := lines.get()) is not None:
        yield Event(stage, message=line)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


# ------------------------------------------------------------------------------ the services
def make_clip_voice(ws: Workspace, name: str, dataset: str = "", row: str = "", clip=None, text: str | None = None,
                    accept_licence: bool = False) -> Iterator[Event]:
    """voices/NAME/ from a dataset row (`dataset`, `row`; `text` overrides its transcript) or an audio file (`clip`,
    `text`), as events; the last carries the folder."""
    from utils.omnivoice.speech import make_voice

    path, transcript, source = _clip_and_text(ws, dataset, row, clip, text)
    seconds = check_before_download(ws, name, path, transcript)
    yield Event(STAGE, 1, 3, f"{source}: {seconds:.1f} s, transcript of {len(transcript)} characters")
    base = yield from logged(lambda log: base_for_voice(ws, accept_licence, log), "OmniVoice base")
    yield Event(STAGE, 2, 3, f"OmniVoice base: {base}")
    folder = make_voice(ws, name, path, transcript, base, source=source)
    yield Event(STAGE, 3, 3, f"voice {name} is ready in voices/{name}/", result=folder)


def install_runtime() -> Iterator[Event]:
    """OmniVoice's packages installed once (utils.omnivoice.runtime.install), its lines as events; the last carries
    the folder."""
    from utils.omnivoice.runtime import install

    folder = yield from logged(install, "install OmniVoice")
    yield Event("install OmniVoice", 1, 1, "OmniVoice is installed: make a voice below", result=folder)
