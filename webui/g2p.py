"""Tab: The Amharic text frontend (normalizer, G2P, pronunciation dictionary)."""
from __future__ import annotations

from webui.components import not_built
from webui.context import AppContext


def build(ctx: AppContext) -> None:
    not_built("The Amharic text frontend (normalizer, G2P, pronunciation dictionary)", "issue 3")
