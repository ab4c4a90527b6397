"""Tab: every training setting, pre-filled from hardware detection, with its reason and what it trades."""
from __future__ import annotations

import gradio as gr

from utils import runs
from utils.events import StudioError
from webui.components import default_model_size
from webui.context import AppContext


def _component(row: runs.SettingRow):
    label = row.name.replace("_", " ")
    if row.name == "device":
        return gr.Dropdown(["cpu", "cuda", "mps"], value=row.value, label=label, info=row.help)
    if row.choices:
        return gr.Dropdown(row.choices, value=row.value, label=label, info=row.help)
    if isinstance(row.recommended, (int, float)) and not isinstance(row.recommended, bool):
        return gr.Number(value=row.value, label=label, info=row.help)
    return gr.Textbox(value=str(row.value), label=label, info=row.help)


def _explain(row: runs.SettingRow) -> str:
    return f"**why:** {row.reason}\n\n**trade:** {row.trade}"


def build(ctx: AppContext) -> list:
    ws = ctx.workspace
    gr.Markdown("**You do not need to change anything here**: every setting is already chosen for this machine. "
                "Every setting the trainer has, pre-filled for **this machine** (see the System tab). "
                "Change what you like and press **Save**: new runs start from these settings; anything left at the "
                "recommendation keeps following the hardware.")
    with gr.Row():
        preset = gr.Radio(["tiny", "small", "base"], value=default_model_size(),
                          label="model size the recommendations are for")
        save = gr.Button("Save settings", variant="primary", elem_id="save-settings")
        reset = gr.Button("Reset to recommended")
    changes = gr.Markdown(elem_id="settings-changes")
    rows = runs.settings_form(ws, preset.value)
    batch = gr.Markdown(runs.batch_summary(rows), elem_id="effective-batch")
    names = [r.name for r in rows]
    components, explanations = [], []
    for title, group in (("Speed and memory", runs.MACHINE_SETTINGS), ("Schedule, evaluation, checkpoints",
                                                                       runs.SCHEDULE_SETTINGS)):
        with gr.Accordion(title, open=title.startswith("Speed")):
            for row in rows:
                if row.name in group:
                    with gr.Row(equal_height=True):
                        components.append(_component(row))
                        explanations.append(gr.Markdown(_explain(row), elem_id=f"why-{row.name}"))

    gr.Markdown("### Measure what fits\nRuns the batch probe on a dataset: one real training step on the longest "
                "batch, then bisection to the largest batch that fits this GPU, with headroom.")
    with gr.Row():
        dataset = gr.Dropdown(ws.list_datasets(), label="dataset")
        measure = gr.Button("Measure")
    measured = gr.Markdown(elem_id="probe-result")

    # ------------------------------------------------------------------------------- events
    def fill(preset):
        form = runs.settings_form(ws, preset)
        return [gr.update(value=r.value) for r in form] + [_explain(r) for r in form] + [
            runs.batch_summary(form)]

    def on_save(preset, *values):
        try:
            saved, lines = runs.save_form(ws, preset, dict(zip(names, values)))
        except (StudioError, ValueError) as exc:
            raise gr.Error(str(exc))
        text = ("Saved. New runs use:\n\n" + "\n\n".join(lines)) if lines else "Saved: every setting follows the recommendation."
        return [text] + fill(preset)

    def on_reset(preset):
        runs.save_settings(ws, {})
        return ["Back to the recommended settings for this machine."] + fill(preset)

    def on_measure(dataset, preset):
        try:
            return runs.start_probe(ws, dataset, preset)
        except StudioError as exc:
            raise gr.Error(str(exc))

    outputs = components + explanations + [batch]
    preset.change(fill, preset, outputs, show_progress="hidden")
    save.click(on_save, [preset] + components, [changes] + outputs, api_name="save_settings")
    reset.click(on_reset, preset, [changes] + outputs, api_name="reset_settings")
    measure.click(on_measure, [dataset, preset], measured, api_name="measure_batch")
    gr.Timer(3.0).tick(lambda: runs.probe_report(ws), None, measured, show_progress="hidden")
    return [(fill, [preset], outputs)]
