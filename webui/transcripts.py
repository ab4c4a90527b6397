"""Dataset tab panel: transcripts to review (worst first), machine drafts for clips without text, the recognizer.

Mounted by webui/dataset.py under its Review section with the tab's dataset picker. Handlers are module
functions taking the workspace first; all work happens in `utils.transcripts`.
"""
from __future__ import annotations

import time

import gradio as gr
import pandas as pd

from utils.events import StudioError
from utils.transcripts import asr, check_transcripts, decide, load_ranking, recognizers, review_rows
from utils.transcripts.review import check_running, review_row, still_current
from utils.transcripts.scoring import cancel_check
from utils.workers import events_in_child
from utils.workspace import readable
from webui.components import cut_at_word, says_errors
from webui.context import AppContext

REVIEW_COLUMNS = ["rank", "id", "score", "reason", "text", "decision"]
REVIEW_WIDTHS = ["6%", "12%", "7%", "38%", "27%", "10%"]  # every column on screen, and "rank" on one line
DRAFT_COLUMNS = ["id", "confidence", "draft"]
CELL_CHARS = 160  # a long transcript is cut in its cell, whole in the editor below (as on the rows table)
METHOD_HELP = ("alignment: a short training of the tiny voice model on this dataset, then its aligner lays each "
               "transcript over its audio (offline, works on a CPU; the time is said before it starts); asr: the "
               "speech recognizer below; auto: the alignment, plus the recognizer when there is one")


REVIEW_UNDECIDED = 300  # the list runs until this many clips without a decision: always that much work on screen


def review_frame(ws, name: str) -> pd.DataFrame:
    rows = review_rows(ws, name, undecided=REVIEW_UNDECIDED) if name else []
    frame = pd.DataFrame(rows, columns=REVIEW_COLUMNS + ["path"]).drop(columns="path")
    return frame.assign(text=frame["text"].map(lambda t: cut_at_word(t, CELL_CHARS)))


def review_label(ws, name: str, listed: pd.DataFrame) -> str:
    """The list's title, saying how much of the ranking it shows: a 200k-row ranking is listed a window at a time."""
    ranking = load_ranking(ws, name) if name else None
    total = len(ranking["rows"]) if ranking else 0
    if total <= len(listed):
        return "Most suspicious first (click one)"
    todo = int((listed["decision"] == "").sum())
    return (f"Most suspicious first: ranks 1-{int(listed['rank'].iloc[-1]):,} of {total:,} ({todo} without a decision;"
            " deciding them brings on the next; click one)")


def drafts_frame(ws, name: str) -> pd.DataFrame:
    rows = asr.draft_rows(ws, name) if name else []
    frame = pd.DataFrame(rows, columns=DRAFT_COLUMNS + ["path"]).drop(columns="path")
    return frame.assign(draft=frame["draft"].map(lambda t: cut_at_word(t, CELL_CHARS)))


def press_check(ws, name: str, method: str) -> bool:
    """Whether a press of Check transcripts starts a check. A check already running, or a ranking that a new check
    would only repeat, is refused with why: a press that did nothing and said nothing looked broken."""
    if not name:
        raise StudioError("Choose a dataset above first.")
    if check_running(ws, name):
        raise StudioError(f"A check of {name} is already running, started from another page, before a reload or on "
                          "the command line, so its log is not here: its ranking appears below when it ends, and "
                          "Cancel check stops it.")
    when = still_current(ws, name, method or "auto")
    if when:
        raise StudioError(f"The ranking below is current: the check of {when} scored every transcript as it is now, "
                          "the same way. Fix or change transcripts (or get a recognizer), then check again.")
    return True


def method_line(ws, method: str) -> str:
    """The log's first line: how this check scores the transcripts ("auto" names what it uses here)."""
    folder = asr.available(ws)
    heard = f"what the speech recognizer {folder.name} hears" if folder else None
    if method == "asr":
        return f"asr: scored by {heard or f'the speech recognizer (none in this workspace yet: {HERE})'}"
    if method == "alignment" or not heard:
        return ("auto: no speech recognizer in this workspace, so this check uses the alignment alone (to add what "
                f"one hears: {HERE})" if method == "auto" else
                "alignment: scored by how each transcript lays over its audio")
    return f"auto: scored by the alignment and by {heard}"


