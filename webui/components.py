"""Widgets and texts shared by several tabs."""
from __future__ import annotations

import gradio as gr

from utils.events import plain_text


def not_built(capability: str, issue: str) -> gr.Markdown:
    """A tab whose capability does not exist yet says so plainly, with no fake controls."""
    return gr.Markdown(
        f"### Not available yet\n{capability} is not built in this version of the studio "
        f"({issue}). Nothing on this tab does anything until it is.",
        elem_classes=["not-built"],
    )


def current_pick(names: list[str], current: str | None, first: str | None = None) -> dict:
    """A picker brought up to date: what exists now, showing the curator's pick while it exists, else `first`, else
    the first name (never a name that is gone, nor nothing while something exists). The value goes back only when
    it changes: a refresh answered after the curator picked another name (a busy server, a share link) put the
    name it was sent back over theirs, and a CI run's OmniVoice run started on the dataset shown before the pick."""
    if current in names:
        return gr.update(choices=names)
    return chosen_pick(names, first)


def chosen_pick(names: list[str], wanted: str | None) -> dict:
    """A picker set to `wanted` (a run's dataset put back, a dataset just made), else the first name."""
    return gr.update(choices=names, value=wanted if wanted in names else (names[0] if names else None))


def shown_name(pick: dict, current: str | None) -> str | None:
    """The name a picker shows once `pick` is applied (current_pick leaves out a value that stays)."""
    return pick.get("value", current)


def dataset_picker(ws, label: str = "Dataset", **kw) -> gr.Dropdown:
    """A tab's dataset picker. It takes a value not among its choices: a dataset deleted meanwhile (from another tab
    or page) stays the value this page holds until the next refresh, and Gradio refuses an event whose dropdown value
    is not a choice, so the tab's refresh on opening (`dataset_pick`) failed and left every box of the tab stale."""
    return gr.Dropdown(ws.list_datasets(), label=label, allow_custom_value=True, **kw)


def dataset_pick(ws, current: str | None) -> dict:
    """A dataset picker brought up to date: the curator's pick while it exists, else the dataset prepared last."""
    return current_pick(ws.list_datasets(), current, ws.newest_dataset())


def dataset_chosen(ws, wanted: str | None) -> dict:
    """A dataset picker set to `wanted`, else to the dataset prepared last."""
    names = ws.list_datasets()
    return chosen_pick(names, wanted if wanted in names else ws.newest_dataset())


def plain_label(name: str, plain: dict) -> str:
    """A setting as the curator reads it: what it does in plain words (assets/settings_plain.json), then its
    technical name in brackets for those who know it; the Optimizations and System tabs name settings alike."""
    return f"{plain.get(name, {}).get('label', name.replace('_', ' '))} ({name})"


def _action_name(fn) -> str:
    """What a handler does, from its name (on_pick_review -> 'Pick review'), for a message about it."""
    name = getattr(getattr(fn, "func", fn), "__name__", "")
    name = name.removeprefix("on_").replace("_", " ").strip()
    return name.capitalize() if name and "<" not in name else "This action"


def says_errors(fn, outputs: list, box, log: bool = False, also: dict | None = None, what: str = ""):
    """`fn` with its refusals written into `box` (one of its `outputs`), where the curator can read them for as
    long as they like: a raised error would leave only a red 'Error' badge on every output once its toast
    fades. A `log` box keeps the lines it showed and gets the message as its last line; `also` gives other
    outputs a value on a refusal ({output: value}), the rest are left as they were. Works for generators.

    An unexpected exception (a bug, a broken file) is said the same way, naming `what` failed (default: the
    handler's name) with the exception's type and text, and its traceback goes to the app's log, where the
    message sends the curator: a bare badge says nothing and a swallowed traceback helps no one fix it."""
    import functools
    import inspect
    import logging

    from utils.events import StudioError

    at = outputs.index(box)
    what = what or _action_name(fn)

    def shown(exc, before="") -> tuple | str:
        if isinstance(exc, (gr.Error, StudioError)):
            text = str(exc.message if isinstance(exc, gr.Error) else exc)
        else:
            logging.getLogger("webui").exception("%s failed", what)
            text = (f"{what} failed on an unexpected error ({type(exc).__name__}: {exc}). The app's log (the "
                    "terminal or log file it was started from) has the details.")
        gr.Warning(plain_text(text))  # a toast as well, for a box out of sight; the box keeps the text
        said = f"{before}\nNot done: {text}".lstrip() if log else f"**Not done:** {text}"
        updates = [(also or {}).get(o, gr.update()) for o in outputs]
        updates[at] = said
        return tuple(updates) if len(outputs) > 1 else said

    def box_text(value) -> str:
        value = value[at] if len(outputs) > 1 else value
        return value if isinstance(value, str) else ""

    if inspect.isgeneratorfunction(getattr(fn, "func", fn)):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            before = ""
            try:
                for value in fn(*args, **kwargs):
                    before = box_text(value) or before
                    yield value
            except Exception as exc:  # noqa: BLE001  (said in the box; unexpected ones logged with traceback)
                yield shown(exc, before)
        return generator

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  (said in the box; unexpected ones logged with traceback)
            return shown(exc)
    return wrapper


def cut_at_word(text, most: int = 120) -> str:
    """Words for a place with little room, whole words, "..." where they are cut: a progress bar has one line (it was
    cut mid-word); a table cell of a 60 s transcript was taller than the screen (the row's editor shows it whole)."""
    text = str(text or "")
    return text if len(text) <= most else text[:most].rsplit(" ", 1)[0] + " ..."
