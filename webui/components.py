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


def default_model_size() -> str:
    """The model size the Optimizations and Training tabs both start on: one a curator can finish here (a GPU
    trains the full model, a CPU only a small one), so the settings saved are those of the run started."""
    from utils import hardware

    return "base" if hardware.query_gpus() else "tiny"
