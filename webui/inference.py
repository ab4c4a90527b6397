"""Tab: hear a voice (streamed as it is made), compare two checkpoints, speak a text file, export a voice.

Every handler turns component values into calls of utils.inference; no torch here.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import gradio as gr
import numpy as np

from utils import inference
from utils.events import StudioError
from utils import families
from utils.inference.speech import engine_steps
from utils.vocoder.default import DEFAULT_NAME
from webui import clip_voice
from webui.components import cut_at_word, says_errors
from utils.workspace import stamped_name
from webui.context import AppContext

AUTO_VOCODER = "auto"  # the voice's own vocoder, else the workspace's default (public Vocos), else Griffin-Lim
NO_VOICE = ("No voice yet: train a run on the Training tab (its checkpoints and exported voices appear here), or "
            "make one from a single clip below (OmniVoice, no training).")
ROW_COLUMNS = ["#", "text", "normalized", "phonemes (what the model spoke)", "skipped symbols"]
DEVICE_LABELS = [("Auto (GPU unless a training run holds it)", "auto"), ("CPU", "cpu"), ("GPU (share with training)", "cuda")]


# ------------------------------------------------------------------------------- handlers
def _int16(wave: np.ndarray) -> np.ndarray:
    return (np.clip(wave, -1, 1) * 32767).astype(np.int16)


def _vocoder(value: str | None) -> str | None:
    return None if value in (None, "", AUTO_VOCODER) else value


def _rows_table(rows: list[dict], start: int = 1) -> list[list]:
    return [[start + i, r["text"], r["normalized"], r["phonemes"], r["skipped"]] for i, r in enumerate(rows)]


def _speakers_or_none(ctx: AppContext, voice: str | None) -> list[str]:
    try:
        return inference.speakers(ctx.workspace, voice) if voice else []
    except StudioError:
        return []


def engine_settings(engine: str) -> tuple:
    """(steps, temperature) updates for a model family: its own default steps and help; a family whose starting noise
    is always unit (F5) ignores the temperature, and one without a sampler (MMS) the steps, so their sliders are
    hidden rather than left to do nothing."""
    family = families.get(engine if engine in families.names() else None)
    return (gr.update(value=engine_steps(family.NAME), info=family.STEPS_HELP, visible=family.USES_STEPS),
            gr.update(visible=family.USES_TEMPERATURE))


def speaker_choices(ctx: AppContext, voice: str | None):
    names = _speakers_or_none(ctx, voice)
    return gr.update(choices=names, value=names[0] if names else None, visible=len(names) > 1)


def vocoder_choices(ctx: AppContext) -> list[tuple[str, str]]:
    """auto (saying what it means here), vocoders trained here, supplied ones, the public default, Griffin-Lim."""
    return [(inference.auto_vocoder_label(ctx.workspace), AUTO_VOCODER)] + inference.vocoder_menu(ctx.workspace)


def can_stream_audio() -> bool:
    """Gradio encodes streamed audio with ffmpeg; without it the player gets the whole speech at the end."""
    return shutil.which("ffmpeg") is not None


# The streamed player shows what its playlist had fetched when speaking ends, seconds short of the speech until
# its next reload. Once the stream has played out (or never started: autoplay refused), a player of the whole WAV
# takes its place, so nothing playing is cut off; another Speak meanwhile drops it (null).
AFTER_THE_STREAM_JS = """async (wav) => {
  const player = () => document.querySelector('#inference-audio audio.standard-player');
  const first = player();
  if (!wav || !first || !first.src || first.classList.contains('hidden')) return [null];
  const src = first.src, since = Date.now();
  for (;;) {
    await new Promise(r => setTimeout(r, 250));
    const now = player();
    if (!now || now.src !== src) return [null];
    if (now.ended || (now.paused && now.currentTime === 0 && Date.now() - since > 3000)) return [wav];
  }
}"""


def whole_speech(wav) -> tuple:
    """(streamed player, whole player): the spoken WAV, exact in length and to replay, in place of the stream. A
    player of its own, as a player's autoplay is fixed when it is made: the stream's would play the WAV again."""
    return (gr.update(visible="hidden"), gr.update(value=wav, visible=True)) if wav else (gr.update(), gr.update())


def speak(ctx: AppContext, voice, speaker, text, steps, temperature, speed, vocoder, device, seed, stream=True):
    """Stream audio chunks to the player (`stream`; else the whole speech at the end); at the end the WAV
    file, spectrogram, info and the spoken text."""
    ws = ctx.workspace
    try:
        chunks = inference.speak(ws, voice, text, speaker=speaker or None, steps=int(steps),
                                 temperature=float(temperature), length_scale=1.0 / float(speed),
                                 vocoder=_vocoder(vocoder), device=device or "auto",
                                 seed=None if seed is None or int(seed) < 0 else int(seed))
        made = []
        for chunk in chunks:
            made.append(chunk)
            yield ((chunk.sample_rate, _int16(chunk.wave)) if stream else gr.update(), gr.update(), gr.update(),
                   f"Speaking… {chunk.done}/{chunk.total} sentences", gr.update())
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    from utils.audio import save_audio

    wave, sr, info = inference.join_chunks(made)
    out = ws.root / "exports" / "speech" / stamped_name("speech", ".wav")
    save_audio(out, wave, sr)
    yield (gr.update() if stream else (sr, _int16(wave)), str(out), inference.spectrogram_image(info["mels"]),
           inference.describe(info), _rows_table(info["rows"]))


def compare(ctx: AppContext, voice_a, voice_b, text, speaker, steps, temperature, speed, vocoder, seed):
    """The same text, settings and starting noise through two checkpoints."""
    if not voice_a or not voice_b:
        raise gr.Error("Pick two voices or checkpoints to compare.")
    outputs = []
    for voice in (voice_a, voice_b):
        names = _speakers_or_none(ctx, voice)
        try:
            wave, sr, info = inference.synthesize(
                ctx.workspace, voice, text, speaker=speaker if speaker in names else None, steps=int(steps),
                temperature=float(temperature), length_scale=1.0 / float(speed), vocoder=_vocoder(vocoder),
                seed=None if seed is None or int(seed) < 0 else int(seed))
        except StudioError as exc:
            raise gr.Error(f"{voice}: {exc}") from None
        outputs += [(sr, _int16(wave)), inference.describe(info)]
    return tuple(outputs)


def speak_file(ctx: AppContext, voice, speaker, upload, steps, temperature, speed, vocoder, device, seed,
               progress=gr.Progress()):
    """A text file -> a zip of WAVs (one per line) with a progress bar and a report of failed lines."""
    if not upload:
        raise gr.Error("Upload a UTF-8 text file: one sentence or paragraph per line ('id|text' names the WAV).")
    result, log = None, []
    try:
        events = inference.speak_file(ctx.workspace, voice, upload, vocoder=_vocoder(vocoder), device=device or "auto",
                                      speaker=speaker or None, steps=int(steps), temperature=float(temperature),
                                      length_scale=1.0 / float(speed),
                                      seed=None if seed is None or int(seed) < 0 else int(seed))
        for event in events:
            if event.total:
                progress(event.fraction, desc=cut_at_word(event.format()))
            if event.level != "info":
                log.append(f"- {event.message}")
            result = event.result or result
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    report = (f"**{result['written']}** WAV(s) of voice `{result['voice']}` in `{result['zip'].name}` "
              f"(made in {result['seconds']:.1f} s).")
    if result["failed"]:
        report += f"\n\n{len(result['failed'])} line(s) could not be spoken:\n" + "\n".join(log[:50])
    return str(result["zip"]), report


def run_of(ws, source: str | None) -> str:
    """The run a checkpoint or run name belongs to ("" for an exported voice): an export left unnamed takes its
    name, as the Training tab's Export as voice does."""
    parts = Path(source or "").parts
    if len(parts) > 1 and parts[0] == "runs":
        return parts[1]
    return source if source and len(parts) == 1 and (ws.runs / source).is_dir() else ""


