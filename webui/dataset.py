"""Tab: Dataset upload, checking and preparation.

Handlers are small module functions taking the workspace first (tests call them directly);
`build` wires them to components. All work happens in `utils.datasets`.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import gradio as gr
import pandas as pd

from utils import datasets
from utils.datasets import deletion
from utils.datasets import disk
from utils.datasets.config import PrepareConfig
from utils.events import StudioError
from utils.datasets.prepare import no_text_yet
from utils.training.speed import say_hours
from utils.workspace import check_name, readable
from webui import transcripts
from webui.components import cut_at_word, dataset_pick, dataset_picker, says_errors, shown_name
from webui.context import AppContext

FRONTENDS = (("Amharic pronunciation rules (phoneme), recommended", "phoneme"), ("letters as written (char)", "char"),
             ("word pieces learned from the transcripts (bpe)", "bpe"))
CELL_CHARS = 160  # about three lines of a text column: a 60 s transcript made a cell taller than the screen
TABLE_COLUMNS = ["id", "flags", "excluded", "decision", "duration", "speaker", "text", "messages"]
# column types of the two plots, kept even when empty: a plot keeps the axis types of the first frame it gets
HIST_TYPES = {"seconds": str, "start": float, "clips": int}
RATE_TYPES = {"duration": float, "chars_per_s": float, "id": str, "status": str}
STATUS_COLORS = {"ok": "#2ca02c", "flagged": "#ff7f0e", "excluded": "#7f7f7f"}


def _sources(ws, files, path: str, data_dirs=(), again: str | None = None) -> list[Path]:
    """The files a Prepare reads; none given for `again`, a dataset that exists: [], so it reads its raw/ again."""
    sources = [Path(f if isinstance(f, str) else f.name) for f in (files or [])]
    if path and path.strip():
        sources.append(readable(ws, path.strip(), data_dirs))
    if not sources and not (again and again in ws.list_datasets()):
        raise StudioError("Upload a zip or files, or give a path inside the workspace.")
    return sources


def reading_line(name: str, files, path: str) -> str:
    """The log's first line: every file this Prepare reads and where it came from. The upload box kept the last
    dataset's zip, and a new dataset silently took its clips too."""
    given = [f"{Path(f if isinstance(f, str) else f.name).name} (uploaded)" for f in (files or [])]
    given += [f"{path.strip()} (typed path)"] if (path or "").strip() else []
    if not given:
        return f"Reads: the uploads {name} keeps (raw/), as nothing new was given"
    return f"Reads {len(given)} source(s) into {name}: " + ", ".join(given)


def inspect_upload(ws, files, path: str, data_dirs=()) -> dict:
    """Columns of an uploaded CSV/TSV (for the column pickers), or {} when there is none."""
    try:
        sources = _sources(ws, files, path, data_dirs)
    except StudioError:
        return {}
    tables = [s for s in sources if s.suffix.lower() in (".csv", ".tsv")]
    return datasets.inspect_table(tables[0]) if tables else {}


def name_note(ws, name: str | None) -> str | None:
    """Under the name: whether Prepare adds to a dataset or makes one (adding recordings later was nowhere said)."""
    name = (name or "").strip()
    if not name:
        return None
    try:
        check_name(name, "dataset name")  # said as it is typed, not only by Prepare once pressed
    except StudioError as exc:
        return str(exc)
    if name in ws.list_datasets():
        return (f"{name} exists: Prepare adds these recordings to it, and its rows keep your Keep/Exclude decisions "
                "and fixed transcripts (a file under an id it has already is added as a duplicate, left out)")
    return f"a new dataset: Prepare makes {name}"


def disk_line(ws, files, path: str, data_dirs=(), half_mels: bool = False, keep_uploads: bool = True) -> str:
    """What preparing the chosen uploads will take on disk with the size choices made, said before Prepare is
    pressed (empty when none)."""
    if not files and not (path or "").strip():
        return ""
    try:
        cfg = PrepareConfig(half_mels=bool(half_mels), keep_uploads=bool(keep_uploads))
        return disk.describe(disk.estimate(_sources(ws, files, path, data_dirs), ws.root, in_place=tuple(data_dirs),
                                           cfg=cfg))
    except StudioError as exc:
        return str(exc)


