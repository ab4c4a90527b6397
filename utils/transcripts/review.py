"""The review list: the saved ranking joined with the manifest, and the curator's decisions on it.

A decision is saved exactly like a row edit on the Dataset tab (`utils.datasets.apply_edits`: keep,
exclude, or a fixed text, which re-runs the text checks), and is also noted in a small decisions file beside the
ranking (transcript_decisions.json, {row id: decision}) so the list shows what was decided; a later check's
ranking shows those notes too. The ranking file itself is written only by a check.
"""
from __future__ import annotations

import threading

from utils.events import StudioError
from utils.workspace import Workspace, read_json, update_json

DECISIONS = {"keep": "keep", "exclude": "exclude", "text": "text fixed"}
DECISIONS_FILE = "transcript_decisions.json"  # {row id: decision}: a decision writes this small file, not the ranking
_LOADED: dict[str, tuple] = {}  # ranking file -> (its version, the ranking, {id: position}): parsed once per version
_LOCK = threading.Lock()  # the UI's handlers run in threads: one ranking is parsed and stored at a time
KEEP_RANKINGS = 4  # rankings held at once (about 175 MB each at 200k rows)


def load_ranking(ws: Workspace, dataset: str) -> dict | None:
    """The last check's file (see scoring.check_transcripts) with the curator's decisions on its rows, or None when
    the dataset was never checked. Shared and cached: callers read it, never change it."""
    found = _ranking(ws, dataset)
    return found[0] if found else None


def _ranking(ws: Workspace, dataset: str) -> tuple[dict, dict[str, int], dict[str, int]] | None:
    """(the ranking with its decisions, {row id: position in it}, {row id: text hash}, filled by _text_hashes),
    parsed again only when the file changed."""
    from utils.transcripts.scoring import check_path

    path = check_path(ws, dataset)
    try:
        version = (path.stat().st_mtime_ns, path.stat().st_size)
    except FileNotFoundError:
        return None
    with _LOCK:
        held = _LOADED.get(str(path))
        if held is None or held[0] != version:
            ranking = read_json(path, default=None)
            if not ranking:
                return None
            held = (version, ranking, {r["id"]: i for i, r in enumerate(ranking["rows"])}, {})
            while len(_LOADED) >= KEEP_RANKINGS:
                del _LOADED[next(iter(_LOADED))]
            _LOADED[str(path)] = held
        _, ranking, index, hashes = held
        for row_id, action in decisions(ws, dataset).items():
            if row_id in index:
                ranking["rows"][index[row_id]]["decision"] = action
    return ranking, index, hashes


def _text_hashes(ws: Workspace, dataset: str) -> dict[str, int]:
    """{row id: store.text_hash of the text the last check scored}, made once per version of the ranking."""
    from utils.datasets.checks import text_hash

    found = _ranking(ws, dataset)
    if found is None:
        return {}
    ranking, _, hashes = found
    with _LOCK:
        if not hashes:
            hashes.update((r["id"], text_hash(r.get("text"))) for r in ranking["rows"])
    return hashes


def decisions(ws: Workspace, dataset: str) -> dict[str, str]:
    return read_json(ws.dataset_dir(dataset) / DECISIONS_FILE, default={}) or {}


def ranked_row(ws: Workspace, dataset: str, row_id: str) -> tuple[int, dict] | None:
    """(rank, the ranking's entry) of one row, found by its id without walking the ranking."""
    found = _ranking(ws, dataset)
    i = found[1].get(row_id) if found else None
    return (i + 1, found[0]["rows"][i]) if i is not None else None


CHANGED = "text changed since the check"