def run_check(ws, name: str, method: str, progress=None):
    """Generator of log text. Its first line says how the transcripts are scored and stays first; a stage moving on
    rewrites its own line (the log ran to dozens of "[25/300]" lines, the newest out of sight)."""
    if not name:
        raise StudioError("Choose a dataset above first.")
    lines, last = [method_line(ws, method or "auto")], None
    yield lines[0]
    # in a process of its own: at 200k clips the check holds ~1.5 GB, which the app's process would keep after it
    for event in events_in_child(check_transcripts, ws, name, method=method or "auto", job="transcript check"):
        if progress is not None and event.total:
            progress(event.fraction, desc=event.message)
        step = (event.stage, event.total, event.message.split(" (about")[0])  # a count and time left move on
        if step == last:  # the same stage moving on: its line is updated, not repeated
            lines[-1] = event.format()
        else:
            lines.append(event.format())
        last = step
        yield "\n".join(lines[:1] + lines[1:][-30:])


def beside(run, *args, **kwargs):
    """(log text, how far it is) for each value of `run(*args, progress=...)`, a log generator: how far it is goes in
    a line of its own beside the log (its last word stays when it ends). Gradio's progress was drawn over the log's
    lines, unreadable while it ran."""
    store = {}

    def progress(fraction: float, desc: str = "") -> None:
        store["line"] = f"{desc} · {fraction:.0%} done"

    for text in run(*args, progress=progress, **kwargs):
        yield text, store.get("line", "")


def run_drafts(ws, name: str, progress=None):
    if not name:
        raise StudioError("Choose a dataset above first.")
    asr.required(ws, HERE)  # said here, before a process starts, and pointing at the button beside this one
    lines: list[str] = []
    # in a process of its own too: the recognizer (3.9 GB for the default) is let go with it, not kept by the app
    for event in events_in_child(asr.transcribe_missing, ws, name, job="machine drafts"):
        if progress is not None and event.total:
            progress(event.fraction, desc=event.message)
        lines.append(event.format())
        yield "\n".join(lines[-30:])


# where the recognizer line and the Draft refusal on this tab send the curator (not "the Dataset tab's ... button")
HERE = "Get recognizer, under Drafts for clips without text"


def recognizer_choices() -> list[tuple[str, str]]:
    """The known recognizers, each with its size, how well it hears Amharic and its licence in its own label (they
    were a paragraph of error rates under the box)."""
    return [(f"{k.title}: {k.download_gb} GB, mishears about {k.cer_gsma:.0f} letters in 100 of Amharic speech, "
             f"licence {k.licence}", k.repo) for k in recognizers.KNOWN.values()]


def recognizer_info(choice) -> str:
    """Under the Recognizer box, one short line: this machine's pick; the others are in the list."""
    return (f"for this machine: {choice.title}; or pick another, or type a Hugging Face CTC model id or a folder "
            "holding a downloaded copy")


def recognizer_source(ws, text: str | None, data_dirs=()) -> str | None:
    """The Recognizer box's text as `fetch` takes it: a hub id as typed; a folder (an absolute path, ~, ./, or a
    path that exists in the workspace) only inside the workspace or a --data-dir folder, for a share link may read
    nothing else on the machine. None: this machine's pick."""
    text = (text or "").strip()
    if not text:
        return None
    local = text.startswith(("/", "~", ".")) or (ws.root / text).exists()
    return str(readable(ws, text, data_dirs)) if local else text


def fetch_recognizer(ws, model_id: str, progress=None, data_dirs=()):
    lines: list[str] = []
    for event in asr.fetch(ws, recognizer_source(ws, model_id, data_dirs)):
        if progress is not None and event.total:
            progress(event.fraction, desc=event.message)
        lines.append(event.format())
        yield "\n".join(lines[-10:])


