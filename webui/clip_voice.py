"""The Inference tab's OmniVoice section: a voice from one clip with no training (a dataset row's clip and
transcript, or an uploaded clip and a typed one), made by utils.omnivoice.clip_voice and then picked in the tab's
voice picker, ready for Speak. Both licences and their checkbox come before any download; Install OmniVoice puts
its packages in when they are missing. No torch here."""
from __future__ import annotations

import gradio as gr

from utils import inference
from utils.events import StudioError
from utils.omnivoice import about
from utils.omnivoice.clip_voice import install_runtime, make_clip_voice, no_row_here, row_clip, suggest_rows
from webui.components import dataset_pick, dataset_picker, says_errors
from webui.context import AppContext

TITLE = "OmniVoice: a voice from one clip (no training)"
FROM_ROW, FROM_FILE = "A row of a dataset", "An audio file"
INTRO = (f"Pick one clip of {about.GOOD_PROMPT_SECONDS[0]:g}-{about.GOOD_PROMPT_SECONDS[1]:g} s where one person "
         "speaks clearly, and exactly what is said in it: OmniVoice then speaks any Amharic text in that voice, with "
         f"no training. It needs its base (about {about.SIZE_MB / 1000:.1f} GB) once: the line under the licences "
         "says whether it is here, can be downloaded or must be copied in. A GPU speaks in "
         "seconds; a CPU is slow: about 8 s of computing for each second of speech on 2 cores, at 8 passes over "
         "the sentence (the CPU default; a GPU makes 32, cleaner), so try short sentences there.")
LICENCES = (f"**Licences of the OmniVoice base.** {about.BASE_LICENCE}.\n\n{about.CODEC_LICENCE}.\n\n"
            "A voice made here carries both licences in its folder (LICENSE.txt).")


# ------------------------------------------------------------------------------- handlers
def readiness(ws) -> tuple[str, bool, bool]:
    """(what is in place and what is missing, whether the Install button shows, whether the licence box shows: only
    where Make voice would download the base; offline it was ticked for a download that could not happen). Without a
    base here it asks whether the hub can be reached (3 s at most, kept a minute): offline, the curator learned it only
    after filling the form."""
    from utils.omnivoice.base import find_base, obtainable
    from utils.omnivoice.runtime import installed, missing_message

    here = find_base(ws) is not None
    can_fetch, why = (False, "") if here else obtainable(ws)
    if not installed():
        return missing_message(), True, can_fetch
    if here:
        return "OmniVoice is installed and its base is on this machine: no download is needed.", False, False
    if not can_fetch:
        return f"OmniVoice is installed. {why}", False, False
    return (f"OmniVoice is installed. Its base is not on this machine yet: **Make voice** downloads it once (about "
            f"{about.SIZE_MB / 1000:.1f} GB) after you tick the licence box."), False, True


def row_choices(ws, dataset: str | None):
    """The dataset's rows that suit a clip, as a picker (id, length and text in each label), nearest 8 s first."""
    if not dataset:
        return gr.update(choices=[], value=None, info="pick a dataset first")
    try:
        rows = suggest_rows(ws, dataset)
    except StudioError as exc:
        return gr.update(choices=[], value=None, info=str(exc))
    choices = [(f"{r['id']} · {r['duration']:.1f} s · {r['text'][:70]}", r["id"]) for r in rows]
    info = f"{len(rows)} kept row(s) of 5-15 s with a transcript, nearest 8 s first" if rows else no_row_here(ws, dataset)
    return gr.update(choices=choices, value=choices[0][1] if choices else None, info=info)


def row_picked(ws, dataset: str | None, row: str | None, name: str):
    """(the row's transcript to check, its clip to hear, a voice name when none is typed yet)."""
    if not dataset or not row:
        return gr.update(), None, gr.update()
    try:
        clip, text = row_clip(ws, dataset, row)
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    return text, str(clip), gr.update() if (name or "").strip() else f"{dataset}-{row}"


