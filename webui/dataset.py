"""Tab: Dataset upload, checking and preparation."""
from __future__ import annotations

from webui.components import not_built
from webui.context import AppContext


def build(ctx: AppContext) -> None:
    not_built("Dataset upload, checking and preparation", "issue 4")
