"""A dataset's rows (`manifest.sqlite`, through `store`) and its `report.json` (formats in CONTRIBUTING.md)."""
from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

from utils.datasets import store
from utils.datasets.store import READ_WITH
from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_json, read_json

ROW_KEYS = ("id", "audio", "text", "normalized", "phonemes", "duration", "speaker", "split", "flags",
            "excluded", "source", "sha1", "music")


def manifest_folder(ws: Workspace, name: str) -> Path:
    """The dataset's folder, refused by name when there is none (naming those there are: a name typed with a capital,
    "Am", was called not prepared yet) or it holds no rows yet."""
    folder = ws.dataset_dir(name)
    if not folder.is_dir():
        there = ws.list_datasets()
        raise StudioError(f"There is no dataset called {name!r}. "
                          + (f"Datasets: {', '.join(there)}." if there else
                             "None is prepared yet: prepare one on the Dataset tab (or python app.py prepare)."))
    if not store.exists(folder):
        raise StudioError(f"Dataset {name!r} has no rows yet; prepare it on the Dataset tab first (or python app.py "
                          "prepare).")
    return folder


def load_manifest(ws: Workspace, name: str, keys: tuple[str, ...] | None = None) -> list[dict]:
    """Every row, in order; with `keys`, only those fields of each (a trainer holding 200k rows keeps what it
    reads: the checks' notes and measurements are most of a row)."""
    rows = store.iter_rows(manifest_folder(ws, name))
    return list(rows) if keys is None else [{k: r[k] for k in keys if k in r} for r in rows]


def get_rows(ws: Workspace, name: str, ids: list[str]) -> dict[str, dict]:
    """{id: row} of the ids the dataset has, read without the rest of the table."""
    return store.get(manifest_folder(ws, name), list(ids))


def update_rows(ws: Workspace, name: str, rows: list[dict]) -> None:
    """Write back these rows only (an edit of one row writes one row)."""
    store.update(manifest_folder(ws, name), rows)


def store_query(ws: Workspace, name: str, sql: str, params: tuple = ()) -> list[tuple]:
    """A SELECT over the dataset's table (see store.COLUMNS), refused by name when there is none."""
    return store.query(manifest_folder(ws, name), sql, params)


def usable_hours(ws: Workspace, name: str, with_text: bool = False) -> float:
    """Hours of the rows a run trains on (with_text: those with a transcript), summed by SQLite."""
    text = " AND (',' || flags || ',') NOT LIKE '%,missing_text,%'" if with_text else ""
    (seconds,), = store.query(manifest_folder(ws, name), f"SELECT total(duration) FROM rows WHERE excluded = 0{text}")
    return seconds / 3600


def held_out_clips(ws: Workspace, name: str) -> int:
    """The usable held-out (val) clips a run measures its quality on."""
    (held,), = store.query(manifest_folder(ws, name), "SELECT count(*) FROM rows WHERE excluded = 0 AND split = 'val'")
    return held


def require_usable(ws: Workspace, name: str) -> None:
    """Refuse, naming the dataset, when it has no row a run could train on: a run started on it would fail seconds
    later, after its run folder and queue entry were made. Reads one column, not the rows."""
    if name not in ws.list_datasets():
        raise StudioError(f"There is no prepared dataset called {name!r}; prepare it on the Dataset tab (or python "
                          "app.py prepare).")
    if not store.query(manifest_folder(ws, name), "SELECT 1 FROM rows WHERE excluded = 0 LIMIT 1"):
        raise StudioError(f"Dataset {name!r} has no usable clip to train on (every row is excluded, or none was "
                          "made): keep some rows on the Dataset tab, or prepare it again with recordings.")


def save_manifest(ws: Workspace, name: str, rows: list[dict]) -> None:
    ids = Counter(r["id"] for r in rows)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise StudioError(f"Dataset {name!r}: ids must be unique; repeated: {', '.join(dup[:5])}.")
    store.write_all(ws.dataset_dir(name), rows)


EXPORT_COLUMNS = ("id", "audio", "text", "normalized", "phonemes", "duration", "speaker", "split", "excluded",
                  "review", "flags", "messages")


