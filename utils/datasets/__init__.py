"""Datasets: import uploads, cut long recordings, check every row, prepare clips, features and split.

Public API (see CONTRIBUTING.md, "Dataset contract"):
    prepare(ws, name, sources, fmt=...)   generator of Events; the last carries the report summary
    load_manifest(ws, name) / save_manifest(ws, name, rows) / update_rows(ws, name, rows)   (manifest.sqlite)
    features(ws, name, row, cfg)          cached log-mel [n_mels, frames] of a row
    recheck(ws, name) / apply_edits(ws, name, edits)
"""
from utils.datasets.config import FLAG_HELP, PrepareConfig
from utils.datasets.curate import PAGE_ROWS, apply_edits, flagged_rows, plot_data, recheck, review_page, review_row
from utils.datasets.features import features
from utils.datasets.manifest import export_rows, get_rows, load_manifest, load_report, require_usable, save_manifest, \
    update_rows
from utils.datasets.prepare import prepare
from utils.datasets.sources import FORMATS, inspect_table

__all__ = ["FLAG_HELP", "FORMATS", "PAGE_ROWS", "PrepareConfig", "apply_edits", "export_rows", "features",
           "flagged_rows", "get_rows", "inspect_table", "load_manifest", "load_report", "plot_data", "prepare",
           "recheck", "require_usable", "review_page", "review_row", "save_manifest", "update_rows"]
