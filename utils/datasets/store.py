"""A dataset's rows in one SQLite file, `manifest.sqlite`: one edit writes one row, a view reads one page.

Why: 200 hours is ~200k rows, and a JSON-lines manifest meant rewriting ~100 MB for every click. SQLite writes
the rows an edit touched inside a transaction (a write cut off by a crash or a reset is rolled back from its
journal: the table is as before or as after, never half), and Python, pandas (`pandas.read_sql("select * from
rows", sqlite3.connect(path))`) and the `sqlite3` command read it as it is. Each row is kept whole as JSON
(`data`) beside the few columns the views filter, count and sort on (COLUMNS); an index holds those columns again,
so a count or a plot reads the index, not the rows' JSON.

A `manifest.jsonl` in the dataset's folder (a dataset made by an older studio, an export edited and put back) is
imported first, replacing the rows, and then renamed `manifest.jsonl.imported`: a JSON-lines file there is always
one waiting to be read, never a stale copy of the table.
"""
from __future__ import annotations

import bisect
import json
import os
import sqlite3
import statistics
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from utils.datasets.checks import speaking_rate, text_hash
from utils.datasets.config import EXCLUDING_FLAGS

FILE = "manifest.sqlite"
JSONL = "manifest.jsonl"
# in a dataset's folder: {"dictionary": dictionary_stamp of the pronunciation dictionary every row was read with}.
# Absent: not known (rows read before it was kept, or a preparation that reused clips checked under another one).
READ_WITH = "read_with.json"
PUT_BACK = "rows put back: not read yet"  # READ_WITH's record after an import: equal to no dictionary's stamp
# pos: the row's place (0..n-1); flagged: has flags, a decision or a fixed transcript (the review table's rows);
# flags: comma-separated;
# rate: characters a second (None without text); music_score, music_separated: the music gate's, None before it ran;
# has_text: the transcript is not empty; text_hash: text_hash() of it (a check's texts compared without the JSON)
COLUMNS = ("id", "duration", "speaker", "split", "excluded", "flagged", "flags", "rate", "audio", "music_score",
           "music_separated", "has_text", "text_hash", "data")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (pos INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, duration REAL, speaker TEXT,
    split TEXT, excluded INTEGER, flagged INTEGER, flags TEXT, rate REAL, audio TEXT, music_score REAL,
    music_separated INTEGER, has_text INTEGER, text_hash INTEGER, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS rows_to_review ON rows(flagged, pos);
CREATE INDEX IF NOT EXISTS rows_rate ON rows(rate);
CREATE INDEX IF NOT EXISTS rows_light ON rows(excluded, flags, duration, speaker, split, rate, audio, music_score,
    music_separated, has_text, id);
CREATE INDEX IF NOT EXISTS rows_texts ON rows(excluded, has_text, id, text_hash);
CREATE INDEX IF NOT EXISTS rows_same_text ON rows(text_hash);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""
# PRAGMA user_version of the file: a table written under an older layout (other light columns, an index more or
# less) is laid out again from its rows' JSON the first time this version opens it; 0 is a file made before the
# number was kept (its layout is this one's) or a new file. Raise it whenever COLUMNS or _SCHEMA change.
SCHEMA_VERSION = 4  # 2: text_hash and its index; 3: a fixed transcript is "flagged" (listed), text_hash indexed;
# 4: text_hash no longer counts spaces
# JOURNAL: a rollback journal kept between writes (PERSIST: a commit zeroes its header), not one made and deleted
# by every write (DELETE, SQLite's default), and never WAL. Colab's workspace lives on Google Drive's FUSE mount:
# every file deleted there goes to Drive's trash, and a click would leave one behind; WAL's shared-memory index
# needs mmap that network and FUSE file systems do not keep coherent. Locks are POSIX locks, which a FUSE mount
# whose daemon has none keeps in the kernel for this machine's processes (tests/test_store_on_fuse.py mounts one).
JOURNAL_LIMIT = 8 << 20  # bytes the kept journal may stay at after a large write (a 200-hour import)
_CHUNK = 500  # ids per IN (...) query: under SQLite's variable limit everywhere


def exists(folder: Path) -> bool:
    return (folder / FILE).exists() or (folder / JSONL).exists()


@contextmanager
def _open(folder: Path, write: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection in autocommit mode; a write holds the write lock from its start (BEGIN IMMEDIATE), so two
    writers queue instead of one failing halfway. Imports a changed manifest.jsonl first."""
    changed = _changed_at(folder)
    with closing(sqlite3.connect(folder / FILE, timeout=60, isolation_level=None)) as con:
        con.execute("PRAGMA journal_mode = PERSIST")  # per connection: see JOURNAL
        con.execute(f"PRAGMA journal_size_limit = {JOURNAL_LIMIT}")
        _lay_out(con, folder)
        _import_jsonl(con, folder)
        _keep_changed_at(folder, changed)
        if not write:
            yield con
            return
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")


def _changed_at(folder: Path) -> int | None:
    """When the rows last changed (ns): the table's time, or a manifest.jsonl waiting to be read if newer."""
    times = [p.stat().st_mtime_ns for p in (folder / FILE, folder / JSONL) if p.exists()]
    return max(times, default=None)


def _keep_changed_at(folder: Path, changed: int | None) -> None:
    """The table's time stays when the rows did not change: a layout of a newer version or an older studio's
    manifest.jsonl read in is not an edit, and the pickers show the dataset changed last (Workspace.newest_dataset):
    a dataset merely opened first became everyone's default."""
    try:
        if changed is not None and (st := (folder / FILE).stat()).st_mtime_ns != changed:
            os.utime(folder / FILE, ns=(st.st_atime_ns, changed))
    except OSError:  # a file system that keeps no times set by hand: the pickers' default may move, nothing else
        pass


def _version(con: sqlite3.Connection) -> int:
    return con.execute("PRAGMA user_version").fetchone()[0]


def _lay_out(con: sqlite3.Connection, folder: Path) -> None:
    """The table in this version's layout: made if new, laid out again from its rows' JSON if written under an
    older one (in one transaction: a crash leaves the old table as it was); a newer studio's file is refused."""
    version = _version(con)
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        from utils.events import StudioError

        raise StudioError(f"{folder / FILE} was written by a newer version of the studio (table layout "
                          f"{version}; this one knows {SCHEMA_VERSION}). Update the studio (git pull, then "
                          "install the requirements again) to open this dataset; nothing was changed in it.")
    con.execute("BEGIN IMMEDIATE")
    try:
        if _version(con) < SCHEMA_VERSION:  # another process may have laid it out while this one waited
            old = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'rows'").fetchone()
            rows = [json.loads(d) for (d,) in con.execute("SELECT data FROM rows ORDER BY pos")] if old else []
            con.execute("DROP TABLE IF EXISTS rows")  # its indexes go with it
            for statement in filter(str.strip, _SCHEMA.split(";")):
                con.execute(statement)
            _replace(con, rows)
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _stamp(path: Path) -> str | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}"  # a copied folder keeps both: its table is not overwritten


def _import_jsonl(con: sqlite3.Connection, folder: Path) -> None:
    stamp = _stamp(folder / JSONL)
    if stamp is None or stamp == _meta(con, "jsonl_stamp"):
        return
    from utils.workspace import read_jsonl

    con.execute("BEGIN IMMEDIATE")
    before = {}
    try:
        if stamp != _meta(con, "jsonl_stamp"):  # another process may have imported it while this one waited
            before = dict(con.execute("SELECT id, text_hash FROM rows"))
            _replace(con, [_as_decided(row, before) for row in read_jsonl(folder / JSONL)])
            _set_meta(con, "jsonl_stamp", stamp)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    if before:  # rows put back over a table (not an older studio's first file): the next run reads them again
        from utils.workspace import atomic_write_json

        atomic_write_json(folder / READ_WITH, {"dictionary": PUT_BACK})
    try:  # after the commit: a crash before it leaves the file to import again
        os.replace(folder / JSONL, folder / (JSONL + ".imported"))
    except OSError:  # read-only, or another process renamed it first: the stamp keeps it from being read twice
        pass


NOT_KEPT = ("missing_text", "silent")  # flags no Keep overrules (utils.datasets.curate.NOT_KEPT says why)


def _as_decided(row: dict, before: dict[str, str]) -> dict:
    """A put-back row's own `excluded` and text are the curator's: an exclusion (or a keep) set by hand becomes a
    decision, and a changed text a fixed transcript, or the next check of the rows undid the one (the row was back
    in training) and the next preparation the other. `before`: the table's text hashes by id."""
    flags = set(row.get("flags") or [])
    if row.get("review") is None and bool(row.get("excluded")) != bool(flags & EXCLUDING_FLAGS):
        if row.get("excluded") or not flags & set(NOT_KEPT):
            row["review"] = "exclude" if row.get("excluded") else "keep"
    if row.get("id") in before and text_hash(row.get("text")) != before[row["id"]]:
        row["text_fixed"] = True
    return row


def _meta(con: sqlite3.Connection, key: str) -> str | None:
    got = con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return got[0] if got else None


def _set_meta(con: sqlite3.Connection, key: str, value: str) -> None:
    con.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))


