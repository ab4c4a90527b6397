"""Assembles the tabs into one Blocks app and launches it with the security defaults."""
from __future__ import annotations

import threading
from collections import OrderedDict
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


def studio_theme() -> gr.themes.Theme:
    """Gradio's default look with fonts whose every face has every letter: its bundled SemiBold files of Source Sans
    Pro and IBM Plex Mono hold a few dozen glyphs (subsets), so a title or a button at weight 600 drew "A" and "B" in
    the font and the other letters in the browser's fallback. Regular and Bold are whole; 600 text takes the Bold."""
    whole = (400, 700)
    return gr.themes.Default(font=[gr.themes.LocalFont("Source Sans Pro", weights=whole), "ui-sans-serif",
                                   "system-ui", "sans-serif"],
                             font_mono=[gr.themes.LocalFont("IBM Plex Mono", weights=whole), "ui-monospace",
                                        "Consolas", "monospace"])


def build_ui(ctx: AppContext) -> gr.Blocks:
    with gr.Blocks(title="Amharic TTS Studio") as demo:
        gr.Markdown("# Amharic TTS Studio\nFrom raw Amharic recordings to a working voice. "
                    f"Workspace: `{ctx.workspace.root}`")
        wired, tab_timers = [], []
        with gr.Tabs():
            for label, module in TABS:
                with gr.Tab(label, id=label.lower().replace(" ", "-")) as tab:
                    entries = module.build(ctx) or []
                wired += [(tab, e[3] if len(e) > 3 else "load", e[:3]) for e in entries]  # kinds: AppContext
                tab_timers.append((tab, [b for b in _descendants(tab) if isinstance(b, gr.Timer)]))
        # the timers' select first: a browser sends one trigger's events one after another, and the page's first
        # select (of the first tab) must not wait behind that tab's refresh and arrive after the curator's click
        _tick_only_on_the_open_tab(tab_timers)
        for tab, kind, (fn, inputs, outputs) in wired:
            if kind == "open":
                _dropped_when_edited(tab.select(fn, inputs, outputs, show_progress="hidden"), inputs, outputs)
        for tab, kind, (fn, inputs, outputs) in wired:
            if kind in ("load", "restore"):
                loaded = demo.load(fn, inputs, outputs, show_progress="hidden")
                if kind == "restore":  # a plain load must land: it fills forms such as the saved settings, which
                    _dropped_when_edited(loaded, inputs, outputs)  # Save writes whole
    return demo


EDITABLE = (gr.Dropdown, gr.Number, gr.Textbox, gr.Checkbox, gr.CheckboxGroup, gr.Radio, gr.Slider, gr.Dataframe)


def _dropped_when_edited(refresh, *blocks) -> None:
    """A refresh sent before the curator's own pick or edit can be answered after it (a busy server, a share link):
    its values, computed from the form as it was sent, would be drawn over the edit (a dataset picked as the Training
    tab opened showed the "Which engine" lines of the dataset the refresh was sent with; the page load's restore of
    the last form put the last run's dataset over a pick). The curator's input on a box the refresh reads or writes
    cancels it; the box's own handlers answer for the new value, and the next opening of the tab refreshes again."""
    boxes = {id(b): b for group in blocks for b in ([group] if isinstance(group, gr.components.Component)
                                                     else group or []) if isinstance(b, EDITABLE)}
    for box in boxes.values():
        box.input(None, None, None, cancels=[refresh], queue=False, show_progress="hidden")


def _descendants(block):
    for child in getattr(block, "children", None) or []:
        yield child
        yield from _descendants(child)


class _NewestSelection:
    """Orders each browser's tab selections by when the browser made them. Gradio sends a select for the
    first tab as the page mounts; on a busy server it can be answered after the curator's own first click,
    and would then switch the clicked tab's timers off (a clean-clone CI run saw the System tab stay blank)."""

    def __init__(self, keep: int = 10_000):
        self.seen: OrderedDict[str, float] = OrderedDict()
        self.keep, self.lock = keep, threading.Lock()

    def is_newest(self, session: str, stamp: float) -> bool:
        with self.lock:
            if stamp < self.seen.get(session, float("-inf")):
                return False
            self.seen[session] = stamp
            self.seen.move_to_end(session)
            while len(self.seen) > self.keep:
                self.seen.popitem(last=False)
            return True


