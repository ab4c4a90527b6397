"""Tab: Music removal."""
from __future__ import annotations

from webui.components import not_built
from webui.context import AppContext


def build(ctx: AppContext) -> None:
    not_built("Music removal", "issue 5")
