"""What every tab receives: the workspace and the app's limits. Per-user values live in gr.State."""
from __future__ import annotations

from dataclasses import dataclass

from utils.workspace import Workspace


@dataclass(frozen=True)
class AppContext:
    """Tabs' `build(ctx)` may return [(fn, inputs, outputs)]: run at every page load (fresh workspace state),
    [(fn, inputs, outputs, "open")]: run each time the tab is opened (what another tab made meanwhile), and
    [(fn, inputs, outputs, "restore")]: run at page load, the last form put back. An "open" or "restore" answer
    is dropped when the curator edits a box it reads or writes before it comes (webui.app._dropped_when_edited)."""
    workspace: Workspace
    max_upload_mb: int = 4096
    data_dirs: tuple = ()  # folders outside the workspace the owner named at start (--data-dir): readable by path