def make(ws, source, dataset, row, upload, transcript, name, accept):
    """Yield (the lines so far, the voice picker, the readiness line, the licence box): at the end the picker offers
    the new voice and shows it, ready for Speak."""
    from_row, name = source == FROM_ROW, (name or "").strip()
    if not from_row and not upload:
        raise gr.Error("Upload a clip of 5-15 s first (or pick a row of a dataset).")
    given = dict(dataset=dataset or "", row=row or "") if from_row else dict(clip=upload)
    lines = []
    for event in make_clip_voice(ws, name, text=transcript, accept_licence=bool(accept), **given):
        lines.append(event.format())
        yield "\n".join(lines), gr.update(), gr.update(), gr.update()
    lines.append(f"{name} is picked above: type a text and press Speak.")
    line, _, asks = readiness(ws)
    yield "\n".join(lines), gr.update(choices=inference.voice_choices(ws), value=name), line, gr.update(visible=asks)


def install(ws):
    """Yield (the lines so far, the readiness line, the Install button, the licence box)."""
    lines = []
    for event in install_runtime():
        lines.append(event.format())
        yield "\n".join(lines), gr.update(), gr.update(), gr.update()
    line, missing, asks = readiness(ws)
    yield "\n".join(lines), line, gr.update(visible=missing), gr.update(visible=asks)


# ----------------------------------------------------------------------------------- layout
def build(ctx: AppContext, voice: gr.Dropdown) -> None:
    """The section, inside the Inference tab; a voice it makes is picked in `voice`."""
    ws = ctx.workspace
    line, missing, asks = readiness(ws)
    with gr.Accordion(TITLE, open=False, elem_id="clip-voice") as section:
        gr.Markdown(INTRO)
        gr.Markdown(LICENCES, elem_id="clip-voice-licences")
        status = gr.Markdown(line, elem_id="clip-voice-status")
        install_btn = gr.Button("Install OmniVoice", visible=missing, elem_id="clip-voice-install")
        source = gr.Radio([FROM_ROW, FROM_FILE], value=FROM_ROW, label="The clip", elem_id="clip-voice-source")
        with gr.Row() as row_box:
            dataset = dataset_picker(ws, value=None, scale=1, elem_id="clip-voice-dataset")
            row = gr.Dropdown([], label="Row (the ones that suit best first)", scale=3, elem_id="clip-voice-row")
            heard = gr.Audio(label="The row's clip", type="filepath", interactive=False, scale=2)
        upload = gr.Audio(label=f"Clip ({about.GOOD_PROMPT_SECONDS[0]:g}-{about.GOOD_PROMPT_SECONDS[1]:g} s)",
                          sources=["upload"], type="filepath", visible=False, elem_id="clip-voice-upload")
        transcript = gr.Textbox(label="Transcript: exactly what is said in the clip", lines=2,
                                elem_id="clip-voice-text", info="a row's own text is filled in: check it")
        with gr.Row():
            name = gr.Textbox(label="Voice name", placeholder="my-voice", elem_id="clip-voice-name")
            accept = gr.Checkbox(label="I accept both licences above (non-commercial use): needed only to "
                                 "download the base", value=False, visible=asks, elem_id="clip-voice-licence")
        make_btn = gr.Button("Make voice", variant="primary", elem_id="clip-voice-make")
        log = gr.Textbox(label="What happened", lines=4, interactive=False, elem_id="clip-voice-log")

    source.change(lambda s: (gr.update(visible=s == FROM_ROW), gr.update(visible=s == FROM_FILE)), source,
                  [row_box, upload], show_progress="hidden")
    section.expand(lambda d: dataset_pick(ws, d), dataset, dataset, show_progress="hidden")
    dataset.change(lambda d: row_choices(ws, d), dataset, row, api_name="clip_voice_rows")
    row.change(lambda d, r, n: row_picked(ws, d, r, n), [dataset, row, name], [transcript, heard, name],
               show_progress="hidden")

    def on_install():
        yield from install(ws)

    def on_make(*values):
        yield from make(ws, *values)

    installed = [log, status, install_btn, accept]
    install_btn.click(says_errors(on_install, installed, log, log=True), None, installed,
                      api_name="clip_voice_install")
    made = [log, voice, status, accept]
    make_btn.click(says_errors(on_make, made, log, log=True), [source, dataset, row, upload, transcript, name, accept],
                   made, api_name="clip_voice")
