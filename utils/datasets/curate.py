"""After preparation: re-check a dataset, apply the curator's decisions, and the review views.

An edit reads and writes only the rows it names; the views read one page of rows, or a few plain columns, so a
click costs the same at 200 rows and at 200k.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Iterator

from utils.datasets import checks, store
from utils.datasets.config import PrepareConfig
from utils.datasets.manifest import get_rows, load_manifest, load_report, manifest_folder, save_manifest, \
    READ_WITH, record_read_with, update_rows, write_report
from utils.datasets.prepare import check_row_text, finish_row, finish_rows, set_text
from utils.events import Event, StudioError
from utils.text.g2p import parse_phonemes
from utils.text.tokenizers import make_tokenizer
from utils.text.lexicon import dictionary_stamp, load_user_dict
from utils.workspace import Workspace, read_json

ACTIONS = ("exclude", "keep", "text")
# Flags a "keep" cannot overrule: such a row would teach the voice nothing (the trainer drops a row without text)
# or silence, so Keep says what would make it usable instead.
NOT_KEPT = {
    "missing_text": "it has no transcript, so it cannot train: type what it says and press Save text (that keeps "
                    "it), or leave it excluded",
    "silent": "its audio is silence, which would teach the voice to say nothing: it stays excluded (record or export "
              "the clip again and prepare the dataset again to use it)",
}
CONVERT_EVERY = 50  # rows between two progress events of convert_dataset
PAGE_ROWS = 100  # rows a review page shows
PLOT_POINTS = 4000  # the speaking-rate plot's points: every flagged or excluded clip first, then a spread of the rest


def prepared_config(ws: Workspace, name: str) -> tuple[PrepareConfig, dict]:
    meta = read_json(ws.dataset_dir(name) / "prepare.json", default={}) or {}
    return PrepareConfig.from_dict(meta.get("config")), meta


def report_again(ws: Workspace, name: str, meta: dict) -> dict:
    old = load_report(ws, name)
    return write_report(ws, name, old.get("errors", []), meta.get("format"),
                        {"frontend": meta.get("frontend", "phoneme")})["summary"]


RECHECK_STEP = 2000  # rows between two progress reports of a Re-check (about 2 s; 200k rows take minutes)


def recheck(ws: Workspace, name: str, progress=None) -> dict:
    """Run the text checks (with the current frontend) and the table checks again, and measure the noise of the
    audio each row plays now (a clip whose music removal was accepted is measured as it is now); the other audio
    flags measured at preparation stay. `progress(fraction, text)` is told how far it is. Returns the new report
    summary."""
    from utils.datasets.clips import measure_in_use

    cfg, meta = prepared_config(ws, name)
    rows, user_dict = load_manifest(ws, name), load_user_dict(ws)
    for i, r in enumerate(rows):
        measure_in_use(ws.dataset_dir(name), r, cfg)
        check_row_text(r, cfg, user_dict)
        if progress is not None and i % RECHECK_STEP == 0:
            progress(i / len(rows), f"checking row {i + 1:,} of {len(rows):,}")
    finish_rows(rows, cfg)
    save_manifest(ws, name, rows)
    record_read_with(ws.dataset_dir(name), dictionary_stamp(user_dict))
    return report_again(ws, name, meta)


def recheck_audio(ws: Workspace, name: str, rows: list[dict]) -> dict:
    """The noise flag of these rows' audio measured again (their audio changed: music removal accepted or
    reverted), each row finished against the rest of the table as it is; only these rows are written. Returns the
    new report summary."""
    from utils.datasets.clips import measure_in_use

    cfg, meta = prepared_config(ws, name)
    median = store.rate_median(manifest_folder(ws, name))  # an audio change moves no speaking rate
    for row in rows:
        measure_in_use(ws.dataset_dir(name), row, cfg)
        row["flags"] = checks.flags_of(row["notes"])  # finish_row keeps listed flags: the re-measured ones first
        finish_row(row, cfg, median)
    update_rows(ws, name, rows)
    return report_again(ws, name, meta)


def apply_edits(ws: Workspace, name: str, edits: list[dict]) -> dict:
    """edits: [{"id", "action": "exclude" | "keep" | "text", "text": str (for "text")}]: only the rows named are
    read and written. Excluded rows stay in the table with excluded=true. Returns the new report summary."""
    cfg, meta = prepared_config(ws, name)
    by_id = get_rows(ws, name, [e.get("id") for e in edits])
    for edit in edits:  # every edit checked before any is written
        row, action = by_id.get(edit.get("id")), edit.get("action")
        if row is None:
            raise StudioError(f"Dataset {name!r} has no row {edit.get('id')!r}.")
        if action not in ACTIONS:
            raise StudioError(f"Unknown action {action!r}; use one of {', '.join(ACTIONS)}.")
        if action == "keep" and (why := next((NOT_KEPT[f] for f in row.get("flags", []) if f in NOT_KEPT), None)):
            raise StudioError(f"Not kept: {row['id']}: {why}.")
    old_keys, user_dict = set(), load_user_dict(ws) if any(e["action"] == "text" for e in edits) else {}
    for edit in edits:
        row, action = by_id[edit["id"]], edit["action"]
        if action == "text":
            old_keys.add(checks.same_text_key(row))
            set_text(row, edit.get("text", ""), cfg, user_dict)
            if row.get("review") == "exclude":
                row["review"] = None  # a fixed transcript is a new decision: flags decide again
        else:
            row["review"] = action
    if old_keys:
        by_id.update(_same_texts_again(ws, name, by_id, old_keys))
    median = store.rate_median(manifest_folder(ws, name), {i: checks.row_rate(r) for i, r in by_id.items()})
    for row in by_id.values():
        finish_row(row, cfg, median)
    update_rows(ws, name, list(by_id.values()))
    return report_again(ws, name, meta)


def _same_texts_again(ws: Workspace, name: str, edited: dict[str, dict], old_keys: set) -> dict[str, dict]:
    """Mark duplicate_text again among the rows that share a transcript an edit left or took (`edited`: the rows
    edited, their new texts set): returns the other rows whose note changed, for the edit to write too."""
    keys = [k for k in old_keys | {checks.same_text_key(r) for r in edited.values()} if k is not None]
    if not keys:
        return {}
    order = store.ids_in_order(manifest_folder(ws, name), {"text_hash": keys, "id": list(edited)})
    others = get_rows(ws, name, [i for i in order if i not in edited])
    before = {i: r.get("notes", {}).get("duplicate_text") for i, r in others.items()}  # a row brought without notes
    checks.mark_same_texts([edited.get(i) or others[i] for i in order])
    return {i: r for i, r in others.items() if r["notes"].get("duplicate_text") != before[i]}


def _review_row(ds_dir, r: dict) -> dict:
    decision = r.get("review") or ("text fixed" if r.get("text_fixed") else "")
    return {"id": r["id"], "flags": ", ".join(r["flags"]), "excluded": r["excluded"], "decision": decision,
            "duration": r["duration"], "speaker": r["speaker"], "text": r["text"],
            "messages": "; ".join(r.get("notes", {}).values()), "path": str(ds_dir / r["audio"])}


def review_page(ws: Workspace, name: str, include_ok: bool = False, page: int = 1,
                per_page: int = PAGE_ROWS) -> tuple[list[dict], int]:
    """(one page of rows for the review table, how many rows there are to page through): the flagged or decided
    rows only unless include_ok. Each row: id, flags, messages, excluded, decision, text, duration, audio path."""
    folder = manifest_folder(ws, name)
    rows, total = store.page(folder, include_ok, (max(1, int(page)) - 1) * per_page, per_page)
    return [_review_row(folder, r) for r in rows], total


def flagged_rows(ws: Workspace, name: str, include_ok: bool = False) -> list[dict]:
    """Every row review_page would page through, at once (for scripts and small datasets)."""
    return review_page(ws, name, include_ok, 1, 1 << 62)[0]


def review_row(ws: Workspace, name: str, row_id: str) -> dict:
    """One row as the review table shows it, read alone."""
    row = get_rows(ws, name, [row_id]).get(row_id)
    if row is None:
        raise StudioError(f"Dataset {name!r} has no row {row_id!r}.")
    return _review_row(ws.dataset_dir(name), row)


def plot_data(ws: Workspace, name: str) -> tuple[list[dict], list[dict]]:
    """(duration histogram bins, speaking rate points) for the Dataset tab, counted and sampled by SQLite: every
    clip counts in the histogram; the scatter shows at most PLOT_POINTS clips, the flagged and excluded ones first,
    then every k-th of the rest."""
    folder = manifest_folder(ws, name)
    (longest,), = store.query(folder, "SELECT max(duration) FROM rows")
    if longest is None:
        return [], []
    width = max(0.5, round(longest / 20 * 2) / 2)
    bins = store.query(folder, "SELECT CAST(duration / ? AS INTEGER), count(*) FROM rows GROUP BY 1 ORDER BY 1",
                       (width,))
    hist = [{"seconds": f"{b * width:g}-{(b + 1) * width:g}", "start": b * width, "clips": n} for b, n in bins]
    marked = store.query(folder, "SELECT id, duration, rate, excluded FROM rows WHERE rate > 0 AND "
                                 "(excluded = 1 OR flags != '') ORDER BY pos LIMIT ?", (PLOT_POINTS,))
    (plain,), = store.query(folder, "SELECT count(*) FROM rows WHERE rate > 0 AND excluded = 0 AND flags = ''")
    room = PLOT_POINTS - len(marked)
    ok = [] if room <= 0 else store.query(
        folder, "SELECT id, duration, rate, 'ok' FROM rows WHERE rate > 0 AND excluded = 0 AND flags = '' "
                "AND pos % ? = 0 ORDER BY pos LIMIT ?", (max(1, -(-plain // room)), room))
    return hist, [{"duration": d, "chars_per_s": round(rate, 2), "id": i, "status": status}
                  for i, d, rate, status in [(*m[:3], "excluded" if m[3] else "flagged") for m in marked] + ok]


def convert_dataset(ws: Workspace, name: str, user_dict: dict | None = None) -> Iterator[Event]:
    """Read every row's transcript again with the pronunciation dictionary, as preparing reads it: `normalized`,
    `phonemes`, the text notes and what follows from them (a dictionary word is no longer warned about, a duplicate
    text or speaking rate may change). Only the rows that change are written, and the report follows. Yields
    progress events; the last carries {"rows", "changed", "empty", "warnings", "missing"}."""
    cfg, meta = prepared_config(ws, name)
    rows = load_manifest(ws, name)
    if user_dict is None:
        user_dict = load_user_dict(ws)
    tokenizer = make_tokenizer("phoneme")
    before = [json.dumps(row, sort_keys=True, default=str) for row in rows]
    empty, warnings, missing = 0, [], Counter()
    for i, row in enumerate(rows, 1):
        check_row_text(row, cfg, user_dict)
        if not row.get("phonemes"):
            empty += 1
            warnings.append(f"row {row.get('id', i)}: the transcript has nothing to pronounce")
        notes = row.get("notes") or {}
        warnings += [f"row {row.get('id', i)}: {notes[k]}" for k in ("normalizer", "unknown_chars", "text_error")
                     if k in notes]
        missing.update(s for s in parse_phonemes(row.get("phonemes") or "") if s not in tokenizer.symbols)
        if i % CONVERT_EVERY == 0 or i == len(rows):
            yield Event("g2p", i, len(rows), f"{name}: {i} of {len(rows)} transcripts")
    finish_rows(rows, cfg)
    changed = [row for row, was in zip(rows, before) if json.dumps(row, sort_keys=True, default=str) != was]
    update_rows(ws, name, changed)
    record_read_with(ws.dataset_dir(name), dictionary_stamp(user_dict))
    if changed:
        report_again(ws, name, meta)
    summary = {"rows": len(rows), "changed": len(changed), "empty": empty, "warnings": warnings,
               "missing": dict(missing)}
    level = "warning" if warnings else "info"
    yield Event("g2p", len(rows), len(rows), f"{name}: {len(changed)} of {len(rows)} rows updated, "
                f"{len(warnings)} warning(s)", level=level, result=summary)


def read_again_if_stale(ws: Workspace, name: str) -> str | None:
    """Read the dataset's transcripts again when the pronunciation dictionary changed since they were read, so that
    a run trains on what the voice will say (a curator who forgot "Convert transcripts" is not punished), or when
    its rows were put back from a file (store.PUT_BACK). Returns what was done, None when they were current. Not
    known (no record) counts as current only without a dictionary: the rows were then read without one, as now."""
    user_dict = load_user_dict(ws)
    now = dictionary_stamp(user_dict)
    recorded = (read_json(ws.dataset_dir(name) / READ_WITH, default=None) or {}).get("dictionary")
    if recorded == now or (recorded is None and not now):
        return None
    result = {}
    for event in convert_dataset(ws, name, user_dict):
        result = event.result or result
    why = (f"{name}'s rows were put back from a manifest.jsonl" if recorded == store.PUT_BACK else
           f"the pronunciation dictionary changed since {name}'s transcripts were read")
    return f"{why}: read them again with it ({result.get('changed', 0)} of {result.get('rows', 0)} row(s) changed)"
