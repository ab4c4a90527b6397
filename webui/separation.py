"""Tab: Music removal.

Handlers are small module functions taking the workspace first (tests call them directly); `build`
wires them to components. All work happens in `utils.separation`.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import gradio as gr
import pandas as pd

from utils import separation
from utils.events import StudioError
from utils.separation import dataset as sep_dataset
from utils.separation.gate import CLEAR as THRESHOLD_CLEAR
from webui.components import dataset_pick, dataset_picker, cut_at_word, says_errors, shown_name
from webui.context import AppContext

BACKEND_LABELS = [("auto: the best this machine has", "auto"),
                  ("a trained voice separator that works offline (Spleeter)", "spleeter"),
                  ("the best trained separator, if its weights are here (Demucs)", "demucs"),
                  ("no trained model: sound processing only, rougher (dsp)", "dsp")]
TABLE_COLUMNS = ["id", "music score", "music", "in use"]


def backend_note(backend: str) -> str:
    choice = separation.choose_backend(backend or "auto")
    return f"**Backend:** {choice.name}: {choice.reason}"


def dataset_choices(ws) -> dict:
    return gr.update(choices=ws.list_datasets())


def clip_table(ws, name: str) -> pd.DataFrame:
    """The clips in listening order (music first), the first LIST_ROWS of them."""
    if not name:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    return pd.DataFrame(sep_dataset.listening_order(ws, name), columns=TABLE_COLUMNS)


def clip_ids(ws, name: str) -> dict:
    """The clip picker, each clip named with its music score, the clips with music first (strongest first), then
    the faint ones: the curator starts listening where the music is, on the first of them."""
    rows = [] if not name else sep_dataset.listening_order(ws, name)
    choices = [(r["id"] if r["music score"] is None else f"{r['id']} ({r['music']}: music score "
                f"{r['music score']:.3f})", r["id"]) for r in rows]
    return gr.update(choices=choices, value=choices[0][1] if choices else None)


def faint_ids(ws, name: str) -> dict:
    """Clips the curator may pick for Accept: every clip that has separated audio, faint scores included."""
    rows = [] if not name else sep_dataset.listening_order(ws, name, separated_only=True)
    return gr.update(choices=[r["id"] for r in rows], value=[])


def _drive(events, progress):
    """Run an event generator, moving the progress bar; yields the log text after each event.

    Being a generator is what lets the Cancel button stop the work between two events."""
    lines = []
    for event in events:
        if progress is not None and event.total:
            progress(event.fraction, desc=cut_at_word(event.format()))
        lines.append(event.format())
        yield "\n".join(lines[-300:])


def run_dataset(ws, name: str, backend: str, gate: bool, redo: bool = False, progress=gr.Progress()):
    """Separate the clips of a dataset not done before with these settings (every clip with `redo`); yields (log,
    clip table, the line beside Accept)."""
    if not name:
        raise gr.Error("Pick a dataset first.")
    said = []  # the run's last word, also said beside Accept: the log's end is out of sight, under its first lines

    def watched(events):
        for event in events:
            if event.stage == "done":
                said.append(event.message)
            yield event

    try:
        for log in _drive(watched(sep_dataset.process_dataset(ws, name, backend or "auto", gate=bool(gate),
                                                              redo=bool(redo))), progress):
            yield log, gr.update(), gr.update()
    except StudioError as exc:
        raise gr.Error(str(exc)) from exc
    yield log, clip_table(ws, name), (f"**Done:** {said[-1]}. Listen to a clip below; Accept uses the separated "
                                      "audio of those with clear music, or of the clips you pick." if said else "")


def run_file(ws, path: str, backend: str, gate: bool, progress=gr.Progress()):
    """Separate one uploaded file; yields (log, original, speech, residual)."""
    if not path:
        raise gr.Error("Upload an audio file first.")
    src = Path(path)
    out = ws.uploads / "separated"
    speech, residual = out / f"{src.stem}.speech.wav", out / f"{src.stem}.residual.wav"
    try:
        for log in _drive(separation.separate_file(src, speech, residual, backend=backend or "auto",
                                                   gate=bool(gate)), progress):
            yield log, gr.update(), gr.update(), gr.update()
    except StudioError as exc:
        raise gr.Error(str(exc)) from exc
    yield log, str(src), str(speech), str(residual)


AFTER = "After (music removed)"


def show_clip(ws, name: str, clip_id: str):
    """Before/after players of one clip; the After player's label says what it holds (the music-removed audio, and
    whether training uses it) or why it is empty."""
    if not name or not clip_id:
        return None, gr.update(value=None, label=AFTER)
    before, after = sep_dataset.clip_paths(ws, name, clip_id)
    return str(before), gr.update(value=str(after) if after else None,
                                  label=sep_dataset.after_label(ws, name, clip_id))


def dataset_view(ws, name: str | None) -> tuple:
    """(clip table, clip picker, accept picks) of a dataset: what the tab shows when one is picked or loaded."""
    return clip_table(ws, name), clip_ids(ws, name), faint_ids(ws, name)


def view_on_open(ws, current: str | None, clip: str | None, picks: list[str] | None) -> tuple:
    """(picker, clip table, clip picker, accept picks) each time the tab opens: the datasets as they are now and the
    clips of the one shown as they are now (20 clips added on the Dataset tab were missing from the list); the clip
    listened to and the picks stay while they exist."""
    pick = dataset_pick(ws, current)
    table, clips, accepts = dataset_view(ws, shown_name(pick, current))
    if shown_name(pick, current) == current:
        ids = [c[1] for c in clips["choices"]]
        clips["value"] = clip if clip in ids else clips["value"]
        accepts["value"] = [c for c in picks or [] if c in accepts["choices"]]
    return pick, table, clips, accepts


def accept(ws, name: str, picks: list[str] | None = None):
    """The picked clips, or with none picked only the clips where music was clearly found."""
    if not name:
        raise gr.Error("Pick a dataset first.")
    n = sep_dataset.accept(ws, name, picks or None)
    which = "picked" if picks else f"with clear music (score {THRESHOLD_CLEAR} or more; pick others to use them)"
    return (f"{n} clip(s) {which} switched to their music-removed audio (the original clips are kept under audio/); "
            "their noise flags on the Dataset tab are measured again on it.", clip_table(ws, name))


def revert(ws, name: str):
    if not name:
        raise gr.Error("Pick a dataset first.")
    n = sep_dataset.revert(ws, name)
    return f"{n} clip(s) point back at their original audio.", clip_table(ws, name)


def cancel_while(start: gr.Button, work, cancel: gr.Button) -> None:
    """Cancel can be pressed while `work` (started by `start`) runs, and only then: a red Cancel with nothing to
    cancel read as if something still ran."""
    def armed(on: bool):
        return lambda: gr.update(interactive=on)

    start.click(armed(True), None, cancel, queue=False, show_progress="hidden")
    work.then(armed(False), None, cancel, show_progress="hidden")
    cancel.click(armed(False), None, cancel, cancels=[work], show_progress="hidden")


def build(ctx: AppContext) -> list:
    ws = ctx.workspace
    gr.Markdown("Remove background music under speech. A music detector checks every clip first: clips "
                "without music pass through untouched. Originals are never changed; results go to `separated/`.")
    with gr.Row():
        backend = gr.Radio(BACKEND_LABELS, value="auto", label="Backend", elem_id="sep-backend")
        gate = gr.Checkbox(True, label="Only separate clips where music is detected", elem_id="sep-gate")
    note = gr.Markdown(backend_note("auto"), elem_id="sep-backend-note")
    with gr.Tabs():
        with gr.Tab("Dataset"):
            with gr.Row():
                name = dataset_picker(ws, elem_id="sep-dataset")
                refresh = gr.Button("Refresh list", size="sm")
            with gr.Row():
                run_ds = gr.Button("Remove music", variant="primary", elem_id="sep-run")
                stop_ds = gr.Button("Cancel", variant="stop", elem_id="sep-cancel", interactive=False)
                redo = gr.Checkbox(False, label="check every clip again", elem_id="sep-redo",
                                   info="a run cut off goes on where it stopped; tick to redo clips done before")
            table = gr.Dataframe(clip_table(ws, ""), interactive=False, label="Clips", elem_id="sep-table")
            clip = gr.Dropdown([], label="Listen to a clip", elem_id="sep-clip")
            with gr.Row():
                before = gr.Audio(type="filepath", label="Before", interactive=False, elem_id="sep-before")
                after = gr.Audio(type="filepath", label=AFTER, interactive=False, elem_id="sep-after")
            picks = gr.Dropdown([], multiselect=True, label="Clips to accept (none picked: only those where music "
                                "was clearly found)", elem_id="sep-picks")
            with gr.Row():
                accept_btn = gr.Button("Accept: use separated audio for training", elem_id="sep-accept")
                revert_btn = gr.Button("Revert to originals", elem_id="sep-revert")
            status = gr.Markdown(elem_id="sep-status")
        with gr.Tab("One file"):
            upload = gr.Audio(type="filepath", label="Audio file", sources=["upload"], elem_id="sep-upload")
            with gr.Row():
                run_one = gr.Button("Remove music", variant="primary", elem_id="sep-run-file")
                stop_one = gr.Button("Cancel", variant="stop", elem_id="sep-cancel-file", interactive=False)
            with gr.Row():
                file_before = gr.Audio(type="filepath", label="Before", interactive=False)
                file_speech = gr.Audio(type="filepath", label="Speech", interactive=False)
                file_residual = gr.Audio(type="filepath", label="Removed", interactive=False)
    log = gr.Textbox(label="Log", lines=8, max_lines=20, elem_id="sep-log", elem_classes=["log-box"])

    backend.change(backend_note, backend, note, api_name="separation_backend")
    refresh.click(partial(dataset_choices, ws), None, name, api_name="separation_datasets")
    name.focus(partial(dataset_choices, ws), None, name, show_progress="hidden")  # a dataset prepared meanwhile
    # a manifest that cannot be read, or a clip gone since the picker was filled, is said in the status line;
    # another dataset's table clears what the line said about the one before
    shown = [table, clip, picks, status]
    name.change(says_errors(lambda n: (*dataset_view(ws, n), ""), shown, status, what="Showing the dataset"),
                name, shown, api_name="separation_table")
    ds_event = run_ds.click(says_errors(partial(run_dataset, ws), [log, table, status], log, log=True),
                            [name, backend, gate, redo], [log, table, status], api_name="separation_run_dataset")
    cancel_while(run_ds, ds_event, stop_ds)
    players = [before, after, status]
    listen = says_errors(lambda n, c: (*show_clip(ws, n, c), gr.update()), players, status, what="Loading the clip")
    # the players again once it ran: a picker left on the clip it showed fires no change, and After went on
    # saying "nothing yet" of the clip just separated
    ds_event.then(partial(clip_ids, ws), name, clip).then(partial(faint_ids, ws), name, picks).then(
        listen, [name, clip], players, show_progress="hidden")
    clip.change(listen, [name, clip], players, api_name="separation_clip")
    # the After player says whether training uses what it plays: said again once that changed
    accept_btn.click(says_errors(partial(accept, ws), [status, table], status), [name, picks], [status, table],
                     api_name="separation_accept").then(listen, [name, clip], players, show_progress="hidden")
    revert_btn.click(says_errors(partial(revert, ws), [status, table], status), name, [status, table],
                     api_name="separation_revert").then(listen, [name, clip], players, show_progress="hidden")
    file_outputs = [log, file_before, file_speech, file_residual]
    file_event = run_one.click(says_errors(partial(run_file, ws), file_outputs, log, log=True),
                               [upload, backend, gate], file_outputs, api_name="separation_run_file")
    cancel_while(run_one, file_event, stop_one)

    def on_page_load(current):  # the picker shows a dataset at load: show its clips too, not an empty table
        names = ws.list_datasets()
        pick = current if current in names else (names[0] if names else None)
        return gr.update(choices=names, value=pick), *dataset_view(ws, pick), ""

    # opened again: a dataset prepared or deleted meanwhile, and the clips of the one shown as they are now
    opened = [name, table, clip, picks, status]
    return [(says_errors(on_page_load, [name, *shown], status, what="Showing the dataset"), [name],
             [name, *shown]),
            (says_errors(lambda *a: (*view_on_open(ws, *a), gr.update()), opened, status, what="Showing the dataset"),
             [name, clip, picks], opened, "open")]
