"""Reading and writing `manifest.jsonl` and `report.json` (formats in CONTRIBUTING.md)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from utils.datasets.checks import flag_counts
from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_json, read_json, read_jsonl, write_jsonl

ROW_KEYS = ("id", "audio", "text", "normalized", "phonemes", "duration", "speaker", "split", "flags",
            "excluded", "source", "sha1", "music")


def manifest_path(ws: Workspace, name: str) -> Path:
    return ws.dataset_dir(name) / "manifest.jsonl"


def load_manifest(ws: Workspace, name: str) -> list[dict]:
    path = manifest_path(ws, name)
    if not path.exists():
        raise StudioError(f"Dataset {name!r} has no manifest yet; prepare it first.")
    return read_jsonl(path)


def usable_rows(ws: Workspace, name: str) -> list[dict]:
    """The rows a run trains on (not excluded), or a refusal naming the dataset when there is none: a run started
    on it would fail seconds later, after its run folder and queue entry were made."""
    if name not in ws.list_datasets():
        raise StudioError(f"There is no prepared dataset called {name!r}; prepare it on the Dataset tab.")
    rows = [r for r in load_manifest(ws, name) if not r.get("excluded")]
    if not rows:
        raise StudioError(f"Dataset {name!r} has no usable clip to train on (every row is excluded, or none was "
                          "made): keep some rows on the Dataset tab, or prepare it again with recordings.")
    return rows


def save_manifest(ws: Workspace, name: str, rows: list[dict]) -> None:
    ids = Counter(r["id"] for r in rows)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise StudioError(f"Dataset {name!r}: ids must be unique; repeated: {', '.join(dup[:5])}.")
    write_jsonl(manifest_path(ws, name), rows)


def load_report(ws: Workspace, name: str) -> dict:
    return read_json(ws.dataset_dir(name) / "report.json", default={"summary": {}, "rows": [], "errors": []})


def summarize(rows: list[dict], errors: list[dict], fmt: str | None = None) -> dict:
    used = [r for r in rows if not r["excluded"]]
    return {
        "format": fmt,
        "clips": len(rows),
        "usable_clips": len(used),
        "excluded_clips": len(rows) - len(used),
        "hours": round(sum(r["duration"] for r in rows) / 3600, 4),
        "usable_hours": round(sum(r["duration"] for r in used) / 3600, 4),
        "speakers": len({r["speaker"] for r in used}),
        "train_clips": sum(r["split"] == "train" for r in used),
        "val_clips": sum(r["split"] == "val" for r in used),
        "flagged_clips": sum(bool(r["flags"]) for r in rows),
        "flags": flag_counts(rows),
        "errors": len(errors),
    }


def write_report(ws: Workspace, name: str, rows: list[dict], errors: list[dict], fmt: str | None,
                 extra: dict | None = None) -> dict:
    report = {
        "summary": {**summarize(rows, errors, fmt), **(extra or {})},
        "rows": [{"id": r["id"], "source": r["source"], "flags": r["flags"], "messages": list(r.get("notes", {}).values()),
                  "excluded": r["excluded"]} for r in rows],
        "errors": errors,
    }
    atomic_write_json(ws.dataset_dir(name) / "report.json", report)
    return report