def run_prepare(ws, files, path, name, fmt, frontend, audio_col, text_col, speaker_col, progress=None,
                data_dirs=(), half_mels: bool = False, keep_uploads: bool = True):
    """Generator of log text; the last value ends with the summary."""
    if not (name or "").strip():
        raise StudioError("Type a name for the new dataset in 'Dataset name' (for example the speaker's name), "
                          "then press Prepare.")
    columns = {k: v for k, v in (("audio", audio_col), ("text", text_col), ("speaker", speaker_col)) if v}
    sources = _sources(ws, files, path, data_dirs, again=name.strip())
    lines = [reading_line(name.strip(), files, path)]  # kept first: the log shows its newest 200 lines after it
    yield lines[0]
    for event in datasets.prepare(ws, name, sources, fmt=fmt or "auto",
                                  columns=columns or None,
                                  frontend=frontend or "phoneme", in_place=tuple(data_dirs),
                                  cfg=PrepareConfig(half_mels=bool(half_mels), keep_uploads=bool(keep_uploads))):
        if progress is not None and event.total:
            progress(event.fraction, desc=f"{event.stage} {event.done}/{event.total}")
        if event.level != "info" or event.stage in ("discover", "check", "done", "cancelled", "tokenizer", "uploads"):
            lines.append(event.format())
            yield "\n".join(lines[:1] + lines[1:][-200:])
    yield "\n".join(lines[:1] + lines[1:][-200:])


def summary_markdown(ws, name: str) -> str:
    from utils.datasets.manifest import summarize

    report = datasets.load_report(ws, name)
    s = report.get("summary") or summarize(ws, name, [])  # rows brought without a preparation are counted too
    if not s["clips"]:
        return f"Dataset **{name}** has no report yet."
    flags = "\n".join(f"- **{k}** ({datasets.FLAG_HELP.get(k, k)}): {v}" for k, v in s.get("flags", {}).items())
    errors = "\n".join(f"- {e['message']}" for e in report.get("errors", [])[:50])
    split = (f"**{s['speakers']}** speaker(s) · {s['train_clips']} train / {s['val_clips']} val" if s["usable_clips"]
             else "no usable clip yet")
    fmt = f" · format {s['format']}" if s.get("format") else ""  # rows brought without a preparation have none
    return (f"### {name}\n**{say_hours(s['usable_hours'])} usable** of {say_hours(s['hours'])} · **{s['usable_clips']}** of "
            f"{s['clips']} clips · {split}{fmt}\n\n"
            f"**Flagged rows by kind**\n{flags or '- none: every clip passed the checks'}\n\n"
            f"**Files that could not be used** ({s.get('errors', 0)})\n{errors or '- none'}\n\n"
            f"{excluded_line(s)}{next_line(ws, name, s)}")


def next_line(ws, name: str, s: dict) -> str:
    """What to do now. Clips with no text (a long recording cut at pauses) cannot train: their text comes first, or
    the advice to train leads to a run that refuses the dataset."""
    if not s["usable_clips"] and no_text_yet(s):
        unread = (f"{s['errors']} line(s) or file(s) could not be read (listed above): if they hold the transcripts, "
                  "fix them, delete this dataset (below) and prepare again. Otherwise " if s.get("errors") else "")
        return (f"**Next:** no clip has text yet, so none can train. {unread}press **Draft missing transcripts** "
                "(under *Drafts for clips without text*, below) for machine drafts to check and save, or pick a row, "
                "type what is said and press **Save text**.")
    review = ("review the flagged rows below (listen, then Keep / fix the text / Exclude)" if s.get("flagged_clips")
              else "no row is flagged, so there is nothing to review")  # it asked to review when none was flagged
    return f"**Next:** {review}; {music_advice(ws, name)}; then train on the **Training** tab.{enough_line(s)}"


