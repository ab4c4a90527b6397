"""Speaking a text file: one WAV per line, collected in a zip with a manifest, progress as events.

A line is `text` or `id|text` (LJSpeech style: the id names the WAV). Blank lines and lines starting
with # are skipped; a line that cannot be spoken is reported by number and the rest goes on.
"""
from __future__ import annotations

import csv
import io
import re
import time
import zipfile
from pathlib import Path
from typing import Iterator

from utils.events import Event, StudioError
from utils.workspace import Workspace, stamped_name

MAX_LINES = 5000


def read_lines(path: str | Path) -> list[tuple[str, str, int]]:
    """(id, text, line number) per non-empty line of a UTF-8 text file."""
    path = Path(path)
    try:
        raw = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise StudioError(f"{path.name} is not UTF-8 text; save it as UTF-8 (Notepad: Save as, Encoding UTF-8).") from None
    except OSError as exc:
        raise StudioError(f"{path.name} cannot be read ({exc.strerror}).") from None
    rows = []
    for number, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        ident, text = line.split("|", 1) if "|" in line else ("", line)
        ident = re.sub(r"[^\w.-]+", "_", ident.strip())[:80].strip("._") or f"{number:05d}"
        rows.append((ident, text.strip(), number))
    if not rows:
        raise StudioError(f"{path.name} holds no lines to speak (one sentence or paragraph per line; 'id|text' names the file).")
    if len(rows) > MAX_LINES:
        raise StudioError(f"{path.name} has {len(rows)} lines; split it into files of at most {MAX_LINES}.")
    return rows


def speak_file(ws: Workspace, voice: str, path: str | Path, vocoder: str | None = None, device: str = "auto",
               **options) -> Iterator[Event]:
    """Yield progress events; the last carries {"zip", "written", "failed": [(line id, message)], "seconds"}.
    options: speaker, steps, temperature, length_scale, seed (as `Voice.stream`)."""
    import numpy as np
    import soundfile as sf

    from utils.inference.speech import workspace_voice
    from utils.text import load_user_dict

    rows = read_lines(path)
    loaded = workspace_voice(ws, voice, vocoder, device)  # a voice that cannot load fails here, once
    user_dict = load_user_dict(ws)
    out = ws.root / "exports" / stamped_name("batch", f"-{Path(path).stem[:40]}.zip")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".zip.tmp")
    manifest = io.StringIO()
    table = csv.writer(manifest)
    table.writerow(["file", "text", "duration_s", "voice"])  # which voice spoke: a zip outlives the picker's choice
    failed, seen, start = [], set(), time.perf_counter()
    yield Event("batch", 0, len(rows), f"speaking {len(rows)} lines of {Path(path).name}")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for done, (ident, text, number) in enumerate(rows, 1):
            name = ident if ident not in seen else f"{ident}-{number}"
            again = f"; the name {ident} was taken by an earlier line" if name != ident else ""
            seen.add(name)
            try:
                wave, sr, info = loaded.synthesize(text, user_dict=user_dict, **options)
            except StudioError as exc:  # said by its line number in the file, where the curator fixes it
                failed.append((f"line {number}", str(exc)))
                yield Event("batch", done, len(rows), f"line {number} ({ident}): {exc}", level="warning")
                continue
            buffer = io.BytesIO()
            sf.write(buffer, np.clip(wave, -1, 1), sr, format="WAV", subtype="PCM_16")
            zf.writestr(f"{name}.wav", buffer.getvalue())
            table.writerow([f"{name}.wav", text, f"{info['duration_s']:.2f}", voice])
            yield Event("batch", done, len(rows), f"{name}.wav ({info['duration_s']:.1f} s{again})")
        zf.writestr("manifest.csv", manifest.getvalue())
    written = len(rows) - len(failed)
    if not written:  # an empty zip offered as the batch's result, and the command line's exit 0, read as done
        tmp.unlink()
        shown = "; ".join(f"{where}: {why}" for where, why in failed[:3]) + ("; ..." if len(failed) > 3 else "")
        raise StudioError(f"No line of {Path(path).name} could be spoken, so no zip was made ({shown}). Fix those "
                          "lines and try again.")
    tmp.replace(out)
    yield Event("batch", len(rows), len(rows), f"{written} WAV(s) of voice {voice}"
                + (f", {len(failed)} line(s) failed" if failed else ""),
                result={"zip": out, "written": written, "failed": failed, "seconds": time.perf_counter() - start,
                        "voice": voice})
