"""After preparation: re-check a dataset and apply the curator's decisions to the manifest."""
from __future__ import annotations

from utils.datasets import checks
from utils.datasets.config import PrepareConfig
from utils.datasets.manifest import load_manifest, load_report, save_manifest, write_report
from utils.datasets.prepare import check_row_text, finish_rows, set_text
from utils.events import StudioError
from utils.workspace import Workspace, read_json

ACTIONS = ("exclude", "keep", "text")


def _context(ws: Workspace, name: str) -> tuple[PrepareConfig, dict]:
    meta = read_json(ws.dataset_dir(name) / "prepare.json", default={}) or {}
    return PrepareConfig.from_dict(meta.get("config")), meta


def _save(ws: Workspace, name: str, rows: list[dict], cfg: PrepareConfig, meta: dict) -> dict:
    finish_rows(rows, cfg)
    save_manifest(ws, name, rows)
    old = load_report(ws, name)
    return write_report(ws, name, rows, old.get("errors", []), meta.get("format"),
                        {"frontend": meta.get("frontend", "phoneme")})["summary"]


def recheck(ws: Workspace, name: str) -> dict:
    """Run the text checks (with the current frontend) and the table checks again, and measure the noise of the
    audio each row plays now (a clip whose music removal was accepted is measured as it is now); the other audio
    flags measured at preparation stay. Returns the new report summary."""
    from utils.datasets.clips import measure_in_use

    cfg, meta = _context(ws, name)
    rows = load_manifest(ws, name)
    for r in rows:
        measure_in_use(ws.dataset_dir(name), r, cfg)
        check_row_text(r, cfg)
    return _save(ws, name, rows, cfg, meta)


def apply_edits(ws: Workspace, name: str, edits: list[dict]) -> dict:
    """edits: [{"id", "action": "exclude" | "keep" | "text", "text": str (for "text")}].
    Excluded rows stay in the manifest with excluded=true. Returns the new report summary."""
    cfg, meta = _context(ws, name)
    rows = load_manifest(ws, name)
    by_id = {r["id"]: r for r in rows}
    for edit in edits:
        row, action = by_id.get(edit.get("id")), edit.get("action")
        if row is None:
            raise StudioError(f"Dataset {name!r} has no row {edit.get('id')!r}.")
        if action not in ACTIONS:
            raise StudioError(f"Unknown action {action!r}; use one of {', '.join(ACTIONS)}.")
        if action == "text":
            set_text(row, edit.get("text", ""), cfg)
            if row.get("review") == "exclude":
                row["review"] = None  # a fixed transcript is a new decision: flags decide again
        else:
            row["review"] = action
    return _save(ws, name, rows, cfg, meta)


def flagged_rows(ws: Workspace, name: str, include_ok: bool = False) -> list[dict]:
    """Rows for the review table: id, flags, messages, excluded, decision, text, duration, audio path."""
    ds_dir = ws.dataset_dir(name)
    out = []
    for r in load_manifest(ws, name):
        if not include_ok and not r["flags"] and not r.get("review"):
            continue
        out.append({"id": r["id"], "flags": ", ".join(r["flags"]), "excluded": r["excluded"],
                    "decision": r.get("review") or "", "duration": r["duration"], "speaker": r["speaker"],
                    "text": r["text"], "messages": "; ".join(r.get("notes", {}).values()),
                    "path": str(ds_dir / r["audio"])})
    return out


def plot_data(ws: Workspace, name: str) -> tuple[list[dict], list[dict]]:
    """(duration histogram bins, per-clip speaking rate points) for the Dataset tab."""
    rows = load_manifest(ws, name)
    durations = [r["duration"] for r in rows]
    hist = []
    if durations:
        width = max(0.5, round(max(durations) / 20 * 2) / 2)
        counts: dict[float, int] = {}
        for d in durations:
            b = int(d // width) * width
            counts[b] = counts.get(b, 0) + 1
        hist = [{"seconds": f"{b:g}-{b + width:g}", "start": b, "clips": n} for b, n in sorted(counts.items())]
    rates = [{"duration": r["duration"], "chars_per_s": round(rate, 2), "id": r["id"],
              "status": "excluded" if r["excluded"] else ("flagged" if r["flags"] else "ok")}
             for r in rows if (rate := checks.speaking_rate(r))]
    return hist, rates
