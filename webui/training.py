"""Tab: Training from the browser."""
from __future__ import annotations

from webui.components import not_built
from webui.context import AppContext


def build(ctx: AppContext) -> None:
    not_built("Training from the browser", "issue 7")
