"""Widgets and texts shared by several tabs."""
from __future__ import annotations

import gradio as gr


def not_built(capability: str, issue: str) -> gr.Markdown:
    """A tab whose capability does not exist yet says so plainly, with no fake controls."""
    return gr.Markdown(
        f"### Not available yet\n{capability} is not built in this version of the studio "
        f"({issue}). Nothing on this tab does anything until it is.",
        elem_classes=["not-built"],
    )