def pick(ws, name: str, row_id: str, drafts: bool = False):
    """(row id, audio path, text to edit) of a row picked in the review list or the drafts list."""
    if drafts:
        found = next((r for r in asr.draft_rows(ws, name) if r["id"] == row_id), None)
    else:
        found = review_row(ws, name, row_id)
    if found:
        return found["id"], found["path"], found["draft"] if drafts else found["text"]
    raise StudioError(f"Dataset {name!r} has no row {row_id!r} in this list any more; press Refresh.")


def build(ctx: AppContext, dataset: gr.Dropdown, prepared: gr.State, decided: gr.State) -> tuple:
    """The panel under the Dataset tab's review, on its `dataset` picker; `prepared` changes each time a prepare
    remakes the dataset picked (which changes no picker value, yet leaves its lists and picked clip stale), `decided`
    each time a row decision is saved here or in the review above (this panel sets it too: both redraw from it).
    Returns the page-load refresh of the lists: a page opens on the dataset it was built with, which fires no
    change, and the lists would stay empty until one."""
    ws = ctx.workspace
    gr.Markdown("### Transcripts to check\nEvery clip is scored by how likely its transcript is not what was "
                "said; the most suspicious come first, with the reason. Click one, listen, then Keep, fix the text, "
                "or Exclude (saved like the row edits above).")
    with gr.Row():
        method = gr.Dropdown(["auto", "alignment", "asr"], value="auto", label="Method", info=METHOD_HELP)
        check_btn = gr.Button("Check transcripts", variant="primary", elem_id="transcripts-check")
        cancel_btn = gr.Button("Cancel check", elem_id="transcripts-cancel")
        refresh = gr.Button("Refresh lists")
    check_note = gr.Markdown(elem_id="transcripts-check-note")  # what a press of Check did, said at once
    check_progress = gr.Markdown(elem_id="transcripts-progress")  # how far the check is: beside its log, not over it
    check_log = gr.Textbox(label="Check log", lines=4, max_lines=12, elem_id="transcripts-log",
                           elem_classes=["log-box"])  # pinned to its newest line (assets/app.js)
    review = gr.Dataframe(headers=REVIEW_COLUMNS, interactive=False, wrap=True, elem_id="transcripts-review",
                          label="Most suspicious first (click one)", column_widths=REVIEW_WIDTHS,
                          elem_classes=["review-list"])
    # the clip picked, right under the list it was picked from (a draft picked below comes here too)
    with gr.Group(elem_id="transcripts-editor"):
        with gr.Row():
            row_id = gr.Textbox(label="Clip to review", interactive=False, elem_id="transcripts-row")
            player = gr.Audio(label="Listen", type="filepath", interactive=False)
        text = gr.Textbox(label="Transcript (fix it, or accept the draft, then Save text)", elem_id="transcripts-text")
        with gr.Row():
            keep_btn = gr.Button("Keep", elem_id="transcripts-keep")
            save_btn = gr.Button("Save text", elem_id="transcripts-save")
            exclude_btn = gr.Button("Exclude", elem_id="transcripts-exclude")
    status = gr.Markdown(elem_id="transcripts-status")
    gr.Markdown("### Drafts for clips without text\nA speech recognizer writes a machine draft (with its "
                "confidence) for every clip that has no transcript; the least confident come first. Click one: it "
                "opens in the clip above, and becomes the clip's text only when you save it.",
                elem_id="transcripts-drafts-head")
    recognizer = gr.Markdown(asr.status_line(ws, HERE), elem_id="transcripts-recognizer")
    choice, _ = recognizers.for_this_machine()
    # the whole width: each choice says its size, how well it hears and its licence, cut under the arrow beside buttons
    model_id = gr.Dropdown(recognizer_choices(), value=choice.repo, allow_custom_value=True,
                           label="Recognizer (Hugging Face id or folder)", elem_id="transcripts-model",
                           info=recognizer_info(choice))
    with gr.Row():
        fetch_btn = gr.Button("Get recognizer", elem_id="transcripts-fetch")
        draft_btn = gr.Button("Draft missing transcripts", elem_id="transcripts-draft")
    # the two buttons above answer here, under them: in the Check log they were out of sight, far above
    draft_progress = gr.Markdown(elem_id="transcripts-draft-progress")
    draft_log = gr.Textbox(label="Recognizer and drafts log", lines=2, max_lines=8, interactive=False,
                           elem_id="transcripts-draft-log", elem_classes=["log-box"])
    drafts = gr.Dataframe(headers=DRAFT_COLUMNS, interactive=False, wrap=True, elem_id="transcripts-drafts",
                          label="Machine drafts, least confident first (click one)")

    # ---- wiring
    lists = [review, drafts]

    def on_lists(n):
        listed = review_frame(ws, n)
        return gr.update(value=listed, label=review_label(ws, n, listed)), drafts_frame(ws, n)

    def on_check(n, m):
        yield from beside(run_check, ws, n, m)

    def on_drafts(n):
        yield from beside(run_drafts, ws, n)

    def on_fetch(m):
        yield from beside(fetch_recognizer, ws, m, data_dirs=ctx.data_dirs)

    def on_pick_review(n, frame, evt: gr.SelectData):  # the status line spoke of the clip picked before
        return (*pick(ws, n, str(frame.iloc[evt.index[0]]["id"])), "")

    def on_pick_draft(n, frame, evt: gr.SelectData):
        return (*pick(ws, n, str(frame.iloc[evt.index[0]]["id"]), drafts=True), "")

    def on_decide(n, r, t, action):
        if not n or not r:
            raise StudioError("Pick a clip in one of the lists first.")
        return decide(ws, n, r, action, t)

    def on_press(n, m):  # a new `go` starts the check; a check running, or a ranking still current, is said
        return "", time.time_ns() if press_check(ws, n, m) else gr.update()

    checked, drafted = [check_log, check_progress], [draft_log, draft_progress]
    logged = lambda fn, out=checked: says_errors(fn, out, out[0], log=True, also={out[1]: ""})  # noqa: E731
    go = gr.State()
    # every press is answered (a press while a check runs is not dropped unanswered); the check itself starts only
    # from `go`, one at a time
    check_btn.click(says_errors(on_press, [check_note, go], check_note), [dataset, method], [check_note, go],
                    trigger_mode="multiple", show_progress="hidden", api_name="transcripts_press")
    # no progress drawn by Gradio: it covered the log's lines; the line beside the log says how far it is
    go.change(logged(on_check), [dataset, method], checked, trigger_mode="once", show_progress="hidden",
              api_name="transcripts_check").then(on_lists, dataset, lists)
    # the check stops itself at its next poll (a request on disk): it may run in another page or from the command line
    cancel_btn.click(says_errors(lambda n: cancel_check(ws, n), [check_note], check_note), dataset, check_note,
                     api_name="transcripts_cancel")
    draft_btn.click(logged(on_drafts, drafted), dataset, drafted, show_progress="hidden",
                    api_name="transcripts_draft").then(on_lists, dataset, lists)
    fetch_btn.click(logged(on_fetch, drafted), model_id, drafted, show_progress="hidden",
                    api_name="transcripts_fetch").then(lambda: asr.status_line(ws, HERE), None, recognizer)
    shown_anew = [dataset.change, prepared.change]
    gr.on(shown_anew, on_lists, dataset, lists, api_name="transcripts_lists")
    gr.on(shown_anew, lambda: ("", None, "", ""), None, [row_id, player, text, check_note], show_progress="hidden")
    refresh.click(on_lists, dataset, lists)
    picked = [row_id, player, text, status]  # a clip gone from the list since it was drawn: said in the status line
    review.select(says_errors(on_pick_review, picked, status, what="Picking the clip"), [dataset, review], picked)
    drafts.select(says_errors(on_pick_draft, picked, status, what="Picking the draft"), [dataset, drafts], picked)
    for btn, action in ((keep_btn, "keep"), (save_btn, "text"), (exclude_btn, "exclude")):
        btn.click(says_errors(lambda n, r, t, a=action: (on_decide(n, r, t, a), time.time_ns()), [status, decided],
                              status), [dataset, row_id, text], [status, decided], api_name=f"transcripts_{action}")
    decided.change(on_lists, dataset, lists, show_progress="hidden")
    return on_lists, [dataset], lists
