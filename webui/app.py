"""Assembles the tabs into one Blocks app and launches it with the security defaults."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from utils.workspace import Workspace
from webui import dataset, g2p, inference, optimizations, separation, system, training
from webui.context import AppContext

ASSETS = Path(__file__).resolve().parent.parent / "assets"

TABS = (
    ("Dataset", dataset), ("Music removal", separation), ("Amharic G2P", g2p),
    ("Optimizations", optimizations), ("Training", training), ("Inference", inference), ("System", system),
)


def build_ui(ctx: AppContext) -> gr.Blocks:
    with gr.Blocks(title="Amharic TTS Studio") as demo:
        gr.Markdown("# Amharic TTS Studio\nFrom raw Amharic recordings to a working voice. "
                    f"Workspace: `{ctx.workspace.root}`")
        on_load = []
        with gr.Tabs():
            for label, module in TABS:
                with gr.Tab(label, id=label.lower().replace(" ", "-")):
                    on_load += module.build(ctx) or []
        # a tab may return (fn, inputs, outputs) to refresh from the workspace at every page load
        for fn, inputs, outputs in on_load:
            demo.load(fn, inputs, outputs, show_progress="hidden")
    return demo


def launch(workspace: Workspace, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
           auth: tuple[str, str] | None = None, max_upload_mb: int = 4096) -> None:
    ctx = AppContext(workspace=workspace, max_upload_mb=max_upload_mb)
    demo = build_ui(ctx)
    demo.queue(default_concurrency_limit=4).launch(
        server_name=host, server_port=port, share=share, auth=auth,
        auth_message="Amharic TTS Studio: log in with the user and password printed where the app started.",
        allowed_paths=[str(workspace.root), str(ASSETS)],  # nothing else on the machine is served
        max_file_size=f"{max_upload_mb}mb", css_paths=[ASSETS / "style.css"],
        js=(ASSETS / "app.js").read_text(encoding="utf-8"), footer_links=["api", "settings"],
        show_error=True,
    )
