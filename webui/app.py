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
        on_load, tab_timers = [], []
        with gr.Tabs():
            for label, module in TABS:
                with gr.Tab(label, id=label.lower().replace(" ", "-")) as tab:
                    entries = module.build(ctx) or []
                on_load += [e for e in entries if len(e) == 3]
                for fn, inputs, outputs, _ in [e for e in entries if len(e) == 4]:  # "open": each time it is opened
                    tab.select(fn, inputs, outputs, show_progress="hidden")
                tab_timers.append((tab, [b for b in _descendants(tab) if isinstance(b, gr.Timer)]))
        _tick_only_on_the_open_tab(tab_timers)
        # a tab may return (fn, inputs, outputs) to refresh from the workspace at every page load
        for fn, inputs, outputs in on_load:
            demo.load(fn, inputs, outputs, show_progress="hidden")
    return demo


def _descendants(block):
    for child in getattr(block, "children", None) or []:
        yield child
        yield from _descendants(child)


def _tick_only_on_the_open_tab(tab_timers: list) -> None:
    """A tab's timers tick only while it is open, so a browser polls for what it shows, not for every tab
    (a second each for the training log, every two for the System tab...): many people can watch a run
    (bench/ui_polling.py). The page opens on the first tab, so only its timers start on: set in the page's
    config, not by a page-load event, which (queued behind the other load events) could land after the
    curator's first tab click and switch that tab's timers off."""
    every = [t for _, timers in tab_timers for t in timers]

    def only(timers):
        on = {id(t) for t in timers}
        return lambda: [gr.Timer(active=id(t) in on) for t in every]

    for tab, timers in tab_timers:
        tab.select(only(timers), None, every, show_progress="hidden")
    first = {id(t) for t in tab_timers[0][1]}
    for timer in every:
        timer.active = id(timer) in first


def launch(workspace: Workspace, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
           auth: tuple[str, str] | None = None, max_upload_mb: int = 4096) -> None:
    from utils.vocoder.default import start_fetch

    start_fetch(workspace)  # the public Vocos, once, in the background: a neural voice by default, not Griffin-Lim
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
