"""Tab: Speaking text with a trained voice."""
from __future__ import annotations

from webui.components import not_built
from webui.context import AppContext


def build(ctx: AppContext) -> None:
    not_built("Speaking text with a trained voice", "issue 6")