def _columns(row: dict) -> tuple:
    flags = list(row.get("flags") or [])
    rate = None if "missing_text" in flags else speaking_rate(row)
    music = row.get("music") or {}
    separated = None if not music else int(bool(music.get("separated")))
    return (row["id"], float(row.get("duration") or 0.0), row.get("speaker") or "", row.get("split") or "",
            int(bool(row.get("excluded"))), int(bool(flags or row.get("review") or row.get("text_fixed"))), ",".join(flags), rate,
            row.get("audio"), music.get("score"), separated, int(bool((row.get("text") or "").strip())),
            text_hash(row.get("text")), json.dumps(row, ensure_ascii=False))


def _replace(con: sqlite3.Connection, rows: Iterable[dict]) -> None:
    con.execute("DELETE FROM rows")
    con.executemany(f"INSERT INTO rows (pos, {', '.join(COLUMNS)}) VALUES (?{', ?' * len(COLUMNS)})",
                    ((pos, *_columns(r)) for pos, r in enumerate(rows)))


def write_all(folder: Path, rows: list[dict]) -> None:
    """Replace every row (a preparation, a re-check): one transaction."""
    folder.mkdir(parents=True, exist_ok=True)
    with _open(folder, write=True) as con:
        _replace(con, rows)


def update(folder: Path, rows: list[dict]) -> None:
    """Write back the rows given (matched by id), and only those: one transaction."""
    names = [c for c in COLUMNS if c != "id"]
    with _open(folder, write=True) as con:
        con.executemany(f"UPDATE rows SET {', '.join(f'{c} = ?' for c in names)} WHERE id = ?",
                        ((*_columns(r)[1:], r["id"]) for r in rows))