def export(ctx: AppContext, source, name, vocoder, overwrite, onnx, onnx_steps):
    name = (name or "").strip() or run_of(ctx.workspace, source)
    try:
        folder = inference.export_voice(ctx.workspace, source, name, vocoder=_vocoder(vocoder),
                                        overwrite=bool(overwrite), onnx=bool(onnx), onnx_steps=int(onnx_steps))
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    rel = folder.relative_to(ctx.workspace.root)
    zip_path = ctx.workspace.root / "exports" / f"{name}.zip"
    files = ", ".join(sorted(p.name for p in folder.iterdir()))
    return (f"Exported to `{rel}` ({files}); pick **{name}** above to use it, or download the zip."
            f"{inference.same_name_note(ctx.workspace, name)}\n\n"
            + (folder / "README.md").read_text(encoding="utf-8").split("## Use it", 1)[-1]), str(zip_path)


def add_vocoder(ctx: AppContext, files, name):
    try:
        folder = inference.import_vocoder(ctx.workspace, files or [], name)
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    rel = str(folder.relative_to(ctx.workspace.root))
    return f"Added `{rel}`: pick it as the vocoder.", gr.update(choices=vocoder_choices(ctx), value=rel)


STOPPED = "Stopped: what was spoken so far played above; press **Speak** to start again."