def review_rows(ws: Workspace, dataset: str, undecided: int | None = None) -> list[dict]:
    """Worst first: {"rank", "id", "score", "reason", "text", "decision", "path"} (rows since deleted from
    the manifest are left out; a row whose text changed since the check says so in its reason, unless the change
    is this list's own "text fixed": its score is about the old text). `undecided`: the list ends once it holds
    that many rows without a decision (decided rows stay in place), so it always offers that much work, and a
    page of a 200k-row ranking reads only its own rows."""
    from utils.datasets import get_rows

    ranking = load_ranking(ws, dataset)
    if not ranking:
        return []
    ranked, out, todo = ranking["rows"], [], 0
    step = max(200, 2 * (undecided or 0))  # the rows of a chunk of the ranking at a time
    for start in range(0, len(ranked), step):
        rows = get_rows(ws, dataset, [r["id"] for r in ranked[start:start + step]])
        for rank, r in enumerate(ranked[start:start + step], start + 1):
            if rows.get(r["id"]) is not None:
                out.append(_listed(ws, dataset, rank, r, rows[r["id"]]))
                todo += not out[-1]["decision"]
            if undecided and todo >= undecided:
                return out
    return out


def _listed(ws: Workspace, dataset: str, rank: int, ranked: dict, row: dict) -> dict:
    decision = DECISIONS.get(ranked.get("decision") or "", "")
    if not decision and row.get("excluded"):
        decision = "excluded"
    return {"rank": rank, "id": ranked["id"], "score": ranked["score"], "reason": _reason(ranked, row),
            "text": row["text"], "decision": decision, "path": str(ws.dataset_dir(dataset) / row["audio"])}


def review_row(ws: Workspace, dataset: str, row_id: str) -> dict | None:
    """One row of the review list (as review_rows gives it), read alone: a click on the list costs one row."""
    from utils.datasets import get_rows

    found = ranked_row(ws, dataset, row_id)
    row = get_rows(ws, dataset, [row_id]).get(row_id) if found else None
    return _listed(ws, dataset, found[0], found[1], row) if row is not None else None


def _reason(ranked: dict, row: dict) -> str:
    """The check's reason, marked when the row's text is no longer the one checked (rankings written before the
    checked text was saved cannot tell, and are shown as they are)."""
    if "text" not in ranked or ranked["text"] == row.get("text", "") or ranked.get("decision") == "text":
        return ranked["reason"]
    return f"{CHANGED} (it said: {ranked['reason']})"


def decide(ws: Workspace, dataset: str, row_id: str, action: str, text: str = "") -> str:
    """keep | exclude | text (with the corrected transcript). Returns a one-line confirmation."""
    from utils import datasets

    if action not in DECISIONS:
        raise StudioError(f"Unknown decision {action!r}; use keep, exclude or text.")
    if action == "text" and not (text or "").strip():
        raise StudioError(f"Type the corrected transcript of {row_id} first (or choose Exclude).")
    summary = datasets.apply_edits(ws, dataset, [{"id": row_id, "action": action, "text": text}])
    if ranked_row(ws, dataset, row_id):
        update_json(ws.dataset_dir(dataset) / DECISIONS_FILE, lambda known: {**(known or {}), row_id: action})
    return f"{row_id}: {DECISIONS[action]} saved · {summary['usable_clips']} usable clips"


def check_running(ws: Workspace, dataset: str) -> bool:
    """Whether a transcript check of the dataset runs now (in this app or from the command line)."""
    from utils.transcripts.scoring import check_running as running

    return running(ws, dataset)


def still_current(ws: Workspace, dataset: str, method: str) -> str | None:
    """When the last check was made, if a new check would only repeat it: the same method (for "auto", alignment
    plus the recognizer when the workspace has one) and every transcript it would score the one it scored. None
    when a new check may find something else."""
    from utils.datasets.manifest import store_query
    from utils.transcripts import asr

    ranking = load_ranking(ws, dataset)
    if not ranking:
        return None
    wanted = {"auto": "alignment+asr" if asr.available(ws) else "alignment"}.get(method, method)
    if ranking.get("method") != wanted:
        return None
    checked = _text_hashes(ws, dataset)
    # the rows a new check would score (scoring.candidate_rows), their texts' hashes read from an index
    now = store_query(ws, dataset, "SELECT id, text_hash FROM rows WHERE excluded = 0 AND has_text = 1")
    if any(checked.get(rid) != hashed for rid, hashed in now):
        return None
    return ranking.get("created") or "before"