def excluded_line(s: dict) -> str:
    """Flagged rows are out of training before the curator does anything: said, or the review reads as a chore that
    must be done before they are."""
    from utils.datasets.config import EXCLUDING_FLAGS

    left_out = s["clips"] - s["usable_clips"]
    kinds = "; ".join(datasets.FLAG_HELP[flag] for flag in s.get("flags", {}) if flag in EXCLUDING_FLAGS)
    why = f"those flagged for {kinds} (unless you kept them), and any you excluded" if kinds else "the ones you excluded"
    only_untyped = set(s.get("flags", {})) & set(EXCLUDING_FLAGS) == {"missing_text"}  # Keep refuses those
    back = ("Typing its text and pressing Save text puts one back" if only_untyped else
            f"Keep puts one back{what_a_fix_clears(s)}")
    return f"**{left_out} row(s) are left out of training already**: {why}. {back}.\n\n" if left_out else ""


def what_a_fix_clears(s: dict) -> str:
    """Which of the dataset's excluding flags a fixed text clears: only the text's own; a row also flagged for its
    audio (the same audio as another row) stayed out after its text was fixed, and the summary had said it would not."""
    from utils.datasets.checks import TEXT_FLAGS
    from utils.datasets.config import EXCLUDING_FLAGS

    present = [flag for flag in s.get("flags", {}) if flag in EXCLUDING_FLAGS]
    text = [datasets.FLAG_HELP[f] for f in present if f in TEXT_FLAGS]
    other = [datasets.FLAG_HELP[f] for f in present if f not in TEXT_FLAGS]
    if not text:
        return ""
    if not other:
        return "; fixing its text does too"
    return (f"; fixing its text clears only the text's own flags ({'; '.join(text)}), so a row also flagged for "
            f"{'; '.join(other)} stays out until you Keep it")


def enough_line(s: dict) -> str:
    """How much speech a voice wants, where there is little: the Training tab's families say it too, later."""
    if s["usable_hours"] >= 1:
        return ""
    return (f" With {say_hours(s['usable_hours'])} of speech expect a first, rough voice: MMS-TTS wants an hour or two "
            "of one speaker, OmniVoice fine-tunes from minutes (and speaks from one clip with no training), Matcha "
            "from zero wants many hours.")


def music_advice(ws, name: str) -> str:
    """The Next line's word on music: what removal did, once it ran, instead of asking for it again."""
    from utils.separation.dataset import progress

    done = progress(ws, name)
    if done is None:
        return "remove background music on the **Music removal** tab if the recordings have any"
    said = f"music removal found music in {done['music']} clip(s)" if done["music"] else "music removal found no music"
    if done["in_use"]:
        said += f"; {done['in_use']} train on their music-removed audio"
    if done["waiting"]:
        said += (f"; {done['waiting']} with music still train on their original (Accept on the **Music removal** "
                 "tab to use the music-removed audio)")
    return said