def read_all(folder: Path) -> list[dict]:
    return list(iter_rows(folder))


def iter_rows(folder: Path) -> Iterator[dict]:
    """Every row in table order, one at a time (an export of 200k rows holds one row in memory)."""
    with _open(folder) as con:
        for (d,) in con.execute("SELECT data FROM rows ORDER BY pos"):
            yield json.loads(d)


def get(folder: Path, ids: list[str]) -> dict[str, dict]:
    """{id: row} of the ids that exist."""
    out: dict[str, dict] = {}
    with _open(folder) as con:
        for i in range(0, len(ids), _CHUNK):
            part = ids[i:i + _CHUNK]
            query = f"SELECT data FROM rows WHERE id IN ({', '.join('?' * len(part))})"
            out.update((r["id"], r) for r in (json.loads(d) for (d,) in con.execute(query, part)))
    return out


def ids_in_order(folder: Path, where: dict[str, list]) -> list[str]:
    """The ids of the rows whose column has one of the values given ({"text_hash": [...], "id": [...]}: either
    matches), in table order; read from the indexes."""
    pos: dict[str, int] = {}
    with _open(folder) as con:
        for column, values in where.items():
            assert column in COLUMNS, column
            for i in range(0, len(values), _CHUNK):
                part = list(values[i:i + _CHUNK])
                pos.update(con.execute(f"SELECT id, pos FROM rows WHERE {column} IN ({', '.join('?' * len(part))})",
                                       part))
    return sorted(pos, key=pos.__getitem__)


def page(folder: Path, include_ok: bool, offset: int, limit: int) -> tuple[list[dict], int]:
    """(rows offset..offset+limit in table order, how many there are): the flagged or decided ones only unless
    include_ok."""
    with _open(folder) as con:
        if include_ok:  # pos runs 0..n-1: the page is found by seeking, not by stepping over the rows before it
            total = con.execute("SELECT count(*) FROM rows").fetchone()[0]
            found = con.execute("SELECT data FROM rows WHERE pos >= ? ORDER BY pos LIMIT ?", (int(offset), int(limit)))
        else:  # steps over the index's entries only
            total = con.execute("SELECT count(*) FROM rows WHERE flagged = 1").fetchone()[0]
            found = con.execute("SELECT data FROM rows WHERE flagged = 1 ORDER BY pos LIMIT ? OFFSET ?",
                                (int(limit), int(offset)))
        rows = [json.loads(d) for (d,) in found]
    return rows, total


def query(folder: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """A read-only SELECT over the table `rows` (COLUMNS; never `data` for every row: that is what the light
    columns are for): counts, sums and samples computed by SQLite, not in Python."""
    with _open(folder) as con:
        return con.execute(sql, params).fetchall()


def rate_median(folder: Path, replaced: dict[str, float | None] | None = None) -> float | None:
    """The median speaking rate of the rows with text, with `replaced` {id: rate} standing in for the stored
    rates of rows being edited; None below five rates (too few to call one an outlier). Reads the rate index."""
    replaced = replaced or {}
    with _open(folder) as con:
        rates = [r for (r,) in con.execute("SELECT rate FROM rows WHERE rate > 0 ORDER BY rate")]
        ids = list(replaced)
        old = [r for i in range(0, len(ids), _CHUNK) for (r,) in con.execute(
            f"SELECT rate FROM rows WHERE rate > 0 AND id IN ({', '.join('?' * len(ids[i:i + _CHUNK]))})",
            ids[i:i + _CHUNK])]
    for r in old:
        del rates[bisect.bisect_left(rates, r)]
    for r in replaced.values():
        if r:
            bisect.insort(rates, r)
    return statistics.median(rates) if len(rates) >= 5 else None


def remove_file(folder: Path) -> None:
    """Forget the table (a preparation that replaces the dataset starts it again)."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            os.remove(folder / (FILE + suffix))
        except FileNotFoundError:
            pass
