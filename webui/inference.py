"""Tab: Speaking text with a trained voice (and exporting a checkpoint as a voice).

Every handler turns component values into one call of utils.inference; no torch here.
"""
from __future__ import annotations

import gradio as gr
import numpy as np

from utils import inference
from utils.events import StudioError
from webui.context import AppContext

AUTO_VOCODER = "auto (the voice's vocoder, else Griffin-Lim)"
NO_VOICE = "No voice yet: train a run on the Training tab; its checkpoints and exported voices appear here."


# ------------------------------------------------------------------------------- handlers
def refresh(ctx: AppContext, current: str | None = None):
    """Voice and vocoder pickers filled from the workspace (keeps the current voice when it still exists)."""
    voices = inference.voice_choices(ctx.workspace)
    value = current if current in voices else (voices[0] if voices else None)
    vocoders = [AUTO_VOCODER, inference.GRIFFIN_LIM] + inference.list_vocoders(ctx.workspace)
    return gr.update(choices=voices, value=value), gr.update(choices=vocoders), speaker_choices(ctx, value)


def _speakers_or_none(ctx: AppContext, voice: str | None) -> list[str]:
    try:
        return inference.speakers(ctx.workspace, voice) if voice else []
    except StudioError:
        return []


def speaker_choices(ctx: AppContext, voice: str | None):
    names = _speakers_or_none(ctx, voice)
    return gr.update(choices=names, value=names[0] if names else None, visible=len(names) > 1)


def speak(ctx: AppContext, voice, speaker, text, steps, temperature, speed, vocoder):
    """-> ((sample_rate, wave), info markdown)."""
    try:
        wave, sr, info = inference.synthesize(
            ctx.workspace, voice, text, speaker=speaker or None, steps=int(steps), temperature=float(temperature),
            length_scale=1.0 / float(speed), vocoder=None if vocoder in (None, AUTO_VOCODER) else vocoder)
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    return (sr, (np.clip(wave, -1, 1) * 32767).astype(np.int16)), inference.describe(info)  # 16-bit for the player


def export(ctx: AppContext, checkpoint, name, vocoder, overwrite):
    try:
        folder = inference.export_voice(ctx.workspace, checkpoint, name,
                                        vocoder=None if vocoder in (None, AUTO_VOCODER) else vocoder,
                                        overwrite=bool(overwrite))
    except StudioError as exc:
        raise gr.Error(str(exc)) from None
    return f"Exported to `{folder.relative_to(ctx.workspace.root)}`; pick **{name}** above to use it."


# ----------------------------------------------------------------------------------- layout
def build(ctx: AppContext) -> None:
    gr.Markdown("Type Amharic, pick a voice (an exported voice or any training checkpoint) and press Speak. "
                "Without a trained vocoder the audio comes from Griffin-Lim: intelligible but buzzy.")
    voices = inference.voice_choices(ctx.workspace)
    first_speakers = _speakers_or_none(ctx, voices[0]) if voices else []
    with gr.Row():
        voice = gr.Dropdown(label="Voice or checkpoint", choices=voices, value=voices[0] if voices else None,
                            allow_custom_value=False, scale=3, elem_id="inference-voice",
                            info="" if voices else NO_VOICE)
        speaker = gr.Dropdown(label="Speaker", choices=first_speakers, scale=1, visible=len(first_speakers) > 1,
                              value=first_speakers[0] if first_speakers else None)
        vocoder = gr.Dropdown(label="Vocoder", value=AUTO_VOCODER, scale=2,
                              choices=[AUTO_VOCODER, inference.GRIFFIN_LIM] + inference.list_vocoders(ctx.workspace))
        reload = gr.Button("↻ Refresh", scale=0, min_width=90)
    text = gr.Textbox(label="Amharic text", lines=4, value=inference.SAMPLE_SENTENCES[0], elem_id="inference-text")
    gr.Examples(examples=[[s] for s in inference.SAMPLE_SENTENCES], inputs=[text], label="Sample sentences")
    with gr.Row():
        steps = gr.Slider(1, 50, value=inference.DEFAULT_STEPS, step=1, label="Steps (quality vs. speed)")
        temperature = gr.Slider(0.0, 1.5, value=inference.DEFAULT_TEMPERATURE, step=0.01,
                                label="Temperature (variation)")
        speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label="Speed")
    go = gr.Button("Speak", variant="primary", elem_id="inference-speak")
    audio = gr.Audio(label="Speech", type="numpy", interactive=False, elem_id="inference-audio")
    info = gr.Markdown(elem_id="inference-info")
    with gr.Accordion("Export a checkpoint as a voice", open=False):
        with gr.Row():
            export_from = gr.Dropdown(label="Checkpoint", choices=inference.list_acoustic_checkpoints(ctx.workspace))
            export_name = gr.Textbox(label="Voice name", placeholder="my-voice")
            export_vocoder = gr.Dropdown(label="Vocoder to include", value=AUTO_VOCODER,
                                         choices=[AUTO_VOCODER] + inference.list_vocoders(ctx.workspace))
            overwrite = gr.Checkbox(label="Overwrite", value=False)
        export_btn = gr.Button("Export voice")
        export_msg = gr.Markdown()

    def on_refresh(current):
        voices, vocoders, spk = refresh(ctx, current)
        checkpoints = inference.list_acoustic_checkpoints(ctx.workspace)
        return voices, vocoders, spk, gr.update(choices=checkpoints), gr.update(
            choices=[AUTO_VOCODER] + inference.list_vocoders(ctx.workspace))

    shown = gr.State(voices)  # the choices this browser has, so a tick only sends what changed

    def on_tick(current, before):  # a voice exported on the Training tab shows up here without a reload
        now = inference.voice_choices(ctx.workspace)
        if now == before and (current in now or not now):
            return gr.update(), gr.update(), before
        pick = gr.update(choices=now, info="" if now else NO_VOICE)
        if current not in now:
            pick = gr.update(choices=now, value=now[0] if now else None, info="" if now else NO_VOICE)
        return pick, gr.update(choices=inference.list_acoustic_checkpoints(ctx.workspace)), now

    gr.Timer(4.0).tick(on_tick, inputs=[voice, shown], outputs=[voice, export_from, shown], show_progress="hidden")
    reload.click(on_refresh, inputs=[voice], outputs=[voice, vocoder, speaker, export_from, export_vocoder],
                 api_name="inference_refresh")
    voice.change(lambda v: speaker_choices(ctx, v), inputs=[voice], outputs=[speaker], api_name="inference_speakers")
    go.click(lambda *a: speak(ctx, *a), inputs=[voice, speaker, text, steps, temperature, speed, vocoder],
             outputs=[audio, info], api_name="speak")
    export_btn.click(lambda *a: export(ctx, *a), inputs=[export_from, export_name, export_vocoder, overwrite],
                     outputs=[export_msg], api_name="export_voice")