def load_view(ws, name: str, show_all: bool = False, page: int = 1):
    """(summary markdown, histogram frame, rate frame, review table frame of one page, the page shown, where the
    page lies) of a dataset: a page of rows is read, never the whole table."""
    hist, rates = datasets.plot_data(ws, name) if name else ([], [])
    hist = pd.DataFrame(hist, columns=list(HIST_TYPES)).astype(HIST_TYPES)
    rates = pd.DataFrame(rates, columns=list(RATE_TYPES)).astype(RATE_TYPES)
    if not name:
        return "Choose or prepare a dataset.", hist, rates, pd.DataFrame(columns=TABLE_COLUMNS), 1, ""
    page = max(1, int(page or 1))
    rows, total = datasets.review_page(ws, name, show_all, page)
    pages = max(1, -(-total // datasets.PAGE_ROWS))
    if page > pages:  # the rows shrank under the page (a filter, an edit): the last page there is
        page = pages
        rows, total = datasets.review_page(ws, name, show_all, page)
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS + ["path"])
    table["text"] = table["text"].map(lambda t: cut_at_word(t, CELL_CHARS))
    return summary_markdown(ws, name), hist, rates, table.drop(columns="path"), page, page_note(page, pages, total)



def page_note(page: int, pages: int, total: int) -> str:
    if total <= datasets.PAGE_ROWS:
        return f"{total} row(s)"
    first = (page - 1) * datasets.PAGE_ROWS + 1
    return f"rows {first:,}-{min(total, first + datasets.PAGE_ROWS - 1):,} of {total:,} · page {page} of {pages:,}"


def plot_updates(summary, hist: pd.DataFrame, rates: pd.DataFrame, table, *pager):
    """load_view's frames as the plots want them. A Gradio plot takes its axis types and colours from the
    data it holds when drawn, and is drawn when data first comes to an empty box: so no data is sent as
    nothing, and every status gets a row (a point with no position, not drawn) to keep its colour and
    legend entry when a later edit first excludes a clip. Last, both plots' axes (plot_axes), which go to them in
    an update of their own."""
    if hist.empty:
        return summary, None, None, table, *pager, gr.update()
    # the bars sort by label: right-aligned labels sort as their numbers ("  2-2.5" before "10-10.5")
    hist = hist.assign(seconds=hist["seconds"].str.rjust(hist["seconds"].str.len().max()))
    limits = plot_axes(hist, rates) if len(rates) else gr.update()
    unseen = [{"status": s} for s in STATUS_COLORS if s not in set(rates["status"])]
    rates = pd.concat([rates, pd.DataFrame(unseen, columns=list(RATE_TYPES)).astype(RATE_TYPES)], ignore_index=True)
    return summary, hist, rates, table, *pager, limits


HIST_TOP = 10  # the clip-count axis ends at 10 at least: a dataset of a few clips was ticked in half clips (0.5)


def plot_axes(hist: pd.DataFrame, rates: pd.DataFrame) -> dict:
    """{"rate": the speaking-rate plot's axes, "hist": the duration histogram's}: whole clips on its count axis."""
    return {"rate": rate_limits(rates), "hist": {"y_lim": [0, max(HIST_TOP, round_end(hist["clips"].max()))]}}


def rate_limits(rates: pd.DataFrame) -> dict:
    """The speaking-rate plot's axes: from 0 (a very short clip sat half off the corner) to a round number past the
    longest and the fastest clip. Given only the 0, Vega ended each axis on the farthest point, clipped in half, and
    ticked the odd range on a fine step (0 to 4.13 s: 21 labels side by side at 600 px)."""
    return {"x_lim": [0.0, round_end(rates["duration"].max())], "y_lim": [0.0, round_end(rates["chars_per_s"].max())]}


def round_end(highest: float) -> float:
    """An axis end a twentieth past `highest` (room for a point's radius), rounded up to a multiple of the 1, 2 or 5
    step that cuts it into about ten: 4.13 -> 4.5, 7.8 -> 9, 9.6 -> 12."""
    top = 1.05 * float(highest)
    unit = 10.0 ** math.floor(math.log10(top / 10))
    step = next(s * unit for s in (1, 2, 5, 10) if s * unit >= top / 10)
    return round(math.ceil(top / step) * step, 6)


def export_table(ws, name: str) -> Path:
    """The dataset's rows as a spreadsheet to download (exports/NAME-rows.csv, made again each time)."""
    if not name:
        raise StudioError("Pick a dataset first.")
    return datasets.export_rows(ws, name, ws.root / "exports" / f"{name}-rows.csv")


def select_row(ws, name: str, row_id: str):
    """(id, audio path, transcript) of the row picked in the review table, read alone."""
    r = datasets.review_row(ws, name, row_id)
    return r["id"], r["path"], r["text"]


def edit_row(ws, name: str, row_id: str, action: str, text: str = "") -> str:
    if not name or not row_id:
        raise StudioError("Pick a row in the table first.")
    summary = datasets.apply_edits(ws, name, [{"id": row_id, "action": action, "text": text}])
    return f"{row_id}: {action} saved · {name}: {summary['usable_clips']} usable clips"


def retake_row(ws, name: str, row_id: str, take: str | None, progress=None) -> str:
    """A new take of the row picked (recorded in the browser or uploaded) put in place of its recording and its clip
    made again; what was done, in the status line's words."""
    from utils.datasets.retake import replace_recording

    if not name or not row_id:
        raise StudioError("Pick a row in the table first, then record or upload its new take.")
    if not take:
        raise StudioError("Record or upload the new take first (the microphone or the upload button above it).")
    said = []
    for event in replace_recording(ws, name, row_id, take):
        if progress is not None and event.total:
            progress(event.fraction, desc=f"{event.stage} {event.done}/{event.total}")
        if event.level != "info" or event.stage == "done" or (not event.total and event.stage in ("import", "check")):
            said.append(event.message)
    return "\n\n".join(said)


def build(ctx: AppContext) -> list:
    ws = ctx.workspace
    gr.Markdown("### Import a dataset\nA zip or files in LJSpeech layout (`metadata.csv` + `wavs/`), a CSV/TSV "
                "with audio and text columns, audio + `.txt` pairs, long recordings with `.srt`/`.vtt`, or long "
                "recordings alone (cut by voice activity). Audio: WAV, FLAC, MP3, OGG/Opus; M4A/AAC, WebM, WMA "
                "and AMR (phones, video sites) when ffmpeg is installed. Uploads are kept exactly as received "
                "under `raw/` (unless Keep a copy of the uploads is unticked below).")
    with gr.Row():
        files = gr.File(label="Upload", file_count="multiple", elem_id="dataset-upload")
        with gr.Column():
            path = gr.Textbox(label="...or a path inside the workspace", placeholder="uploads/my_corpus.zip",
                              info=("or a folder inside " + ", ".join(map(str, ctx.data_dirs)) + " (read there: "
                                    "the app was started with --data-dir)") if ctx.data_dirs else None)
            name = gr.Textbox(label="Dataset name", placeholder="my-voice", elem_id="dataset-name")
            name_said = gr.Markdown(elem_id="dataset-name-note")  # not the box's info: that renames its label
    # choices on view, not dropdowns: tabbing out of the name opened the Format list over the name, and the
    # frontend's box cut its choice under its arrow
    with gr.Row():
        fmt = gr.Radio(list(datasets.FORMATS), value="auto", label="Format", elem_id="dataset-format",
                       info="auto: told from the files; name one when it guesses wrong")
        frontend = gr.Radio(list(FRONTENDS), value="phoneme", label="What the model reads (text frontend)",
                            elem_id="dataset-frontend",
                            info="the rules say each word as Amharic is spoken, numbers and abbreviations read "
                                 "out; letters or word pieces need more data")
    with gr.Accordion("CSV columns (chosen automatically unless the header is ambiguous)", open=False) as csv_box:
        csv_info = gr.Markdown()
        with gr.Row():
            audio_col = gr.Dropdown([], label="Audio column", allow_custom_value=True)
            text_col = gr.Dropdown([], label="Text column", allow_custom_value=True)
            speaker_col = gr.Dropdown([], label="Speaker column (optional)", allow_custom_value=True)
    with gr.Row():  # the size choices: the disk line below redraws with them
        half_mels = gr.Checkbox(False, label="Mel cache at half precision", elem_id="dataset-half-mels",
                                info="halves the largest part on disk; training reads it back within 0.01")
        keep_uploads = gr.Checkbox(True, label="Keep a copy of the uploads", elem_id="dataset-keep-uploads",
                                   info="needed to prepare again with other settings; untick to delete it once the "
                                        "clips are made")
    with gr.Row():
        prepare_btn = gr.Button("Prepare", variant="primary", elem_id="dataset-prepare")
        cancel_btn = gr.Button("Cancel")
    disk_info = gr.Markdown(elem_id="dataset-disk")  # what preparing will take on disk, against the free space
    log = gr.Textbox(label="Log", lines=8, max_lines=20, elem_id="dataset-log", elem_classes=["log-box"])

    gr.Markdown("### Review")
    with gr.Row():
        dataset = dataset_picker(ws, elem_id="dataset-pick")
        show_all = gr.Checkbox(label="Show every row, not only flagged ones")
        refresh = gr.Button("Refresh")
        recheck_btn = gr.Button("Re-check")
    summary = gr.Markdown(elem_id="dataset-summary")
    with gr.Row():
        # no fixed height: a fixed one cuts off the legend under the plot
        hist = gr.BarPlot(x="seconds", y="clips", sort="x", y_lim=[0, None], title="Clip durations",
                          elem_id="dataset-hist")
        # both axes from 0 until rate_limits come, in an update after the points' (limits.change): Gradio (6.31)
        # sets an update's limits before its value and redraws with the points the plot held before
        rate = gr.ScatterPlot(x="duration", y="chars_per_s", color="status", title="Speaking rate", x_lim=[0, None],
                              y_lim=[0, None],
                              x_title="clip length (s)", y_title="letters a second", color_map=STATUS_COLORS,
                              color_title="", elem_id="dataset-rate")
    table = gr.Dataframe(headers=TABLE_COLUMNS, interactive=False, wrap=True, label="Rows to review (click one)",
                         column_widths=["10%", "16%", "8%", "8%", "8%", "8%", "20%", "22%"],
                         elem_id="dataset-flagged")
    with gr.Row():
        prev_btn = gr.Button("< Previous page", size="sm", elem_id="dataset-prev")
        page = gr.Number(1, label="Page", precision=0, minimum=1, elem_id="dataset-page", scale=0, min_width=90)
        next_btn = gr.Button("Next page >", size="sm", elem_id="dataset-next")
        page_info = gr.Markdown(elem_id="dataset-page-info")
        export_btn = gr.Button("Download every row (CSV)", size="sm", elem_id="dataset-export")
        export_file = gr.File(label="The dataset's rows", visible=False, elem_id="dataset-export-file")
    with gr.Row():
        row_id = gr.Textbox(label="Row", interactive=False)
        player = gr.Audio(label="Clip", type="filepath", interactive=False, elem_id="dataset-clip")
    text = gr.Textbox(label="Transcript (edit, then Save text)")
    with gr.Row():
        keep_btn = gr.Button("Keep")  # the order of the transcript review's buttons: one habit for both panels
        save_btn = gr.Button("Save text")
        exclude_btn = gr.Button("Exclude", elem_id="dataset-exclude")
    with gr.Accordion("A new take of this row: record it or upload it", open=False, elem_id="dataset-take-panel"):
        take = gr.Audio(label="New take", sources=["upload", "microphone"], type="filepath", elem_id="dataset-take")
        take_btn = gr.Button("Replace the row's recording", elem_id="dataset-take-replace")
        gr.Markdown("The recording the row was made of is kept, hidden beside it; the clip is made again from the "
                    "take, and a Keep or Exclude of the old one is cleared. The transcript stays.")
    status = gr.Markdown(elem_id="dataset-status")
    with gr.Accordion("Delete the dataset shown", open=False, elem_id="dataset-delete-panel"):
        gr.Markdown("Removes the dataset's folder: its uploads, clips and reviews. Runs trained on it keep their "
                    "checkpoints, and they and their exported voices go on speaking; they cannot resume.")
        with gr.Row():
            delete_confirm = gr.Checkbox(False, label="yes, delete the dataset shown", elem_id="dataset-delete-confirm")
            delete_btn = gr.Button("Delete dataset", variant="stop", elem_id="dataset-delete")
        delete_msg = gr.Markdown(elem_id="dataset-delete-msg")
    # a new stamp each time a prepare remakes the dataset already picked: the picker's value does not change then,
    # so its .change (which clears the picked rows and reloads the transcript lists) would not fire
    prepared = gr.State()
    # a new stamp each time a row decision is saved, here or in the transcript panel: both panels redraw from it, so
    # neither says "40 of 42 clips" or shows a decision column from before the change
    decided = gr.State()
    limits = gr.State()  # both plots' axes (plot_axes), sent to them when they change

    # ---- wiring
    def on_upload(f, p):
        info = inspect_upload(ws, f, p, ctx.data_dirs)
        if not info:
            return gr.update(), gr.update(), gr.update(), "", gr.update()
        cols = [str(c) for c in info["columns"]]
        note = ("**Choose the audio and text columns: the header is ambiguous.**" if info["ambiguous"]
                else f"Detected {info['rows']} rows.")
        return (gr.update(choices=cols, value=info["audio"]), gr.update(choices=cols, value=info["text"]),
                gr.update(choices=[""] + cols, value=info["speaker"] or ""), note, gr.update(open=info["ambiguous"]))

    gr.on([name.input, name.blur, name.submit], lambda n: name_note(ws, n) or "", name, name_said,
          show_progress="hidden", trigger_mode="always_last")
    files.change(on_upload, [files, path], [audio_col, text_col, speaker_col, csv_info, csv_box], api_name="dataset_inspect")
    gr.on([files.change, path.submit, path.blur, half_mels.change, keep_uploads.change],
          lambda f, p, h, k: disk_line(ws, f, p, ctx.data_dirs, h, k), [files, path, half_mels, keep_uploads],
          disk_info, api_name="dataset_disk")

    def on_prepare(f, p, n, fm, fe, a, t, s, h, k, progress=gr.Progress()):
        """(log, upload box, path): once prepared, the box and the path are emptied, for the next dataset starts
        from nothing (a refusal leaves them, to try again)."""
        for said in run_prepare(ws, f, p, n, fm, fe, a, t, s, progress, ctx.data_dirs, h, k):
            yield said, gr.update(), gr.update()
        yield said, None, ""

    def on_view(n, everything, pg=1):
        return plot_updates(*load_view(ws, n, everything, pg))

    def on_prepared(n):  # a failed import left no dataset of that name: the one shown stays
        names = ws.list_datasets()
        return gr.update(choices=names, value=n) if n in names else gr.update(choices=names)

    def on_made(n, shown):  # the picker as on_prepared; a new stamp when the dataset picked was made again
        again = n == shown and n in ws.list_datasets()
        return on_prepared(n), ((n, time.time_ns()) if again else gr.update())

    view_outputs = [summary, hist, rate, table, page, page_info, limits]
    limits.change(lambda axes: (gr.update(**axes["rate"]), gr.update(**axes["hist"])), limits, [rate, hist],
                  show_progress="hidden")
    on_view = says_errors(on_view, view_outputs, summary)  # a broken manifest is said in the summary
    prep = prepare_btn.click(says_errors(on_prepare, [log, files, path], log, log=True),
                             [files, path, name, fmt, frontend, audio_col, text_col, speaker_col, half_mels,
                              keep_uploads], [log, files, path],
                             api_name="dataset_prepare")
    prep.then(on_made, [name, dataset], [dataset, prepared]).then(on_view, [dataset, show_all], view_outputs)
    prep.then(lambda n: name_note(ws, n) or "", name, name_said, show_progress="hidden")  # "a new dataset" no more
    # the page turns; any other redraw keeps the page shown (a decision saved on page 40 stays on page 40)
    shown = [dataset, show_all, page]
    prev_btn.click(lambda n, e, p: on_view(n, e, max(1, int(p or 1) - 1)), shown, view_outputs)
    next_btn.click(lambda n, e, p: on_view(n, e, int(p or 1) + 1), shown, view_outputs)
    page.submit(on_view, shown, view_outputs, api_name="dataset_page")
    export_btn.click(says_errors(lambda n: (gr.update(value=str(export_table(ws, n)), visible=True), ""),
                                 [export_file, page_info], page_info), dataset, [export_file, page_info])
    cancel_btn.click(None, None, None, cancels=[prep])
    dataset.change(on_view, [dataset, show_all], view_outputs, api_name="dataset_view")
    # the picked row belongs to the dataset it was picked in: another dataset, or the same prepared again, starts
    # with none picked
    # the status line too: it spoke of a row of the dataset shown before, or counted its clips before the prepare
    # and a take in the new-take box: it was of that row
    gr.on([dataset.change, prepared.change], lambda: ("", None, "", "", None), None,
          [row_id, player, text, status, take], show_progress="hidden")
    show_all.change(on_view, [dataset, show_all], view_outputs)
    refresh.click(on_prepared, dataset, dataset).then(on_view, shown, view_outputs)
    def on_recheck(n, progress=gr.Progress()):  # every row's text checked again: minutes at 200k rows, shown
        return f"Re-checked: {datasets.recheck(ws, n, lambda f, d: progress(f, desc=d))['flagged_clips']} flagged row(s)"

    recheck_btn.click(says_errors(on_recheck, [status], status), dataset, status, api_name="dataset_recheck").then(
        on_view, shown, view_outputs)

    def on_delete(n, confirmed):  # unconfirmed: says which runs were trained on it, and how to confirm
        if not n:
            raise StudioError("Pick the dataset to delete first.")
        said = deletion.delete_dataset(ws, n, confirmed=bool(confirmed), how_to_confirm="tick 'yes, delete the "
                                       "dataset shown' and press Delete dataset again")
        return said, dataset_pick(ws, None), False

    deleted = [delete_msg, dataset, delete_confirm]
    delete_btn.click(says_errors(on_delete, deleted, delete_msg), [dataset, delete_confirm], deleted,
                     api_name="dataset_delete").then(on_view, [dataset, show_all], view_outputs)

    def on_select(n, frame, evt: gr.SelectData):  # the status line is about the row picked before: cleared
        return (*select_row(ws, n, str(frame.iloc[evt.index[0]]["id"])), "", None)  # a take was of the row before

    def on_page_load(n):  # a reload or a second browser sees the workspace as it is now
        shown = dataset_pick(ws, n)
        return (shown, *plot_updates(*load_view(ws, shown_name(shown, n))))

    picked = [row_id, player, text, status, take]  # a row gone since the table was drawn is said in the status line
    table.select(says_errors(on_select, picked, status, what="Picking the row"), [dataset, table], picked)
    for btn, action in ((exclude_btn, "exclude"), (keep_btn, "keep"), (save_btn, "text")):
        btn.click(says_errors(lambda n, r, t, a=action: (edit_row(ws, n, r, a, t), time.time_ns()), [status, decided],
                              status), [dataset, row_id, text], [status, decided], api_name=f"dataset_{action}")
    def on_take(n, r, t, progress=gr.Progress()):  # the row plays its new clip; the table redraws from `decided`
        said = retake_row(ws, n, r, t, progress)
        return said, None, select_row(ws, n, r)[1], time.time_ns()

    retaken = [status, take, player, decided]
    take_btn.click(says_errors(on_take, retaken, status), [dataset, row_id, take], retaken,
                   api_name="dataset_replace_recording")
    decided.change(on_view, shown, view_outputs, show_progress="hidden")
    lists_on_load = transcripts.build(ctx, dataset, prepared, decided)  # transcripts to check and machine drafts
    def on_open(n, everything, pg=1):
        """Opened again: what another tab did meanwhile (music removal accepted, a check's exclusions) is shown. The
        page's first select, as it mounts, carries no dataset yet: answered after the page load on a busy machine, it
        drew "Choose or prepare a dataset." over the dataset the picker shows; it changes nothing."""
        return on_view(n, everything, pg) if n else [gr.skip()] * len(view_outputs)

    return [(on_page_load, [dataset], [dataset, *view_outputs]), lists_on_load, (on_open, shown, view_outputs, "open")]