def export_rows(ws: Workspace, name: str, out: Path) -> Path:
    """Write the dataset's rows to `out`: every field as JSON lines (.jsonl), or the columns a curator reads as a
    spreadsheet (.csv, UTF-8 with a byte-order mark so Excel shows the Ethiopic letters). Rows are streamed. Put a
    .jsonl back as the dataset's manifest.jsonl and it is read in on the next use."""
    out = Path(out)
    if out.suffix.lower() not in (".jsonl", ".csv"):
        raise StudioError(f"Export to a .jsonl or .csv file, not {out.name}.")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    rows = store.iter_rows(manifest_folder(ws, name))
    with open(tmp, "w", encoding="utf-8-sig" if out.suffix.lower() == ".csv" else "utf-8", newline="") as f:
        if out.suffix.lower() == ".jsonl":
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        else:
            w = csv.writer(f)
            w.writerow(EXPORT_COLUMNS)
            w.writerows([*(r.get(k) for k in EXPORT_COLUMNS[:-2]), ", ".join(r.get("flags") or []),
                         "; ".join((r.get("notes") or {}).values())] for r in rows)
    tmp.replace(out)
    return out


# the curator's decisions and the checks' words: columns of the export that no transcript table has
_STUDIO_ONLY = {"excluded", "review", "flags", "messages"}


def is_export_csv(path: Path) -> bool:
    """Whether a table's header is the CSV export's (EXPORT_COLUMNS), as a spreadsheet saves it again after an edit:
    in any order, with any separator, and with a column or two deleted, as long as two of the studio's own columns
    (_STUDIO_ONLY) remain. A dataset's rows to read, which are not read back. A transcript table (file/path/audio and
    text, a speaker, even normalized text and a duration) has not those columns, and LJSpeech's metadata.csv no
    header."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)  # the header line, not a 200k-row table
    except OSError:
        return False
    text = head.decode("utf-16", "ignore") if head.startswith((b"\xff\xfe", b"\xfe\xff")) else \
        head.decode("utf-8-sig", "ignore")
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    names = {n.strip().strip('"').strip().lower() for n in re.split(r"[,;\t|]", first)}
    return len(names & set(EXPORT_COLUMNS)) >= len(EXPORT_COLUMNS) - 2 and len(names & _STUDIO_ONLY) >= 2


def load_report(ws: Workspace, name: str) -> dict:
    return read_json(ws.dataset_dir(name) / "report.json", default={"summary": {}, "errors": []})


_SUMMARY = """SELECT count(*), total(duration), coalesce(sum(excluded = 0), 0),
    total(CASE WHEN excluded = 0 THEN duration END), count(DISTINCT CASE WHEN excluded = 0 THEN speaker END),
    coalesce(sum(excluded = 0 AND split = 'train'), 0), coalesce(sum(excluded = 0 AND split = 'val'), 0),
    coalesce(sum(flags != ''), 0) FROM rows"""


def summarize(ws: Workspace, name: str, errors: list[dict], fmt: str | None = None) -> dict:
    """The report's summary, counted by SQLite over the table's light columns (no row decoded)."""
    folder = ws.dataset_dir(name)
    if not store.exists(folder):  # an import that made nothing: a summary of nothing
        clips, hours, usable, usable_hours, speakers, train, val, flagged, combos = 0, 0.0, 0, 0.0, 0, 0, 0, 0, []
    else:
        (clips, hours, usable, usable_hours, speakers, train, val, flagged), = store.query(folder, _SUMMARY)
        combos = store.query(folder, "SELECT flags, count(*) FROM rows WHERE flags != '' GROUP BY flags")
    flags: Counter = Counter()
    for combo, n in combos:
        for f in combo.split(","):
            flags[f] += n
    return {"format": fmt, "clips": clips, "usable_clips": usable, "excluded_clips": clips - usable,
            "hours": round(hours / 3600, 4), "usable_hours": round(usable_hours / 3600, 4), "speakers": speakers,
            "train_clips": train, "val_clips": val, "flagged_clips": flagged, "flags": dict(sorted(flags.items())),
            "errors": len(errors)}


def write_report(ws: Workspace, name: str, errors: list[dict], fmt: str | None, extra: dict | None = None) -> dict:
    """report.json: the summary of the saved table and the files that could not be used (what each row has is in
    the table)."""
    report = {"summary": {**summarize(ws, name, errors, fmt), **(extra or {})}, "errors": errors}
    atomic_write_json(ws.dataset_dir(name) / "report.json", report)
    return report


def record_read_with(ds_dir, stamp: str | None) -> None:
    """Say which dictionary all of a dataset's rows were read with (None: not one, or not known)."""
    path = Path(ds_dir) / READ_WITH
    if stamp is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write_json(path, {"dictionary": stamp})