def import_voice_zip(ctx: AppContext, file):
    """The zip Export voice wrote, in this studio or another: unpacked into voices/ and picked to speak."""
    from utils.inference.export import import_voice

    if not file:
        raise StudioError("Upload a voice zip (what Export voice writes) first.")
    name, said = import_voice(ctx.workspace, Path(file if isinstance(file, str) else file.name))
    return (f"{said} It is picked above (Voice or checkpoint): type Amharic and press **Speak**.",
            gr.update(choices=inference.voice_choices(ctx.workspace), value=name))


# ----------------------------------------------------------------------------------- layout
def build(ctx: AppContext):
    ws = ctx.workspace
    gr.Markdown("Type Amharic, pick a voice (an exported voice or any training checkpoint) and press **Speak**: "
                "the audio starts playing after the first sentence. The line under the pickers says which vocoder "
                "makes the sound.")
    voices = inference.voice_choices(ws)
    first = inference.default_voice(ws)  # the active run's best checkpoint (else its newest), else the newest
    first_speakers = _speakers_or_none(ctx, first)
    first_engine = inference.voice_engine(ctx.workspace, first)
    with gr.Row():
        voice = gr.Dropdown(label="Voice or checkpoint", choices=voices, value=first, scale=3,
                            elem_id="inference-voice", info="" if voices else NO_VOICE)
        speaker = gr.Dropdown(label="Speaker", choices=first_speakers, scale=1, visible=len(first_speakers) > 1,
                              value=first_speakers[0] if first_speakers else None, elem_id="inference-speaker")
        vocoder = gr.Dropdown(label="Vocoder", value=AUTO_VOCODER, scale=2, choices=vocoder_choices(ctx),
                              elem_id="inference-vocoder")
        reload = gr.Button("↻ Refresh", scale=0, min_width=90)
    # the vocoder that will speak the voice picked: its licence, its download, or why it buzzes
    vocoder_status = gr.Markdown(inference.vocoder_note(ws, first, AUTO_VOCODER), elem_id="vocoder-status")
    clip_voice.build(ctx, voice)  # OmniVoice: a voice from one clip, picked above when made
    text = gr.Textbox(label="Amharic text", lines=4, value=inference.SAMPLE_SENTENCES[0], elem_id="inference-text",
                      info="Any length: split into sentences at ። ? ! ፧, at line breaks and at a full stop "
                           "(not an abbreviation's, as in ዓ.ም.), spoken in batches, joined with pauses.")
    gr.Examples(examples=[[s] for s in inference.SAMPLE_SENTENCES], inputs=[text], label="Sample sentences")
    with gr.Row():
        steps = gr.Slider(1, 50, value=engine_steps(first_engine), step=1, label="Steps (quality vs. speed)",
                          info=families.get(first_engine).STEPS_HELP, elem_id="inference-steps",
                          visible=families.get(first_engine).USES_STEPS)
        temperature = gr.Slider(0.0, 1.5, value=inference.DEFAULT_TEMPERATURE, step=0.01,
                                label="Temperature (variation)", visible=families.get(first_engine).USES_TEMPERATURE,
                                elem_id="inference-temperature",
                                info="higher: livelier, less even speech; lower: flatter, more the same every time")
        engine = gr.State(first_engine)  # the engine the steps and temperature are set for
        speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label="Speed")
    with gr.Accordion("More settings", open=False):
        with gr.Row():
            device = gr.Radio(DEVICE_LABELS, value="auto", label="Run on",
                              info="Auto keeps off a GPU that a training run is using, so the run is not slowed "
                                   "or pushed out of memory.")
            seed = gr.Number(value=0, precision=0, label="Seed (-1: different every time)")
    with gr.Row():
        go = gr.Button("Speak", variant="primary", elem_id="inference-speak")
        stop = gr.Button("Stop", variant="stop", scale=0, min_width=90)
    streaming = can_stream_audio()
    audio = gr.Audio(label="Speech" if streaming else "Speech (plays when the whole text is spoken: install ffmpeg "
                     "to hear each sentence as soon as it is made)", streaming=streaming, autoplay=True,
                     interactive=False, elem_id="inference-audio")
    whole = gr.Audio(label="Speech", interactive=False, visible=False, elem_id="inference-whole")  # see whole_speech
    with gr.Row():
        # not interactive: the box is an input of whole_speech, which made it an upload box ("Drop File Here")
        wav = gr.File(label="Download WAV (after Speak)", interactive=False, elem_id="inference-wav", scale=1)
        spectrogram = gr.Image(label="Spectrogram (log-mel)", type="numpy", interactive=False, scale=3,
                               elem_id="inference-spectrogram")
    info = gr.Markdown(elem_id="inference-info")
    spoken = gr.Dataframe(headers=ROW_COLUMNS, label="What was spoken: fix a wrong pronunciation in the Amharic "
                          "G2P tab's dictionary", wrap=True, interactive=False, elem_id="inference-rows",
                          # fixed shares of the width: left to itself, the table gave the phonemes more than the
                          # page (cut off) and 'skipped symbols' a sliver (its header a tall letter column)
                          column_widths=["4%", "22%", "26%", "36%", "12%"])

    with gr.Accordion("A/B: the same text from two voices or checkpoints, side by side", open=False):
        ab_text = gr.Textbox(label="Text both speak", lines=2, value=text.value, elem_id="inference-ab-text",
                             info="starts as the text above and follows it until you edit it here; both speak it "
                                  "with the same settings and starting noise, so any difference is the model's")
        ab_copied = gr.State(text.value)  # the main text last copied here: a box still showing it was not edited
        with gr.Row():
            voice_a = gr.Dropdown(label="A", choices=voices, value=first, elem_id="inference-ab-a")
            voice_b = gr.Dropdown(label="B", choices=voices, value=inference.other_voice(ws, first, [v for _, v in voices]),
                                  elem_id="inference-ab-b")
        ab_go = gr.Button("Compare", elem_id="inference-compare")
        with gr.Row():
            with gr.Column():
                audio_a = gr.Audio(label="A", type="numpy", interactive=False, elem_id="inference-audio-a")
                info_a = gr.Markdown()
            with gr.Column():
                audio_b = gr.Audio(label="B", type="numpy", interactive=False, elem_id="inference-audio-b")
                info_b = gr.Markdown()

    with gr.Accordion("Batch: a text file to a zip of WAVs", open=False):
        with gr.Row():
            batch_file = gr.File(label="Text file (UTF-8, one line per WAV; 'id|text' names it)",
                                 file_types=[".txt", ".csv", ".tsv"], elem_id="inference-batch-file")
            batch_zip = gr.File(label="WAVs (zip)", interactive=False, elem_id="inference-batch-zip")
        batch_go = gr.Button("Speak every line", elem_id="inference-batch-go")
        batch_report = gr.Markdown(elem_id="inference-batch-report")

    with gr.Accordion("Export a voice (folder + zip, optional ONNX)", open=False):
        with gr.Row():
            export_from = gr.Dropdown(label="Checkpoint or voice", choices=voices, value=first)
            export_name = gr.Textbox(label="Voice name", placeholder="left empty: the run's name (a checkpoint's export)",
                                     elem_id="inference-export-name")
            export_vocoder = gr.Dropdown(label="Vocoder to include", value=AUTO_VOCODER, choices=vocoder_choices(ctx))
        with gr.Row():
            overwrite = gr.Checkbox(label="Overwrite a voice of that name", value=False)
            onnx = gr.Checkbox(label="Also export ONNX (the acoustic model, and the vocoder when one is included)",
                               value=False)
            onnx_steps = gr.Slider(2, 20, value=inference.DEFAULT_STEPS, step=1, label="ONNX flow steps (fixed)")
        export_btn = gr.Button("Export voice", elem_id="inference-export")
        export_zip = gr.File(label="Voice (zip)", interactive=False, elem_id="inference-export-zip")
        export_msg = gr.Markdown(elem_id="inference-export-msg")

    with gr.Accordion("Import a voice (a zip from Export voice, made here or in another studio)", open=False):
        with gr.Row():
            voice_zip = gr.File(label="Voice zip", file_types=[".zip"], elem_id="inference-import-zip")
            import_msg = gr.Markdown(elem_id="inference-import-msg")

    with gr.Accordion("Add Vocos weights (e.g. the public vocos-mel-24khz)", open=False):
        gr.Markdown("Upload `config.yaml` + `pytorch_model.bin` as published (or `model.safetensors` + "
                    "`config.json` from this app). They are checked, copied into the workspace's `vocoders/` and "
                    f"offered as a vocoder; named `{DEFAULT_NAME}`, they are the default. Weights load without "
                    "running code from the file.")
        with gr.Row():
            vocoder_files = gr.File(label="Vocos files", file_count="multiple")
            vocoder_name = gr.Textbox(label="Name", value=DEFAULT_NAME)
        vocoder_btn = gr.Button("Add vocoder")
        vocoder_msg = gr.Markdown()

    # ------------------------------------------------------------------------------- events
    def picked(current, auto, values) -> tuple:
        """(the voice to show, the one the tab picked by itself): the curator's pick while it exists; otherwise the
        default, which follows a run as it writes checkpoints (its newest best) until the curator picks another."""
        if current in values and current != auto:
            return current, auto
        default = inference.default_voice(ws)
        pick = default if default in values else (values[0] if values else None)
        return pick, pick

    def on_refresh(current, a, b, exported, chosen, auto=None):
        """Every voice picker as the workspace is now; A, B and the export keep the curator's pick while it exists,
        else take the voice shown above (B another one where there is one), as they do when the page is built. A
        value the tab chose by itself (`auto`: the page's built-in default of when the app started, then the run's
        newest best) is no pick: the export picker stayed on the app start's voice while the one above followed
        the run."""
        now = inference.voice_choices(ws)
        values = [v for _, v in now]
        pick, _ = picked(current, auto, values)

        def kept(value):
            return value if value in values and value != auto else None

        a_pick = kept(a) or pick
        b_pick = kept(b) or inference.other_voice(ws, a_pick, values)
        vocoders = vocoder_choices(ctx)
        return (gr.update(choices=now, value=pick, info="" if now else NO_VOICE), gr.update(choices=vocoders),
                speaker_choices(ctx, pick), gr.update(choices=now, value=a_pick), gr.update(choices=now, value=b_pick),
                gr.update(choices=now, value=kept(exported) or pick),
                gr.update(choices=vocoders), inference.vocoder_note(ws, pick, chosen))

    refresh_outputs = [voice, vocoder, speaker, voice_a, voice_b, export_from, export_vocoder, vocoder_status]
    pickers = [voice, voice_a, voice_b, export_from, vocoder]
    # what this browser has (voices, vocoder line, the voice the tab picked itself), so a tick only sends what changed
    shown = gr.State([[v for _, v in voices], vocoder_status.value, first])

    def on_tick(current, a, b, exported, chosen, before):  # a new checkpoint, or the fetched vocoder, shows up without a reload
        values = [v for _, v in inference.voice_choices(ws)]
        pick, auto = picked(current, before[2], values)
        now = [values, inference.vocoder_note(ws, pick, chosen), auto]
        if now == before and pick == current:
            return (*[gr.update()] * len(refresh_outputs), before)
        return (*on_refresh(current, a, b, exported, chosen, before[2]), now)

    gr.Timer(5.0).tick(on_tick, inputs=[*pickers, shown], outputs=[*refresh_outputs, shown], show_progress="hidden")
    reload.click(on_refresh, inputs=pickers, outputs=refresh_outputs, api_name="inference_refresh")
    voice.change(lambda v: speaker_choices(ctx, v), inputs=[voice], outputs=[speaker], api_name="inference_speakers")

    def on_vocoder(v, chosen, before):  # the line says what will speak this voice now, and the tick knows it is shown
        note = inference.vocoder_note(ws, v, chosen)
        return note, [before[0], note, before[2]]

    gr.on([voice.change, vocoder.change], on_vocoder, inputs=[voice, vocoder, shown], outputs=[vocoder_status, shown],
          show_progress="hidden")

    def on_engine(v, before):  # only a voice of the other engine resets the steps: a typed number stays otherwise
        now = inference.voice_engine(ctx.workspace, v)
        return (gr.update(), gr.update(), before) if now == before else (*engine_settings(now), now)

    voice.change(on_engine, inputs=[voice, engine], outputs=[steps, temperature, engine], show_progress="hidden")
    settings = [steps, temperature, speed, vocoder]
    def on_speak(*args):
        yield from speak(ctx, *args, stream=streaming)

    # a refusal (no voice, empty text, a vocoder that does not fit) stays written under the player, and the speech
    # of the text before goes: its sound, file, picture and table would read as this text's. The streamed player
    # goes too: emptied, it stays on 'pause 0:00 / 0:00' as if it were playing a stream that never comes
    spoken_outputs = [audio, wav, spectrogram, info, spoken]
    cleared = {audio: gr.update(value=None, visible=not streaming), wav: None, spectrogram: None, spoken: None}
    then = go.click
    if streaming:  # the streamed player comes back, empty, for the new stream; the last speech's whole WAV goes
        then = go.click(lambda: (gr.update(value=None, visible=True), gr.update(visible=False)), None, [audio, whole],
                        show_progress="hidden").then
    speaking = then(says_errors(on_speak, spoken_outputs, info, also=cleared),
                    inputs=[voice, speaker, text, *settings, device, seed], outputs=spoken_outputs, api_name="speak")
    if streaming:  # the streamed player held only what its playlist had fetched: the whole WAV once it has played
        speaking.success(whole_speech, inputs=[wav], outputs=[audio, whole], js=AFTER_THE_STREAM_JS,
                         show_progress="hidden", trigger_mode="always_last")
    # the voice spoken with is the curator's pick from now on: the picker no longer follows the run to its next best
    # checkpoint while this one's speech is on the page
    go.click(lambda before: [*before[:2], None], shown, shown, show_progress="hidden")
    # the line said "Speaking… 17/133 sentences" for good after a Stop, as if it went on
    stop.click(lambda: STOPPED, None, info, cancels=[speaking], show_progress="hidden")
    ab_outputs = [audio_a, info_a, audio_b, info_b]
    ab_go.click(says_errors(lambda *a: compare(ctx, *a), ab_outputs, info_a),
                inputs=[voice_a, voice_b, ab_text, speaker, *settings, seed], outputs=ab_outputs, api_name="compare")

    def on_text(main, ab, copied):  # the A/B box follows the main text until the curator edits it
        return (main, main) if ab == copied else (gr.update(), copied)

    text.change(on_text, [text, ab_text, ab_copied], [ab_text, ab_copied], show_progress="hidden")
    batch_go.click(says_errors(lambda v, s, f, st, te, sp, vo, d, se, progress=gr.Progress(): speak_file(
        ctx, v, s, f, st, te, sp, vo, d, se, progress), [batch_zip, batch_report], batch_report,
        also={batch_zip: None}),  # a refused batch takes the zip of the one before away, as Export does
        inputs=[voice, speaker, batch_file, *settings, device, seed], outputs=[batch_zip, batch_report],
        api_name="speak_file")
    # a refused export takes the zip of the one before away: left there, it read as this attempt's
    export_btn.click(says_errors(lambda *a: export(ctx, *a), [export_msg, export_zip], export_msg,
                                 also={export_zip: None}),
                     inputs=[export_from, export_name, export_vocoder, overwrite, onnx, onnx_steps],
                     outputs=[export_msg, export_zip], api_name="export_voice")
    voice_zip.upload(says_errors(lambda f: import_voice_zip(ctx, f), [import_msg, voice], import_msg),
                     inputs=[voice_zip], outputs=[import_msg, voice], api_name="import_voice")
    # the vocoder added is picked, so the line under the pickers follows it (on_vocoder)
    vocoder_btn.click(says_errors(lambda f, n: add_vocoder(ctx, f, n), [vocoder_msg, vocoder], vocoder_msg),
                      inputs=[vocoder_files, vocoder_name], outputs=[vocoder_msg, vocoder], api_name="add_vocoder")
    # a voice exported on the Training tab is offered as soon as this tab is opened, not after Refresh
    # at each page load too: the value built into the page is the default of when the app started
    ticked = [*refresh_outputs, shown]
    return [(on_tick, [*pickers, shown], ticked), (on_tick, [*pickers, shown], ticked, "open")]
