"""The review list: the saved ranking joined with the manifest, and the curator's decisions on it.

A decision is saved exactly like a row edit on the Dataset tab (`utils.datasets.apply_edits`: keep,
exclude, or a fixed text, which re-runs the text checks), and is also noted in the ranking file so the
list shows what was decided; a later check carries those notes over.
"""
from __future__ import annotations

from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_json, read_json

DECISIONS = {"keep": "keep", "exclude": "exclude", "text": "text fixed"}


def load_ranking(ws: Workspace, dataset: str) -> dict | None:
    """The last check's file (see scoring.check_transcripts), or None when the dataset was never checked."""
    from utils.transcripts.scoring import check_path

    return read_json(check_path(ws, dataset), default=None)


CHANGED = "text changed since the check"


def review_rows(ws: Workspace, dataset: str, limit: int | None = None) -> list[dict]:
    """Worst first: {"rank", "id", "score", "reason", "text", "decision", "path"} (rows since deleted from
    the manifest are left out; a row whose text changed since the check says so in its reason, unless the change
    is this list's own "text fixed": its score is about the old text)."""
    from utils.datasets import get_rows

    ranking = load_ranking(ws, dataset)
    if not ranking:
        return []
    ds_dir, ranked, out = ws.dataset_dir(dataset), ranking["rows"], []
    step = max(200, 2 * (limit or 0))  # the rows of a chunk of the ranking at a time: a page reads a page's rows
    for start in range(0, len(ranked), step):
        rows = get_rows(ws, dataset, [r["id"] for r in ranked[start:start + step]])
        for rank, r in enumerate(ranked[start:start + step], start + 1):
            row = rows.get(r["id"])
            if row is None:
                continue
            decision = DECISIONS.get(r.get("decision") or "", "")
            if not decision and row.get("excluded"):
                decision = "excluded"
            out.append({"rank": rank, "id": r["id"], "score": r["score"], "reason": _reason(r, row),
                        "text": row["text"], "decision": decision, "path": str(ds_dir / row["audio"])})
        if limit and len(out) >= limit:
            break
    return out[:limit] if limit else out


def _reason(ranked: dict, row: dict) -> str:
    """The check's reason, marked when the row's text is no longer the one checked (rankings written before the
    checked text was saved cannot tell, and are shown as they are)."""
    if "text" not in ranked or ranked["text"] == row.get("text", "") or ranked.get("decision") == "text":
        return ranked["reason"]
    return f"{CHANGED} (it said: {ranked['reason']})"


def decide(ws: Workspace, dataset: str, row_id: str, action: str, text: str = "") -> str:
    """keep | exclude | text (with the corrected transcript). Returns a one-line confirmation."""
    from utils import datasets
    from utils.transcripts.scoring import check_path

    if action not in DECISIONS:
        raise StudioError(f"Unknown decision {action!r}; use keep, exclude or text.")
    if action == "text" and not (text or "").strip():
        raise StudioError(f"Type the corrected transcript of {row_id} first (or choose Exclude).")
    summary = datasets.apply_edits(ws, dataset, [{"id": row_id, "action": action, "text": text}])
    ranking = load_ranking(ws, dataset)
    if ranking:
        for r in ranking["rows"]:
            if r["id"] == row_id:
                r["decision"] = action
        atomic_write_json(check_path(ws, dataset), ranking)
    return f"{row_id}: {DECISIONS[action]} saved · {summary['usable_clips']} usable clips"


def check_running(ws: Workspace, dataset: str) -> bool:
    """Whether a transcript check of the dataset runs now (in this app or from the command line): it holds the
    dataset's check lock."""
    from utils.transcripts.scoring import one_check_at_a_time

    try:
        with one_check_at_a_time(ws, dataset):
            return False
    except StudioError:
        return True


def still_current(ws: Workspace, dataset: str, method: str) -> str | None:
    """When the last check was made, if a new check would only repeat it: the same method (for "auto", alignment
    plus the recognizer when the workspace has one) and every transcript it would score the one it scored. None
    when a new check may find something else."""
    from utils.transcripts import asr
    from utils.transcripts.scoring import candidate_rows

    ranking = load_ranking(ws, dataset)
    if not ranking:
        return None
    wanted = {"auto": "alignment+asr" if asr.available(ws) else "alignment"}.get(method, method)
    if ranking.get("method") != wanted:
        return None
    checked = {r["id"]: r.get("text") for r in ranking.get("rows", [])}
    rows, _ = candidate_rows(ws, dataset)
    if any(checked.get(r["id"]) != (r.get("text") or "") for r in rows):
        return None
    return ranking.get("created") or "before"