# The studio tab the page shows when a select is sent (not a tab row inside a tab), and the browser's clock.
OPEN_TAB_JS = """() => {
  const open = [...document.querySelectorAll('button[data-tab-id][aria-selected="true"]')]
    .find((b) => !b.closest('[role="tabpanel"]'));
  return [Date.now(), open ? open.dataset.tabId : ""];
}"""


def _tick_only_on_the_open_tab(tab_timers: list) -> None:
    """A tab's timers tick only while it is open, so a browser polls for what it shows, not for every tab
    (a second each for the training log, every two for the System tab...): many people can watch a run
    (bench/ui_polling.py). The page opens on the first tab, so only its timers start on: set in the page's
    config, not by a page-load event. Each select carries the browser's clock and the tab the page shows as it is
    sent: a select answered after a newer one, or sent for a tab the page no longer shows (the first tab's select at
    page load, sent after a reload already reopened another tab, or after a fast first click), changes nothing."""
    every = [t for _, timers in tab_timers for t in timers]
    newest = _NewestSelection()
    stamp, shown = gr.Number(visible=False), gr.Textbox(visible=False)

    for tab, timers in tab_timers:
        tab.select(timers_for(timers, every, newest, tab.id), [stamp, shown], every, js=OPEN_TAB_JS,
                   show_progress="hidden")
    first = {id(t) for t in tab_timers[0][1]}
    for timer in every:
        timer.active = id(timer) in first


def timers_for(timers: list, every: list, newest: _NewestSelection, tab_id: str | None = None):
    """The select handler of one tab: its timers on, the others off, unless a newer selection was answered or the
    page shows another tab by now."""
    on = {id(t) for t in timers}

    def select(stamp: float | None, shown: str | None, request: gr.Request):
        if shown and tab_id and shown != tab_id:
            return [gr.skip() for _ in every]
        if stamp is not None and not newest.is_newest(request.session_hash or "", stamp):
            return [gr.skip() for _ in every]
        return [gr.Timer(active=id(t) in on) for t in every]

    return select


QUEUE_IDLE_S = 0.02  # how often an idle event queue looks for work


def quiet_queue(demo: gr.Blocks) -> gr.Blocks:
    """Gradio's event queue looks for new work every millisecond while it has none (gradio/queueing.py,
    `sleep_when_free`): about 8 % of a core, all day, in an app nobody is using, taken from a training run on
    a laptop. Every 20 ms adds at most 20 ms to an event and costs a tenth of that (bench/ui_polling.py --browser)."""
    queue = getattr(demo, "_queue", None)
    if queue is not None and getattr(queue, "sleep_when_free", 0) < QUEUE_IDLE_S:
        queue.sleep_when_free = QUEUE_IDLE_S
    return demo


def launch(workspace: Workspace, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
           auth: tuple[str, str] | None = None, max_upload_mb: int = 4096, data_dirs: tuple = ()) -> None:
    from utils.vocoder.default import start_fetch

    start_fetch(workspace)  # the public Vocos, once, in the background: a neural voice by default, not Griffin-Lim
    ctx = AppContext(workspace=workspace, max_upload_mb=max_upload_mb, data_dirs=tuple(data_dirs))
    demo = build_ui(ctx)
    quiet_queue(demo.queue(default_concurrency_limit=4)).launch(
        server_name=host, server_port=port, share=share, auth=auth,
        auth_message="Amharic TTS Studio: log in with the user and password printed where the app started.",
        allowed_paths=[str(workspace.root), str(ASSETS)],  # nothing else on the machine is served
        max_file_size=f"{max_upload_mb}mb", css_paths=[ASSETS / "style.css"], theme=studio_theme(),
        js=(ASSETS / "app.js").read_text(encoding="utf-8"), footer_links=["api", "settings"],
        show_error=True,
    )
