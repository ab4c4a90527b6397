"""Tab: The training optimizations editor."""
from __future__ import annotations

from webui.components import not_built
from webui.context import AppContext


def build(ctx: AppContext) -> None:
    not_built("The training optimizations editor", "issue 7")
